// Interleaved copies (int8_layout.h): plain byte moves, run once per matrix at load.
#include "kernels/int8_layout.h"

#include <cstring>
#include <stdexcept>

namespace peregrine {

TensorType interleaved_source_type(TensorType type) {
  return type == TensorType::Q4_0_X16 ? TensorType::Q4_0 : type;
}

size_t interleaved_bytes(TensorType layout, int64_t n_rows, int64_t n_in) {
  if (!is_interleaved_type(layout)) throw std::invalid_argument("interleaved_bytes: not an interleaved layout");
  const int64_t groups = (n_rows + kInterleaveRows - 1) / kInterleaveRows;
  return static_cast<size_t>(groups * kInterleaveRows) * tensor_bytes(interleaved_source_type(layout), n_in);
}

void interleave_rows(TensorType layout, const std::byte* rows, size_t stride, int64_t n_rows, int64_t n_in,
                     std::byte* out) {
  const size_t bytes = interleaved_bytes(layout, n_rows, n_in);
  std::memset(out, 0, bytes);
  constexpr size_t kQ4_0Bytes = 18, kChunk = 4 * kInterleaveRows;
  const int64_t n_blocks = n_in / 32;
  const size_t group_bytes = static_cast<size_t>(n_blocks) * kQ4_0X16BlockBytes;
  for (int64_t r = 0; r < n_rows; ++r) {
    const std::byte* src = rows + static_cast<size_t>(r) * stride;
    std::byte* group = out + static_cast<size_t>(r / kInterleaveRows) * group_bytes;
    const auto lane = static_cast<size_t>(r % kInterleaveRows);
    for (int64_t b = 0; b < n_blocks; ++b) {
      const std::byte* blk = src + static_cast<size_t>(b) * kQ4_0Bytes;
      std::byte* dst = group + static_cast<size_t>(b) * kQ4_0X16BlockBytes;
      for (size_t c = 0; c < 4; ++c) std::memcpy(dst + c * kChunk + 4 * lane, blk + 2 + 4 * c, 4);
      std::memcpy(dst + 4 * kChunk + 2 * lane, blk, 2);  // the f16 scale
    }
  }
}

}  // namespace peregrine
