#include "kernels/bf16_pack.h"

#include <cstring>
#include <stdexcept>

namespace peregrine {

size_t bf16_groups_bytes(int64_t n_rows, int64_t n) {
  const auto groups = static_cast<size_t>((n_rows + kBf16GroupRows - 1) / kBf16GroupRows);
  const auto pairs = static_cast<size_t>((n + 1) / 2);
  return groups * pairs * kBf16GroupRows * 2 * sizeof(uint16_t);
}

void pack_bf16_groups(TensorType type, const std::byte* rows, size_t row_stride, int64_t n_rows, int64_t n,
                      std::byte* out) {
  if (type != TensorType::F16 && type != TensorType::BF16) {
    throw std::invalid_argument("pack_bf16_groups: only F16 and BF16 rows pack");
  }
  const int64_t np = (n + 1) / 2, groups = (n_rows + kBf16GroupRows - 1) / kBf16GroupRows;
  auto* dst = reinterpret_cast<uint16_t*>(out);
  // Every element written once, the padding as zeros: no pass over the whole buffer first.
  for (int64_t g = 0; g < groups; ++g) {
    uint16_t* group = dst + g * np * 2 * kBf16GroupRows;
    for (int64_t j = 0; j < kBf16GroupRows; ++j) {
      const int64_t r = g * kBf16GroupRows + j;
      const std::byte* src = r < n_rows ? rows + static_cast<size_t>(r) * row_stride : nullptr;
      for (int64_t i = 0; i < 2 * np; ++i) {
        uint16_t h = 0;
        if (src != nullptr && i < n) {
          std::memcpy(&h, src + 2 * i, 2);
          if (type == TensorType::F16) h = fp32_to_bf16(fp16_to_fp32(h));
        }
        // Element i of row j: vector i / 2, lane j, half i % 2.
        group[(i / 2) * 2 * kBf16GroupRows + 2 * j + i % 2] = h;
      }
    }
  }
}

}  // namespace peregrine
