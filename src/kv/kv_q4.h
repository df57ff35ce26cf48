#pragma once
// The KV cache's 4-bit row format (KvType::Q4_0): a row of n values is n / 2 bytes and n / g f16
// scales, g = 32 (or the whole row when n is not a multiple of 32; n even). Block b's g values
// live in bytes [b g / 2, (b + 1) g / 2): byte j holds value j in its low nibble and value j + g / 2
// in its high one (GGUF Q4_0's order), value = scale * (nibble - 8).
//
// Quantization is Q4_0's (the block's largest-magnitude value m gets the scale m / -8, so it
// lands exactly on -8 and all 16 levels are used; round to nearest, ties away from zero) with
// the scale's magnitude rounded UP to the next f16, as the Q8_0 cache does: every value is within
// half a step of the original except those of m's opposite sign beyond 7.5 steps, which clip to
// +7 (at most one step).
#include <cstdint>

namespace peregrine {

// x: [n] -> q: [n / 2], scales: [n / group]. n a multiple of group, group even. Non-finite
// inputs store 8 (zero) within a block whose scale ignores them.
void quantize_kv_q4_row(const float* x, uint8_t* q, uint16_t* scales, int64_t n, int64_t group = 32);
// q: [n / 2], scales: [n / group] -> dst: [n]. Every product is exact in f32.
void dequantize_kv_q4_row(const uint8_t* q, const uint16_t* scales, float* dst, int64_t n, int64_t group = 32);

}  // namespace peregrine
