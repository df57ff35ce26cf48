// Interleaved copies (int8_layout.h): plain byte moves, run once per matrix at load.
#include "kernels/int8_layout.h"

#include <cstring>
#include <stdexcept>

namespace peregrine {

TensorType interleaved_source_type(TensorType type) {
  switch (type) {
    case TensorType::Q4_0_X16:
      return TensorType::Q4_0;
    case TensorType::Q8_0_X16:
      return TensorType::Q8_0;
    default:
      return type;
  }
}

size_t interleaved_block_bytes(TensorType layout) {
  if (!is_interleaved_type(layout)) throw std::invalid_argument("not an interleaved layout");
  return static_cast<size_t>(kInterleaveRows * tensor_type_info(interleaved_source_type(layout)).block_bytes);
}

size_t interleaved_bytes(TensorType layout, int64_t n_rows, int64_t n_in) {
  const int64_t groups = (n_rows + kInterleaveRows - 1) / kInterleaveRows;
  return static_cast<size_t>(groups) * static_cast<size_t>(n_in / 32) * interleaved_block_bytes(layout);
}

void interleave_rows(TensorType layout, const std::byte* rows, size_t stride, int64_t n_rows, int64_t n_in,
                     std::byte* out) {
  std::memset(out, 0, interleaved_bytes(layout, n_rows, n_in));
  // Both source types: an f16 scale, then the quant bytes.
  const auto src_block = static_cast<size_t>(tensor_type_info(interleaved_source_type(layout)).block_bytes);
  const size_t quant_bytes = src_block - 2, block = interleaved_block_bytes(layout);
  constexpr size_t kChunk = 4 * kInterleaveRows;
  const int64_t n_blocks = n_in / 32;
  const size_t group_bytes = static_cast<size_t>(n_blocks) * block;
  for (int64_t r = 0; r < n_rows; ++r) {
    const std::byte* src = rows + static_cast<size_t>(r) * stride;
    std::byte* group = out + static_cast<size_t>(r / kInterleaveRows) * group_bytes;
    const auto lane = static_cast<size_t>(r % kInterleaveRows);
    for (int64_t b = 0; b < n_blocks; ++b) {
      const std::byte* blk = src + static_cast<size_t>(b) * src_block;
      std::byte* dst = group + static_cast<size_t>(b) * block;
      for (size_t c = 0; c < quant_bytes / 4; ++c) std::memcpy(dst + c * kChunk + 4 * lane, blk + 2 + 4 * c, 4);
      std::memcpy(dst + quant_bytes / 4 * kChunk + 2 * lane, blk, 2);  // the f16 scale
    }
  }
}

}  // namespace peregrine
