#include "cli/embedded_model.h"

#define PEREGRINE_DEMO_SYMBOLS(name)                            \
  extern "C" const unsigned char peregrine_demo_##name##_begin[]; \
  extern "C" const unsigned char peregrine_demo_##name##_end[];
#ifdef PEREGRINE_DEMO_TARGET
PEREGRINE_DEMO_SYMBOLS(target)
#endif
#ifdef PEREGRINE_DEMO_DRAFT
PEREGRINE_DEMO_SYMBOLS(draft)
#endif
#ifdef PEREGRINE_DEMO_HEADS
PEREGRINE_DEMO_SYMBOLS(heads)
#endif

namespace peregrine::cli {
namespace {

std::span<const std::byte> bytes(const unsigned char* begin, const unsigned char* end) {
  return {reinterpret_cast<const std::byte*>(begin), reinterpret_cast<const std::byte*>(end)};
}

}  // namespace

std::optional<std::span<const std::byte>> embedded_demo_file(std::string_view name) {
#ifdef PEREGRINE_DEMO_TARGET
  if (name == "target") return bytes(peregrine_demo_target_begin, peregrine_demo_target_end);
#endif
#ifdef PEREGRINE_DEMO_DRAFT
  if (name == "draft") return bytes(peregrine_demo_draft_begin, peregrine_demo_draft_end);
#endif
#ifdef PEREGRINE_DEMO_HEADS
  if (name == "heads") return bytes(peregrine_demo_heads_begin, peregrine_demo_heads_end);
#endif
  return std::nullopt;
}

}  // namespace peregrine::cli
