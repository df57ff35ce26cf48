#include "cli/embedded_model.h"

#ifdef PEREGRINE_EMBEDDED_MODEL
extern "C" const unsigned char peregrine_embedded_model_begin[];
extern "C" const unsigned char peregrine_embedded_model_end[];
#endif

namespace peregrine::cli {

std::optional<std::span<const std::byte>> embedded_demo_model() {
#ifdef PEREGRINE_EMBEDDED_MODEL
  const auto* begin = reinterpret_cast<const std::byte*>(peregrine_embedded_model_begin);
  const auto* end = reinterpret_cast<const std::byte*>(peregrine_embedded_model_end);
  return std::span<const std::byte>(begin, end);
#else
  return std::nullopt;
#endif
}

}  // namespace peregrine::cli
