// Quantization schemes: names, file types, and the per-tensor choices of llama.cpp's mixes
// (expected layers written out from llama.cpp's rules for a 32-layer model, not computed by the
// code under test), fallbacks for ragged rows, and what is never quantized.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "format/quant_scheme.h"

namespace peregrine {
namespace {

const QuantModelInfo kLlama32{.n_layers = 32, .n_gqa = 4, .n_experts = 0, .has_output = true};

TensorType type_of(const QuantScheme& s, const QuantModelInfo& m, const std::string& name, int64_t row = 4096) {
  return mix_tensor_type(s, m, name, row);
}

std::string blk(int i, const char* what) { return "blk." + std::to_string(i) + "." + what; }

TEST(QuantScheme, NamesParseAndPrintBack) {
  EXPECT_EQ(parse_quant_scheme("q4_k_m"), QuantScheme(TensorType::Q4_K, QuantMix::Q4_K_M));
  EXPECT_EQ(parse_quant_scheme("Q5_K_M"), QuantScheme(TensorType::Q5_K, QuantMix::Q5_K_M));
  EXPECT_EQ(parse_quant_scheme("q3_k_m"), QuantScheme(TensorType::Q3_K, QuantMix::Q3_K_M));
  EXPECT_EQ(parse_quant_scheme("q2_k"), QuantScheme(TensorType::Q2_K, QuantMix::Q2_K));  // the mix
  EXPECT_EQ(parse_quant_scheme("q5_k"), QuantScheme(TensorType::Q5_K));                  // plain
  EXPECT_EQ(parse_quant_scheme("IQ4_NL"), QuantScheme(TensorType::IQ4_NL));
  EXPECT_FALSE(parse_quant_scheme("q4_k_s").has_value());
  EXPECT_FALSE(parse_quant_scheme("").has_value());
  for (const char* n : {"f32", "bf16", "q8_0", "q4_1", "q5_0", "q5_1", "q3_k", "iq4_xs", "q2_k", "q4_k_m"}) {
    ASSERT_TRUE(parse_quant_scheme(n).has_value()) << n;
    EXPECT_EQ(quant_scheme_name(*parse_quant_scheme(n)), n);
    EXPECT_NE(quant_scheme_names().find(n), std::string::npos) << n;
  }
}

TEST(QuantScheme, LlamaFileTypes) {
  EXPECT_EQ(llama_file_type(*parse_quant_scheme("q2_k")), 10u);
  EXPECT_EQ(llama_file_type(*parse_quant_scheme("q3_k_m")), 12u);
  EXPECT_EQ(llama_file_type(*parse_quant_scheme("q4_k_m")), 15u);
  EXPECT_EQ(llama_file_type(*parse_quant_scheme("q5_k_m")), 17u);
  EXPECT_EQ(llama_file_type(TensorType::Q4_K), 14u);  // every matrix Q4_K: Q4_K_S
  EXPECT_EQ(llama_file_type(TensorType::Q4_1), 3u);
  EXPECT_EQ(llama_file_type(TensorType::Q5_0), 8u);
  EXPECT_EQ(llama_file_type(TensorType::Q5_1), 9u);
  EXPECT_EQ(llama_file_type(TensorType::IQ4_NL), 25u);
  EXPECT_EQ(llama_file_type(TensorType::IQ4_XS), 30u);
}

TEST(QuantScheme, Q4_K_MAndQ5_K_MGiveAttnVAndFfnDownQ6_KInUseMoreBitsLayers) {
  // n = 32: i < 4, i >= 28, or (i - 4) % 3 == 2.
  const std::set<int> more = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
  for (const char* mix : {"q4_k_m", "q5_k_m"}) {
    const QuantScheme s = *parse_quant_scheme(mix);
    for (int i = 0; i < 32; ++i) {
      const TensorType want = more.count(i) ? TensorType::Q6_K : s.base;
      EXPECT_EQ(type_of(s, kLlama32, blk(i, "attn_v.weight")), want) << mix << " layer " << i;
      EXPECT_EQ(type_of(s, kLlama32, blk(i, "ffn_down.weight")), want) << mix << " layer " << i;
      for (const char* other :
           {"attn_q.weight", "attn_k.weight", "attn_output.weight", "ffn_gate.weight", "ffn_up.weight"}) {
        EXPECT_EQ(type_of(s, kLlama32, blk(i, other)), s.base) << mix << " " << other;
      }
    }
    EXPECT_EQ(type_of(s, kLlama32, "output.weight"), TensorType::Q6_K);
    EXPECT_EQ(type_of(s, kLlama32, "token_embd.weight"), s.base);
  }
}

TEST(QuantScheme, Q3_K_MAndQ2_K) {
  const QuantScheme q3 = *parse_quant_scheme("q3_k_m");
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(type_of(q3, kLlama32, blk(i, "attn_v.weight")), i < 2 ? TensorType::Q5_K : TensorType::Q4_K);
    EXPECT_EQ(type_of(q3, kLlama32, blk(i, "ffn_down.weight")), i < 2 ? TensorType::Q5_K : TensorType::Q4_K);
    EXPECT_EQ(type_of(q3, kLlama32, blk(i, "attn_output.weight")), TensorType::Q4_K);
    EXPECT_EQ(type_of(q3, kLlama32, blk(i, "ffn_up.weight")), TensorType::Q3_K);
  }
  const QuantScheme q2 = *parse_quant_scheme("q2_k");
  QuantModelInfo mha = kLlama32;
  mha.n_gqa = 1;
  EXPECT_EQ(type_of(q2, kLlama32, blk(5, "attn_v.weight")), TensorType::Q4_K);  // GQA 4
  EXPECT_EQ(type_of(q2, mha, blk(5, "attn_v.weight")), TensorType::Q3_K);
  EXPECT_EQ(type_of(q2, mha, blk(5, "ffn_down.weight")), TensorType::Q3_K);
  EXPECT_EQ(type_of(q2, mha, blk(5, "attn_output.weight")), TensorType::Q3_K);
  EXPECT_EQ(type_of(q2, mha, blk(5, "attn_q.weight")), TensorType::Q2_K);
  EXPECT_EQ(type_of(q2, mha, blk(5, "ffn_gate.weight")), TensorType::Q2_K);
  EXPECT_EQ(type_of(q2, mha, "token_embd.weight"), TensorType::Q2_K);
  QuantModelInfo tied = mha;
  tied.has_output = false;
  EXPECT_EQ(type_of(q2, tied, "token_embd.weight"), TensorType::Q6_K);  // the head's rule
}

TEST(QuantScheme, EightExpertsBumpAttentionAndExpertsFollowFfnDown) {
  QuantModelInfo mixtral = kLlama32;
  mixtral.n_experts = 8;
  for (const char* mix : {"q2_k", "q3_k_m", "q4_k_m"}) {
    const QuantScheme s = *parse_quant_scheme(mix);
    EXPECT_EQ(type_of(s, mixtral, blk(10, "attn_v.weight")), TensorType::Q8_0) << mix;
    EXPECT_EQ(type_of(s, mixtral, blk(10, "attn_k.weight")), TensorType::Q8_0) << mix;
    EXPECT_EQ(type_of(s, mixtral, blk(10, "attn_output.weight")), TensorType::Q5_K) << mix;
  }
  EXPECT_EQ(type_of(*parse_quant_scheme("q5_k_m"), mixtral, blk(10, "attn_output.weight")), TensorType::Q5_K);
  EXPECT_EQ(type_of(*parse_quant_scheme("q4_k_m"), mixtral, blk(0, "ffn_down_exps.weight")), TensorType::Q6_K);
  EXPECT_EQ(type_of(*parse_quant_scheme("q4_k_m"), mixtral, blk(4, "ffn_down_exps.weight")), TensorType::Q4_K);
  EXPECT_EQ(type_of(*parse_quant_scheme("q2_k"), mixtral, blk(4, "ffn_down_shexp.weight")), TensorType::Q3_K);
}

TEST(QuantScheme, RaggedRowsFallBackAsLlamaCpp) {
  const QuantScheme q4 = *parse_quant_scheme("q4_k_m");
  EXPECT_EQ(type_of(q4, kLlama32, blk(4, "attn_q.weight"), 896), TensorType::Q5_0);
  EXPECT_EQ(type_of(q4, kLlama32, blk(0, "attn_v.weight"), 896), TensorType::Q8_0);  // Q6_K -> Q8_0
  EXPECT_EQ(type_of(q4, kLlama32, "output.weight", 896), TensorType::Q8_0);
  EXPECT_EQ(type_of(q4, kLlama32, "output.weight", 100), TensorType::F16);
  EXPECT_EQ(type_of(*parse_quant_scheme("q5_k_m"), kLlama32, blk(4, "attn_q.weight"), 896), TensorType::Q5_1);
  EXPECT_EQ(type_of(*parse_quant_scheme("q2_k"), kLlama32, blk(4, "attn_q.weight"), 896), TensorType::Q4_0);
  EXPECT_EQ(fallback_type(TensorType::IQ4_XS, 96), TensorType::IQ4_NL);
  EXPECT_EQ(fallback_type(TensorType::Q3_K, 100), TensorType::F16);
}

TEST(QuantScheme, NormsRoutersAndVectorsAreNotQuantized) {
  const std::vector<int64_t> matrix = {256, 256}, vec = {256};
  EXPECT_TRUE(is_quantizable_weight("blk.0.attn_q.weight", matrix));
  EXPECT_TRUE(is_quantizable_weight("blk.0.ffn_up_exps.weight", std::vector<int64_t>{256, 512, 8}));
  EXPECT_FALSE(is_quantizable_weight("blk.0.ffn_gate_inp.weight", matrix));
  EXPECT_FALSE(is_quantizable_weight("blk.0.attn_norm.weight", matrix));
  EXPECT_FALSE(is_quantizable_weight("blk.0.attn_q.bias", matrix));
  EXPECT_FALSE(is_quantizable_weight("blk.0.attn_q.weight", vec));
}

TEST(QuantScheme, ModelInfoFromMetadata) {
  Metadata m;
  m.set("general.architecture", MetaValue::string("qwen2"));
  m.set("qwen2.block_count", MetaValue::u32(24));
  m.set("qwen2.attention.head_count", MetaValue::u32(14));
  m.set("qwen2.attention.head_count_kv", MetaValue::u32(2));
  const QuantModelInfo info = quant_model_info(m, false);
  EXPECT_EQ(info.n_layers, 24);
  EXPECT_EQ(info.n_gqa, 7);
  EXPECT_EQ(info.n_experts, 0);
  EXPECT_FALSE(info.has_output);
}

}  // namespace
}  // namespace peregrine
