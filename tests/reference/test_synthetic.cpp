// Synthetic GGUF models: determinism, metadata and shapes, presets, vocabulary validity.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <set>

#include "common/test_paths.h"
#include "format/convert.h"
#include "format/gguf.h"
#include "model/config.h"
#include "synth/synthetic.h"
#include "tiny_specs.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace peregrine {
namespace {

std::vector<char> file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<float> row_of(const TensorView& t, int64_t r) {
  std::vector<float> v(static_cast<size_t>(t.row_length()));
  t.dequantize_row_to(r, v);
  return v;
}

TEST(Synthetic, SameSeedGivesIdenticalBytesAndOtherSeedOtherWeights) {
  auto dir = test::scratch_dir("synthetic_determinism");
  SyntheticSpec spec = test::tiny_specs()[1];
  write_synthetic_gguf(spec, TensorType::Q4_K, 7, dir / "a.gguf");
  write_synthetic_gguf(spec, TensorType::Q4_K, 7, dir / "b.gguf");
  write_synthetic_gguf(spec, TensorType::Q4_K, 8, dir / "c.gguf");
  auto a = file_bytes(dir / "a.gguf"), b = file_bytes(dir / "b.gguf"), c = file_bytes(dir / "c.gguf");
  ASSERT_GT(a.size(), 100000u);
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), c.size());  // same layout...
  EXPECT_NE(a, c);                // ...other values

  ModelFile fa = read_gguf(dir / "a.gguf"), fc = read_gguf(dir / "c.gguf");
  ASSERT_EQ(fa.tensors.size(), fc.tensors.size());
  for (size_t i = 0; i < fa.tensors.size(); ++i) {
    const TensorView& ta = fa.tensors[i];
    if (ta.name.find("norm") != std::string::npos || ta.shape.size() != 2) continue;
    EXPECT_NE(row_of(ta, 0), row_of(fc.tensors[i], 0)) << ta.name;
  }
}

TEST(Synthetic, WeightsHaveTheIntendedScale) {
  auto dir = test::scratch_dir("synthetic_scale");
  SyntheticSpec spec = test::tiny_specs()[3];  // qwen2 with biases
  write_synthetic_gguf(spec, TensorType::F32, 1, dir / "m.gguf");
  ModelFile f = read_gguf(dir / "m.gguf");
  auto stats = [&](const std::string& name) {
    const TensorView& t = f.require(name);
    double sum = 0, sq = 0;
    int64_t n = 0;
    for (int64_t r = 0; r < t.n_rows(); ++r)
      for (float v : row_of(t, r)) sum += v, sq += double(v) * v, ++n;
    double mean = sum / n;
    return std::pair{mean, std::sqrt(sq / n - mean * mean)};
  };
  auto [wq_mean, wq_std] = stats("blk.0.attn_q.weight");  // N(0, 1/sqrt(256))
  EXPECT_NEAR(wq_mean, 0.0, 0.002);
  EXPECT_NEAR(wq_std, 1.0 / 16, 0.002);
  auto [norm_mean, norm_std] = stats("blk.1.ffn_norm.weight");  // 1 + 0.1 N(0, 1)
  EXPECT_NEAR(norm_mean, 1.0, 0.03);
  EXPECT_NEAR(norm_std, 0.1, 0.03);
  auto [bias_mean, bias_std] = stats("blk.0.attn_k.bias");  // 0.5 N(0, 1), 128 values
  EXPECT_NEAR(bias_std, 0.5, 0.15);
}

