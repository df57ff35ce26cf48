#pragma once
// The KV cache's 8-bit row format (KvType::Q8_0): a row of n values (n a multiple of 32) is n
// int8 and n / 32 f16 scales, value i = scale[i / 32] * q[i] (a row of another length: one scale).
//
// Quantization is Q8_0's (round to nearest, ties away from zero, q in [-127, 127]) with one
// difference: the scale d = absmax / 127 is rounded UP to the next f16, and the values are
// quantized against that stored scale. So no value ever clips and every value is within half a
// step (scale / 2) of the original, whatever the f16 rounding of the scale did.
#include <cstdint>

namespace peregrine {

// x: [n] -> q: [n], scales: [n / group]. n a multiple of group (32, or a whole row whose length
// is not a multiple of 32). Non-finite inputs quantize to 0 within a block whose scale ignores them.
void quantize_kv_q8_row(const float* x, int8_t* q, uint16_t* scales, int64_t n, int64_t group = 32);
// q: [n], scales: [n / group] -> dst: [n]. Every product is exact in f32 (11-bit scale mantissa
// times an 8-bit integer), so any implementation gives the same bits.
void dequantize_kv_q8_row(const int8_t* q, const uint16_t* scales, float* dst, int64_t n, int64_t group = 32);

}  // namespace peregrine
