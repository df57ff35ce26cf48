#include "kernels/kernel_table.h"

#include <stdexcept>
#include <string>

#include "kernels/scalar.h"
#include "kernels/x86/simd_avx2.h"
#include "kernels/x86/simd_avx512.h"
#include "kernels/x86/simd_avx512_bf16.h"
#include "kv/kv_fp8.h"
#include "kv/kv_q4.h"
#include "kv/kv_q8.h"

namespace peregrine {
namespace {

void scalar_glu(Glu kind, const float* gate, const float* up, float* out, int64_t n) {
  const auto len = static_cast<size_t>(n);
  apply_glu(kind, {gate, len}, {up, len}, {out, len});
}

KernelTable make_scalar() {
  KernelTable k;
  k.isa = Isa::Scalar;
  k.dot_f32 = scalar::dot_f32;
  k.glu = scalar_glu;
  k.dequantize_row = scalar::dequantize_row;
  k.quantize_q8_blocks = quantize_q8_blocks;
  k.matmul_int8 = scalar::matmul_int8;
  k.int8_scratch_bytes = scalar::int8_scratch_bytes;
  k.tile_scores = scalar::tile_scores;
  k.scale_max = scalar::scale_max;
  k.sum_exp = scalar::sum_exp;
  k.exp_shifted = scalar::exp_shifted;
  k.accumulate_rows = scalar::accumulate_rows;
  k.scale = scalar::scale;
  k.dequantize_kv_q8_row = dequantize_kv_q8_row;
  k.dequantize_kv_fp8_row = dequantize_kv_fp8_row;
  k.dequantize_kv_q4_row = dequantize_kv_q4_row;
  return k;
}

KernelTable make_avx2() {
  KernelTable k;
  k.isa = Isa::Avx2;
  k.dot_f32 = avx2::dot_f32;
  k.glu = avx2::glu;
  k.dequantize_row = avx2::dequantize_row;
  k.fused_dot = avx2::has_fused;
  k.dot_row = avx2::dot_row;
  k.float_gemm = avx2::has_float_gemm;
  k.matmul_float = avx2::matmul_float;
  k.quantize_q8_blocks = avx2::quantize_q8_blocks;
  k.matmul_int8 = avx2::matmul_int8;
  k.int8_scratch_bytes = avx2::int8_unpack_scratch_bytes;
  k.tile_scores = avx2::tile_scores;
  k.scale_max = avx2::scale_max;
  k.sum_exp = avx2::sum_exp;
  k.exp_shifted = avx2::exp_shifted;
  k.accumulate_rows = avx2::accumulate_rows;
  k.scale = avx2::scale;
  k.dequantize_kv_q8_row = avx2::dequantize_kv_q8_row;
  k.dequantize_kv_fp8_row = avx2::dequantize_kv_fp8_row;
  k.dequantize_kv_q4_row = avx2::dequantize_kv_q4_row;
  return k;
}

// AVX-512 F/BW/VL/VNNI: its own float GEMM (a 16-lane order) and integer kernels, and the bf16
// GEMM where the CPU has AVX512-BF16; the rest is AVX2's, which this CPU also runs. dot_f32 stays
// AVX2's so that it keeps dot_row's order, as the table requires of a path with fused dots.
KernelTable make_avx512() {
  KernelTable k = make_avx2();
  k.isa = Isa::Avx512;
  k.float_gemm = avx512::has_float_gemm;
  k.matmul_float = avx512::matmul_float;
  k.quantize_q8_blocks = avx512::quantize_q8_blocks;
  k.matmul_int8 = avx512::matmul_int8;
  k.int8_scratch_bytes = avx512::int8_unpack_scratch_bytes;
  k.int8_token_block = avx512::kInt8TokenBlock;
  k.tile_scores = avx512::tile_scores;
  k.accumulate_rows = avx512::accumulate_rows;
  if (cpu_has_avx512_bf16()) {
    k.round_bf16 = avx512::round_to_bf16;
    k.matmul_bf16 = avx512::matmul_bf16;
    k.matmul_bf16_groups = avx512::matmul_bf16_groups;
  }
  return k;
}

}  // namespace

const KernelTable& kernel_table(Isa isa) {
  static const KernelTable scalar_table = make_scalar();
  static const KernelTable avx2_table = make_avx2();
  static const KernelTable avx512_table = make_avx512();
  if (!isa_supported(isa)) {
    throw std::invalid_argument("kernels: this CPU cannot run the " + std::string(isa_name(isa)) + " path");
  }
  switch (isa) {
    case Isa::Scalar: return scalar_table;
    case Isa::Avx2: return avx2_table;
    case Isa::Avx512: return avx512_table;
  }
  return scalar_table;
}

}  // namespace peregrine