TEST(Synthetic, TinyFilesLoadAsTheirSpecSays) {
  auto dir = test::scratch_dir("synthetic_tiny");
  for (const SyntheticSpec& spec : test::tiny_specs()) {
    SCOPED_TRACE(spec.name);
    uint64_t last_done = 0, last_total = 0;
    int calls = 0;
    write_synthetic_gguf(spec, TensorType::Q6_K, 3, dir / (spec.name + ".gguf"),
                         [&](uint64_t done, uint64_t total) { last_done = done, last_total = total, ++calls; });
    EXPECT_GT(calls, 0);
    EXPECT_EQ(last_done, last_total);
    ModelFile f = read_gguf(dir / (spec.name + ".gguf"));
    ModelConfig c = ModelConfig::from_model_file(f);
    EXPECT_EQ(c.arch_name, spec.arch);
    EXPECT_EQ(c.name, spec.name);
    EXPECT_EQ(c.dim, spec.dim);
    EXPECT_EQ(c.n_layers, spec.n_layers);
    EXPECT_EQ(c.n_heads, spec.n_heads);
    EXPECT_EQ(c.n_kv_heads, spec.n_kv_heads);
    EXPECT_EQ(c.ffn_dim, spec.ffn_dim);
    EXPECT_EQ(c.n_vocab, spec.n_vocab);
    EXPECT_EQ(c.context_length, spec.context_length);
    EXPECT_EQ(c.tied_output, spec.tied_output);
    EXPECT_EQ(c.qkv_bias, spec.qkv_bias);
    EXPECT_FLOAT_EQ(c.rms_eps, spec.rms_eps);
    EXPECT_FLOAT_EQ(c.rope_freq_base, spec.rope_freq_base);
    EXPECT_EQ(c.rope_style, spec.arch == "qwen2" ? RopeStyle::Neox : RopeStyle::Adjacent);
    EXPECT_EQ(c.rope_freq_factors.size(), spec.llama3_rope_freqs ? size_t(spec.head_dim() / 2) : 0u);
    EXPECT_EQ(f.meta.get_int("general.file_type"), 18);  // MOSTLY_Q6_K

    // The file holds exactly the planned tensors, in order, with the planned types.
    auto plan = synthetic_tensors(spec, TensorType::Q6_K);
    ASSERT_EQ(f.tensors.size(), plan.size());
    for (size_t i = 0; i < plan.size(); ++i) {
      EXPECT_EQ(f.tensors[i].name, plan[i].name);
      EXPECT_EQ(f.tensors[i].type, plan[i].type) << plan[i].name;
      EXPECT_EQ(f.tensors[i].shape, plan[i].shape) << plan[i].name;
    }
    EXPECT_EQ(f.require("blk.1.attn_norm.weight").type, TensorType::F32);
    EXPECT_EQ(f.require("blk.1.ffn_down.weight").type,
              spec.ffn_dim % 256 == 0 ? TensorType::Q6_K : TensorType::Q8_0);
    EXPECT_EQ(f.require("blk.1.ffn_up.weight").type,
              spec.dim % 256 == 0 ? TensorType::Q6_K : TensorType::Q8_0);
  }
}

