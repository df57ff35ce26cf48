#pragma once
// The KV cache's 8-bit float row format (KvType::FP8_E4M3): a row of n values (one position of
// one KV head) is n E4M3 codes and one f16 scale, value i = scale * e4m3(code[i]).
//
// E4M3 is the OCP "FN" format GPUs use for FP8: 1 sign, 4 exponent (bias 7) and 3 mantissa bits,
// no infinities, 0x7F/0xFF NaN (never written here); the largest finite value is 448, the
// smallest 2^-9. The scale is the row's largest magnitude over 448, rounded UP to the next f16,
// and codes round to nearest (ties to even) against that stored scale, so nothing clips: each
// value is within half a unit of E4M3's last place, relative error at most 2^-4 (normals).
// Against Q8_0 it saves the per-32 scales (n + 2 bytes a row, not 1.0625 n) and keeps small
// values' relative precision instead of an absolute step.
#include <cstdint>

namespace peregrine {

// x: [n] -> codes: [n], *scale. Non-finite inputs store 0 and do not set the scale.
void quantize_kv_fp8_row(const float* x, uint8_t* codes, uint16_t* scale, int64_t n);
// codes: [n], the f16 scale -> dst: [n]. Every product is exact in f32 (a 4-bit significand
// times an 11-bit one), so any implementation gives the same bits.
void dequantize_kv_fp8_row(const uint8_t* codes, uint16_t scale, float* dst, int64_t n);
// One E4M3 code as f32 (exact). For tests and the scalar path.
float e4m3_to_f32(uint8_t code);

}  // namespace peregrine
