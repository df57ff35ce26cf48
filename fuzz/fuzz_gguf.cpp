// libFuzzer target: any byte string given to the GGUF reader either parses or throws
// FormatError. Anything else (another exception, a sanitizer report, a crash) is a bug.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "format/gguf.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto bytes = std::as_bytes(std::span(data, size));
    peregrine::ModelFile mf = peregrine::read_gguf_bytes(bytes, "fuzz.gguf");
    // Use what was parsed: read every view's first row and every metadata value.
    std::vector<float> row;
    for (const auto& t : mf.tensors) {
      if (t.row_length() > (1 << 20)) continue;
      row.resize(static_cast<size_t>(t.row_length()));
      t.dequantize_row_to(0, row);
      t.dequantize_row_to(t.n_rows() - 1, row);
    }
    for (const auto& [key, value] : mf.meta.entries()) {
      if (value.is_integer()) (void)mf.meta.get_int_opt(key);
    }
  } catch (const peregrine::FormatError&) {
  }
  return 0;
}