TEST(Synthetic, MoeFilesCarryRoutersAndStackedExperts) {
  auto dir = test::scratch_dir("synthetic_moe");
  for (const SyntheticSpec& spec : test::tiny_moe_specs()) {
    SCOPED_TRACE(spec.name);
    write_synthetic_gguf(spec, TensorType::Q4_K, 3, dir / (spec.name + ".gguf"));
    ModelFile f = read_gguf(dir / (spec.name + ".gguf"));
    const std::string a = spec.arch + ".";
    EXPECT_EQ(f.meta.get_int(a + "expert_count"), spec.n_experts);
    EXPECT_EQ(f.meta.get_int(a + "expert_used_count"), spec.n_experts_used);
    const int64_t ffe = spec.expert_width();
    // The router stays F32 (as llama.cpp's quantizer leaves it); experts are {n_in, n_out, E}.
    const TensorView& router = f.require("blk.1.ffn_gate_inp.weight");
    EXPECT_EQ(router.type, TensorType::F32);
    EXPECT_EQ(router.shape, (std::vector<int64_t>{spec.dim, spec.n_experts}));
    const TensorView& up = f.require("blk.1.ffn_up_exps.weight");
    EXPECT_EQ(up.shape, (std::vector<int64_t>{spec.dim, ffe, spec.n_experts}));
    EXPECT_EQ(up.type, TensorType::Q4_K);
    const TensorView& down = f.require("blk.1.ffn_down_exps.weight");
    EXPECT_EQ(down.shape, (std::vector<int64_t>{ffe, spec.dim, spec.n_experts}));
    EXPECT_EQ(down.type, ffe % 256 == 0 ? TensorType::Q4_K : TensorType::Q5_0);  // llama.cpp's fallback
    EXPECT_EQ(f.find("blk.0.ffn_up.weight"), nullptr);
    EXPECT_EQ(f.find("blk.0.ffn_gate_inp_shexp.weight") != nullptr, spec.shared_ffn_dim > 0);
    EXPECT_EQ(f.find("blk.0.attn_q_norm.weight") != nullptr, spec.arch == "qwen3moe");
    if (spec.key_length > 0) {
      EXPECT_EQ(f.meta.get_int(a + "attention.key_length"), spec.key_length);
    }
    // Each expert is drawn on its own: two experts' first rows differ.
    std::vector<float> r0(size_t(spec.dim)), r1(size_t(spec.dim));
    up.dequantize_row_to(0, r0);
    up.dequantize_row_to(ffe, r1);  // expert 1, row 0
    EXPECT_NE(r0, r1);
  }
  SyntheticSpec bad = test::tiny_moe_specs()[1];
  bad.n_experts_used = bad.n_experts + 1;
  EXPECT_THROW(validate_synthetic_spec(bad), UsageError);
  bad = test::tiny_moe_specs()[2];
  bad.n_experts = 0;
  EXPECT_THROW(validate_synthetic_spec(bad), UsageError);
}

TEST(Synthetic, WeightTypeFallsBackWhereRowsDoNotFitBlocks) {
  EXPECT_EQ(fallback_type(TensorType::Q4_K, 512), TensorType::Q4_K);
  EXPECT_EQ(fallback_type(TensorType::Q4_K, 288), TensorType::Q5_0);
  EXPECT_EQ(fallback_type(TensorType::Q6_K, 896), TensorType::Q8_0);
  EXPECT_EQ(fallback_type(TensorType::Q4_K, 172), TensorType::F16);
  EXPECT_EQ(fallback_type(TensorType::Q4_0, 96), TensorType::Q4_0);
  EXPECT_EQ(fallback_type(TensorType::Q8_0, 100), TensorType::F16);
  EXPECT_EQ(fallback_type(TensorType::BF16, 7), TensorType::BF16);
}

// A mix chooses per tensor (format/quant_scheme.h has the rules and their own tests); synth and
// convert apply the same choice: a synthetic q4_k_m file and the same model's f16 file converted
// to q4_k_m hold the same types, tensor for tensor, and say MOSTLY_Q4_K_M.
TEST(Synthetic, MixesChooseTypesPerTensorAndConvertAgrees) {
  auto dir = test::scratch_dir("synthetic_mix");
  const SyntheticSpec spec = *synthetic_preset("tiny-llama");  // 4 layers, GQA 4, untied head
  const QuantScheme mix = *parse_quant_scheme("q4_k_m");
  write_synthetic_gguf(spec, mix, 3, dir / "mix.gguf");
  write_synthetic_gguf(spec, TensorType::F16, 3, dir / "f16.gguf");
  write_gguf_from(read_gguf(dir / "f16.gguf"), dir / "converted.gguf", mix);
  const ModelFile a = read_gguf(dir / "mix.gguf"), b = read_gguf(dir / "converted.gguf");
  EXPECT_EQ(a.meta.get_int("general.file_type"), 15);
  EXPECT_EQ(b.meta.get_int("general.file_type"), 15);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) EXPECT_EQ(a.tensors[i].type, b.tensors[i].type) << a.tensors[i].name;
  // 4 layers: use_more_bits(i, 4) holds for layers 2 ((i - 0) % 3 == 2) and 3 (i >= 7 * 4 / 8).
  EXPECT_EQ(a.require("output.weight").type, TensorType::Q6_K);
  EXPECT_EQ(a.require("token_embd.weight").type, TensorType::Q4_K);
  EXPECT_EQ(a.require("blk.0.attn_v.weight").type, TensorType::Q4_K);
  EXPECT_EQ(a.require("blk.2.attn_v.weight").type, TensorType::Q6_K);
  EXPECT_EQ(a.require("blk.3.ffn_down.weight").type, TensorType::Q6_K);
  EXPECT_EQ(a.require("blk.1.ffn_down.weight").type, TensorType::Q4_K);
  EXPECT_EQ(a.require("blk.1.attn_q.weight").type, TensorType::Q4_K);
  EXPECT_EQ(a.require("blk.1.attn_norm.weight").type, TensorType::F32);
}

