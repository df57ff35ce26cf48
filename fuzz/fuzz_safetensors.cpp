// libFuzzer target: any byte string given to the safetensors reader either parses or throws
// FormatError. Anything else (another exception, a sanitizer report, a crash) is a bug.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "format/safetensors.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto bytes = std::as_bytes(std::span(data, size));
    const auto tensors = peregrine::parse_safetensors(bytes, "fuzz.safetensors");
    // Use what was parsed: every view must lie inside the input; read its first and last byte.
    unsigned sum = 0;
    for (const auto& t : tensors) {
      if (t.data.empty()) continue;
      sum += static_cast<unsigned>(t.data.front()) + static_cast<unsigned>(t.data.back());
      if (t.data.size() != static_cast<size_t>(t.n_elements()) * peregrine::tensor_type_info(t.type).block_bytes) __builtin_trap();
    }
    (void)sum;
  } catch (const peregrine::FormatError&) {
  }
  return 0;
}
