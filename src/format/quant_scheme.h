#pragma once
// Which type each weight tensor gets when a model is quantized (`convert --type`, `synth --type`,
// `run/serve/info --type`): a plain type name puts every weight matrix in that type; a mix name
// (`q2_k`, `q3_k_m`, `q4_k_m`, `q5_k_m`) chooses per tensor as llama.cpp's quantizer does for
// that file type (llama_tensor_get_type in llama.cpp's src/llama-quant.cpp):
//
//   tensor                          q2_k             q3_k_m                q4_k_m / q5_k_m
//   (base type)                     Q2_K             Q3_K                  Q4_K / Q5_K
//   output.weight (token_embd.weight when the head is tied to it)
//                                   Q6_K (Q8_0 when its rows do not split into 256-blocks)
//   attn_v.weight, attn_qkv.weight  Q4_K if n_head / n_head_kv >= 4, else Q3_K
//                                                    Q5_K in layers 0-1,   Q6_K in use_more_bits layers
//                                                    else Q4_K
//   ffn_down* (dense and experts)   Q3_K             Q5_K in the first n/16 layers, else Q4_K
//                                                                          Q6_K in use_more_bits layers
//   attn_output.weight              Q3_K             Q4_K                  (base)
//   with 8 experts (Mixtral):       attn_v and attn_k Q8_0; attn_output Q5_K (q2_k, q3_k_m, q4_k_m)
//
// use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2 for layer i of n; layers are read
// from the tensor names (llama.cpp counts attn_v / ffn_down tensors in layer order, the same
// numbers for one per layer). Not quantized, in every scheme: 1-D tensors, names not ending in
// "weight", norms, the experts' router (ffn_gate_inp). A mix's tensor whose rows do not split into
// its type's blocks falls back as llama.cpp's does (fallback_type). Not reproduced: llama.cpp's
// rule for 70B models (attn_v Q5_K; it needs the model-size class) and its importance-matrix
// variants.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "format/metadata.h"
#include "format/tensor_type.h"

namespace peregrine {

enum class QuantMix { None, Q2_K, Q3_K_M, Q4_K_M, Q5_K_M };

struct QuantScheme {
  TensorType base = TensorType::F32;  // every matrix (QuantMix::None), or the mix's base type
  QuantMix mix = QuantMix::None;

  QuantScheme() = default;
  // A plain type is a scheme (implicit, so a TensorType stands wherever a scheme is expected).
  QuantScheme(TensorType t) : base(t) {}  // NOLINT(google-explicit-constructor)
  QuantScheme(TensorType t, QuantMix m) : base(t), mix(m) {}
  bool operator==(const QuantScheme&) const = default;
};

// A type name (tensor_type_name's, case-insensitive) or a mix name (q2_k, q3_k_m, q4_k_m, q5_k_m);
// nullopt for anything else. Note `q2_k` is the mix (as llama-quantize's Q2_K is): a file with
// every matrix Q2_K has no name here.
std::optional<QuantScheme> parse_quant_scheme(std::string_view name);
// "q4_0", "q4_k_m", ...: the name parse_quant_scheme reads back.
std::string quant_scheme_name(const QuantScheme& scheme);
// Every name parse_quant_scheme accepts, comma-separated, for help texts and errors.
std::string quant_scheme_names();

// llama.cpp's general.file_type (llama_ftype) of a file written with `scheme`. A plain K-quant
// is its "_S" file type (every matrix one type): Q3_K_S, Q4_K_S, Q5_K_S.
uint32_t llama_file_type(const QuantScheme& scheme);

// What the mixes look at in a model.
struct QuantModelInfo {
  int64_t n_layers = 0;
  int64_t n_gqa = 1;  // n_head / n_head_kv
  int64_t n_experts = 0;
  bool has_output = true;  // false: the head is tied to token_embd.weight
};
// From a model's GGUF metadata ({arch}.block_count, attention.head_count(_kv), expert_count).
QuantModelInfo quant_model_info(const Metadata& meta, bool has_output);

// Whether a tensor may be quantized at all (see the header comment). shape: GGUF order.
bool is_quantizable_weight(std::string_view name, std::span<const int64_t> shape);
// The type a quantizable tensor gets under a mix (scheme.mix != None), fallback included.
TensorType mix_tensor_type(const QuantScheme& scheme, const QuantModelInfo& model, std::string_view name,
                           int64_t row_length);
// llama.cpp's fallback for rows that do not split into `requested`'s blocks: Q2_K/Q3_K -> Q4_0,
// Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL; then F16 if that does not fit
// either. `requested` itself when it fits.
TensorType fallback_type(TensorType requested, int64_t row_length);

}  // namespace peregrine