TEST(Synthetic, VocabularyIsAValidSentencePieceVocab) {
  for (int64_t n_vocab : {260, 300, 32000}) {
    SyntheticSpec spec = test::tiny_spec("v", "llama", 64, 2, 2, 64, n_vocab);
    Metadata m = synthetic_metadata(spec, TensorType::F32);
    EXPECT_EQ(m.get_string("tokenizer.ggml.model"), "llama");
    const MetaArray* tokens = m.get_array_opt("tokenizer.ggml.tokens");
    const MetaArray* scores = m.get_array_opt("tokenizer.ggml.scores");
    const MetaArray* types = m.get_array_opt("tokenizer.ggml.token_type");
    ASSERT_TRUE(tokens && scores && types);
    ASSERT_EQ(tokens->items.size(), size_t(n_vocab));
    ASSERT_EQ(scores->items.size(), size_t(n_vocab));
    ASSERT_EQ(types->items.size(), size_t(n_vocab));
    EXPECT_EQ(tokens->elem_type, MetaType::STRING);
    EXPECT_EQ(scores->elem_type, MetaType::F32);
    EXPECT_EQ(types->elem_type, MetaType::I32);
    EXPECT_EQ(tokens->items[0].as_string(), "<unk>");
    EXPECT_EQ(types->items[0].as_int(), 2);
    EXPECT_EQ(tokens->items[1].as_string(), "<s>");
    EXPECT_EQ(types->items[1].as_int(), 3);
    EXPECT_EQ(tokens->items[2].as_string(), "</s>");
    EXPECT_EQ(types->items[2].as_int(), 3);
    EXPECT_EQ(tokens->items[3].as_string(), "<0x00>");
    EXPECT_EQ(tokens->items[3 + 0x0A].as_string(), "<0x0A>");
    EXPECT_EQ(tokens->items[258].as_string(), "<0xFF>");
    for (int i = 3; i < 259; ++i) EXPECT_EQ(types->items[size_t(i)].as_int(), 6);
    std::set<std::string> seen;
    for (size_t i = 0; i < tokens->items.size(); ++i) {
      const std::string& t = tokens->items[i].as_string();
      EXPECT_TRUE(seen.insert(t).second) << "duplicate token " << t;
      EXPECT_FALSE(t.empty());
      if (i >= 259) {
        EXPECT_EQ(types->items[i].as_int(), 1) << t;
        EXPECT_LT(scores->items[i].as_float(), scores->items[i - 1].as_float() + (i == 259 ? 1.0 : 0.0));
      }
    }
    EXPECT_EQ(tokens->items[259].as_string(), "\xE2\x96\x81");
    if (n_vocab >= 32000) {
      EXPECT_TRUE(seen.count("\xE2\x96\x81the"));
      EXPECT_TRUE(seen.count("\xE2\x96\x81once"));
      EXPECT_TRUE(seen.count("Z"));
    }
    EXPECT_EQ(m.get_int("tokenizer.ggml.bos_token_id"), 1);
    EXPECT_EQ(m.get_int("tokenizer.ggml.eos_token_id"), 2);
    EXPECT_EQ(m.get_int("tokenizer.ggml.unknown_token_id"), 0);
    EXPECT_EQ(m.get_bool_opt("tokenizer.ggml.add_bos_token"), true);
  }
}

TEST(Synthetic, VocabularyLoadsInTheTokenizerAndRoundTrips) {
  const std::string text = "Once upon a time, the little girl said: \"Hello!\"\n\xC3\xA9t\xC3\xA9 42";
  size_t n_ids_small_vocab = 0;
  for (int64_t n_vocab : {300, 32000}) {
    SCOPED_TRACE(n_vocab);
    SyntheticSpec spec = test::tiny_spec("v", "llama", 64, 2, 2, 64, n_vocab);
    Tokenizer tok = Tokenizer::from_metadata(synthetic_metadata(spec, TensorType::F32), "synthetic");
    EXPECT_EQ(tok.encode(text, true, false).front(), 1);  // add_bos_token
    std::vector<int32_t> ids = tok.encode(text, false, false);
    ASSERT_FALSE(ids.empty());
    for (int32_t id : ids) EXPECT_TRUE(id >= 3 && id < n_vocab) << id;
    EXPECT_EQ(tok.decode(ids), text);
    // Bytes no piece spells (UTF-8 of the accented letters) fall back to <0xNN> tokens.
    EXPECT_NE(std::find(ids.begin(), ids.end(), 3 + 0xC3), ids.end());
    if (n_vocab == 300) {
      n_ids_small_vocab = ids.size();
    } else {
      EXPECT_LT(ids.size(), n_ids_small_vocab);  // the big vocab's word pieces are used
    }
  }
}

TEST(Synthetic, PresetsHaveTheTrueShapes) {
  struct Want {
    const char* name; const char* arch; int64_t dim, layers, heads, kv, ffn, vocab, ctx;
    bool tied, bias, llama3; float base, eps;
    int64_t experts = 0, used = 0, ffe = 0, shared = 0, key_length = 0;  // mixtures of experts
    int64_t window = 0;                                                    // sliding window
  };
  const Want wants[] = {
      {"stories15m", "llama", 288, 6, 6, 6, 768, 32000, 256, false, false, false, 10000.f, 1e-5f},
      {"stories110m", "llama", 768, 12, 12, 12, 2048, 32000, 1024, false, false, false, 10000.f, 1e-5f},
      {"tinyllama-1.1b", "llama", 2048, 22, 32, 4, 5632, 32000, 2048, false, false, false, 10000.f, 1e-5f},
      {"llama-3.2-1b", "llama", 2048, 16, 32, 8, 8192, 128256, 131072, true, false, true, 500000.f, 1e-5f},
      {"llama-3.2-3b", "llama", 3072, 28, 24, 8, 8192, 128256, 131072, true, false, true, 500000.f, 1e-5f},
      {"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 4864, 151936, 32768, true, true, false, 1000000.f, 1e-6f},
      {"tiny-llama", "llama", 256, 4, 8, 2, 512, 2048, 512, false, false, false, 10000.f, 1e-5f},
      {"tiny-llama3", "llama", 256, 4, 8, 1, 512, 2048, 512, true, false, true, 500000.f, 1e-5f},
      {"tiny-qwen2", "qwen2", 256, 4, 8, 2, 512, 2048, 512, true, true, false, 1000000.f, 1e-6f},
      {"mixtral-8x7b", "llama", 4096, 32, 32, 8, 14336, 32000, 32768, false, false, false, 1000000.f, 1e-5f, 8, 2},
      {"qwen1.5-moe-a2.7b", "qwen2moe", 2048, 24, 16, 16, 5632, 151936, 8192, false, true, false, 1000000.f, 1e-6f,
       60, 4, 1408, 5632},
      {"tiny-mixtral", "llama", 256, 4, 8, 2, 512, 2048, 512, false, false, false, 10000.f, 1e-5f, 8, 2},
      {"tiny-qwen2moe", "qwen2moe", 256, 4, 8, 8, 512, 2048, 512, false, true, false, 1000000.f, 1e-6f, 16, 4, 128, 512},
      {"tiny-qwen3moe", "qwen3moe", 256, 4, 4, 2, 768, 2048, 512, true, false, false, 1000000.f, 1e-6f, 8, 2, 256, 0,
       128},
      {"qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 3072, 151936, 40960, true, false, false, 1000000.f, 1e-6f, 0, 0, 0, 0,
       128},
      {"phi3-mini-4k", "phi3", 3072, 32, 32, 32, 8192, 32064, 4096, false, false, false, 10000.f, 1e-5f},
      {"tiny-qwen3", "qwen3", 256, 4, 4, 2, 512, 2048, 512, true, false, false, 1000000.f, 1e-6f, 0, 0, 0, 0, 128},
      {"tiny-phi3", "phi3", 256, 4, 8, 2, 512, 2048, 512, false, false, false, 10000.f, 1e-5f},
      // Mistral 7B v0.1, Gemma 2 2B and Gemma 3 1B (their config.json shapes and windows), and tiny ones.
      {"mistral-7b", "llama", 4096, 32, 32, 8, 14336, 32000, 32768, false, false, false, 10000.f, 1e-5f, 0, 0, 0, 0, 0,
       4096},
      {"mistral-tiny", "llama", 256, 4, 8, 2, 512, 2048, 512, false, false, false, 10000.f, 1e-5f, 0, 0, 0, 0, 0, 16},
      {"gemma2-2b", "gemma2", 2304, 26, 8, 4, 9216, 256000, 8192, true, false, false, 10000.f, 1e-6f, 0, 0, 0, 0, 256,
       4096},
      {"gemma2-tiny", "gemma2", 256, 4, 4, 2, 512, 2048, 512, true, false, false, 10000.f, 1e-6f, 0, 0, 0, 0, 64, 8},
      {"gemma3-1b", "gemma3", 1152, 26, 4, 1, 6912, 262144, 32768, true, false, false, 1000000.f, 1e-6f, 0, 0, 0, 0,
       256, 512},
      {"gemma3-tiny", "gemma3", 256, 6, 4, 1, 512, 2048, 512, true, false, false, 1000000.f, 1e-6f, 0, 0, 0, 0, 128, 8},
  };
  ASSERT_EQ(synthetic_preset_names().size(), std::size(wants));
  for (const Want& w : wants) {
    SCOPED_TRACE(w.name);
    auto s = synthetic_preset(w.name);
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(s->arch, w.arch);
    EXPECT_EQ(s->dim, w.dim);
    EXPECT_EQ(s->n_layers, w.layers);
    EXPECT_EQ(s->n_heads, w.heads);
    EXPECT_EQ(s->n_kv_heads, w.kv);
    EXPECT_EQ(s->ffn_dim, w.ffn);
    EXPECT_EQ(s->n_vocab, w.vocab);
    EXPECT_EQ(s->context_length, w.ctx);
    EXPECT_EQ(s->tied_output, w.tied);
    EXPECT_EQ(s->qkv_bias, w.bias);
    EXPECT_EQ(s->llama3_rope_freqs, w.llama3);
    EXPECT_FLOAT_EQ(s->rope_freq_base, w.base);
    EXPECT_FLOAT_EQ(s->rms_eps, w.eps);
    EXPECT_EQ(s->n_experts, w.experts);
    EXPECT_EQ(s->n_experts_used, w.used);
    EXPECT_EQ(s->expert_ffn_dim, w.ffe);
    EXPECT_EQ(s->shared_ffn_dim, w.shared);
    EXPECT_EQ(s->key_length, w.key_length);
    EXPECT_EQ(s->sliding_window, w.window);

    Metadata m = synthetic_metadata(*s, TensorType::Q4_K);
    const std::string a = std::string(w.arch) + ".";
    EXPECT_EQ(m.get_string("general.architecture"), w.arch);
    EXPECT_EQ(m.get_int("general.file_type"), 14);
    EXPECT_EQ(m.get_int(a + "embedding_length"), w.dim);
    EXPECT_EQ(m.get_int(a + "block_count"), w.layers);
    EXPECT_EQ(m.get_int(a + "attention.head_count"), w.heads);
    EXPECT_EQ(m.get_int(a + "attention.head_count_kv"), w.kv);
    EXPECT_EQ(m.get_int(a + "feed_forward_length"), w.ffn);
    EXPECT_EQ(m.get_int(a + "context_length"), w.ctx);
    EXPECT_EQ(m.get_int(a + "vocab_size"), w.vocab);
    EXPECT_EQ(m.get_int(a + "rope.dimension_count"), w.key_length > 0 ? w.key_length : w.dim / w.heads);
    EXPECT_EQ(m.get_int_opt(a + "expert_count").value_or(0), w.experts);
    EXPECT_EQ(m.get_int_opt(a + "attention.sliding_window").value_or(0), w.window);
    EXPECT_FLOAT_EQ(float(m.get_float(a + "rope.freq_base")), w.base);
    EXPECT_FLOAT_EQ(float(m.get_float(a + "attention.layer_norm_rms_epsilon")), w.eps);
    EXPECT_EQ(m.get_array_opt("tokenizer.ggml.tokens")->items.size(), size_t(w.vocab));

    auto plan = synthetic_tensors(*s, TensorType::Q4_K);
    const int64_t hd = w.key_length > 0 ? w.key_length : w.dim / w.heads;
    // Per layer: 2 norms, 4 attention matrices, 3 feed-forward tensors (MoE: + a router),
    // biases, q/k norms (qwen3, qwen3moe, gemma3), a shared expert with its gate (4, qwen2moe), and
    // Gemma's post-attention and post-feed-forward norms; phi3 fuses q/k/v into one matrix and gate/up
    // into another (6).
    const std::string arch = w.arch;
    const bool gemma = arch == "gemma2" || arch == "gemma3";
    const bool phi3 = arch == "phi3";
    const size_t per_layer = phi3 ? 6
                                  : 9 + (w.bias ? 3 : 0) + (w.experts > 0 ? 1 : 0) + (w.shared > 0 ? 4 : 0) +
                                        (arch == "qwen3moe" || arch == "qwen3" || arch == "gemma3" ? 2 : 0) +
                                        (gemma ? 2 : 0);
    size_t expected = 1 + size_t(w.layers) * per_layer + 1 + (w.tied ? 0 : 1) + (w.llama3 ? 1 : 0);
    EXPECT_EQ(plan.size(), expected);
    auto find = [&](const std::string& n) -> const SyntheticTensor& {
      for (const auto& t : plan)
        if (t.name == n) return t;
      ADD_FAILURE() << "missing " << n;
      return plan.front();
    };
    EXPECT_EQ(find("token_embd.weight").shape, (std::vector<int64_t>{w.dim, w.vocab}));
    if (phi3) {
      EXPECT_EQ(find("blk.0.attn_qkv.weight").shape, (std::vector<int64_t>{w.dim, (w.heads + 2 * w.kv) * hd}));
      EXPECT_EQ(find("blk.0.ffn_up.weight").shape, (std::vector<int64_t>{w.dim, 2 * w.ffn}));
    } else {
      EXPECT_EQ(find("blk.0.attn_k.weight").shape, (std::vector<int64_t>{w.dim, w.kv * hd}));
      // K-quant rows must be whole 256-blocks: dim 288/896 fall back to Q5_0 (as llama.cpp does).
      EXPECT_EQ(find("blk.0.attn_q.weight").type, w.dim % 256 == 0 ? TensorType::Q4_K : TensorType::Q5_0);
    }
    if (arch == "qwen3") {
      EXPECT_EQ(find("blk.0.attn_k_norm.weight").shape, (std::vector<int64_t>{hd}));
    }
    EXPECT_EQ(find("blk.0.attn_output.weight").shape, (std::vector<int64_t>{w.heads * hd, w.dim}));
    if (w.experts == 0) {
      EXPECT_EQ(find("blk.0.ffn_down.weight").shape, (std::vector<int64_t>{w.ffn, w.dim}));
      EXPECT_EQ(find("blk.0.ffn_down.weight").type, w.ffn % 256 == 0 ? TensorType::Q4_K : TensorType::Q5_0);
    } else {
      const int64_t ffe = w.ffe > 0 ? w.ffe : w.ffn;  // Mixtral: experts are feed_forward_length wide
      EXPECT_EQ(find("blk.0.ffn_down_exps.weight").shape, (std::vector<int64_t>{ffe, w.dim, w.experts}));
      EXPECT_EQ(find("blk.0.ffn_down_exps.weight").type, ffe % 256 == 0 ? TensorType::Q4_K : TensorType::Q5_0);
      EXPECT_EQ(find("blk.0.ffn_gate_inp.weight").type, TensorType::F32);
      if (w.shared > 0) {
        EXPECT_EQ(find("blk.0.ffn_up_shexp.weight").shape, (std::vector<int64_t>{w.dim, w.shared}));
      }
    }
    if (w.bias) {
      EXPECT_EQ(find("blk.0.attn_v.bias").shape, (std::vector<int64_t>{w.kv * hd}));
    }
    if (w.llama3) {
      EXPECT_EQ(find("rope_freqs.weight").shape, (std::vector<int64_t>{hd / 2}));
    }
  }
  EXPECT_FALSE(synthetic_preset("gpt-5").has_value());
}

TEST(Synthetic, Llama3RopeFactorsFollowTheReferenceFormula) {
  auto f = llama3_rope_freq_factors(64, 500000.f);  // Llama 3.2 1B: head_dim 64
  ASSERT_EQ(f.size(), 32u);
  EXPECT_FLOAT_EQ(f.front(), 1.f);   // wavelength 2*pi: high frequency, unscaled
  EXPECT_FLOAT_EQ(f.back(), 32.f);   // wavelength >> 8192: scaled by the full factor
  bool has_smooth = false;
  for (size_t i = 1; i < f.size(); ++i) {
    EXPECT_GE(f[i], f[i - 1]);
    has_smooth |= f[i] > 1.f && f[i] < 32.f;
  }
  EXPECT_TRUE(has_smooth);  // the band between 2048 and 8192 interpolates
}

TEST(Synthetic, InvalidSpecsAreRejected) {
  auto dir = test::scratch_dir("synthetic_invalid");
  SyntheticSpec s = test::tiny_spec("bad", "llama", 64, 3, 1, 64, 300);  // 64 % 3 != 0
  EXPECT_THROW(write_synthetic_gguf(s, TensorType::F32, 1, dir / "x.gguf"), UsageError);
  s = test::tiny_spec("bad", "llama", 64, 4, 3, 64, 300);  // 4 % 3 != 0
  EXPECT_THROW(synthetic_metadata(s, TensorType::F32), UsageError);
  s = test::tiny_spec("bad", "llama", 64, 4, 4, 64, 100);  // too small for the byte tokens
  EXPECT_THROW(synthetic_metadata(s, TensorType::F32), UsageError);
  s = test::tiny_spec("bad", "gpt2", 64, 4, 4, 64, 300);
  EXPECT_THROW(synthetic_metadata(s, TensorType::F32), UsageError);
  s = test::tiny_spec("bad", "phi3", 64, 4, 4, 64, 300);
  s.key_length = 32;  // llama.cpp's phi3 needs n_heads * head_dim == dim
  EXPECT_THROW(synthetic_metadata(s, TensorType::F32), UsageError);
  s = test::tiny_spec("bad", "qwen3", 64, 4, 4, 64, 300);
  s.n_experts = 4;
  s.n_experts_used = 2;
  EXPECT_THROW(synthetic_metadata(s, TensorType::F32), UsageError);
  s = test::tiny_spec("bad", "llama", 64, 4, 4, -5, 300);
  EXPECT_THROW(synthetic_tensors(s, TensorType::F32), UsageError);
  EXPECT_FALSE(std::filesystem::exists(dir / "x.gguf"));
}

}  // namespace
}  // namespace peregrine
