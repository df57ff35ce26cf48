// llama2.c checkpoint + tokenizer loading, and conversion of loaded models to GGUF.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "common/test_paths.h"
#include "format/convert.h"
#include "format/gguf.h"
#include "format/llama2c.h"
#include "util/error.h"

namespace peregrine {
namespace {

float f32_at(const TensorView& t, int64_t i) {
  float v;
  std::memcpy(&v, t.data.data() + 4 * i, 4);
  return v;
}

TEST(Llama2c, ReadsStories260K) {
  const auto ckpt = test::shared_file("models/stories260K/stories260K.bin");
  const auto tok = test::shared_file("models/stories260K/tok512.bin");
  EXPECT_FALSE(is_gguf_file(ckpt));
  ModelFile mf = open_model_file(ckpt, tok);
  const Metadata& m = mf.meta;
  EXPECT_EQ(m.get_string("general.architecture"), "llama");
  EXPECT_EQ(m.get_string("general.name"), "stories260K");
  EXPECT_EQ(m.get_int("llama.embedding_length"), 64);
  EXPECT_EQ(m.get_int("llama.feed_forward_length"), 172);
  EXPECT_EQ(m.get_int("llama.block_count"), 5);
  EXPECT_EQ(m.get_int("llama.attention.head_count"), 8);
  EXPECT_EQ(m.get_int("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(m.get_int("llama.vocab_size"), 512);
  EXPECT_EQ(m.get_int("llama.context_length"), 512);
  EXPECT_EQ(m.get_int("llama.rope.dimension_count"), 8);
  EXPECT_FLOAT_EQ(m.get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
  EXPECT_EQ(m.get_float("llama.rope.freq_base"), 10000.0);
  EXPECT_EQ(m.get_int("general.alignment"), 32);

  EXPECT_EQ(mf.tensors.size(), 1u + 5 * 9 + 1);  // shared classifier: no output.weight
  EXPECT_EQ(mf.find("output.weight"), nullptr);
  const auto& emb = mf.require("token_embd.weight");
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(f32_at(emb, 0), -0.29474878311157227f);
  EXPECT_EQ(f32_at(emb, 1), 0.5618956089019775f);
  EXPECT_EQ(f32_at(mf.require("blk.0.attn_norm.weight"), 0), 0.9722429513931274f);
  const auto& q1 = mf.require("blk.1.attn_q.weight");
  EXPECT_EQ(q1.shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(f32_at(q1, 2 * 64 + 3), -0.03296082839369774f);  // row 2 (output 2), input 3
  const auto& down4 = mf.require("blk.4.ffn_down.weight");
  EXPECT_EQ(down4.shape, (std::vector<int64_t>{172, 64}));
  EXPECT_EQ(f32_at(down4, 172 * 64 - 1), -0.0035068716388195753f);
  EXPECT_EQ(mf.require("blk.2.attn_k.weight").shape, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(mf.require("blk.2.ffn_gate.weight").shape, (std::vector<int64_t>{64, 172}));
  EXPECT_EQ(mf.require("blk.2.ffn_up.weight").shape, (std::vector<int64_t>{64, 172}));
  EXPECT_EQ(f32_at(mf.require("output_norm.weight"), 0), 2.4583089351654053f);
  // Views are zero-copy and consecutive in the mapping.
  EXPECT_EQ(mf.require("blk.1.attn_norm.weight").data.data(),
            mf.require("blk.0.attn_norm.weight").data.data() + 64 * 4);

  const auto* tokens = m.get_array_opt("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->items.size(), 512u);
  EXPECT_EQ(tokens->items[0].as_string(), "<unk>");
  EXPECT_EQ(tokens->items[1].as_string(), "<s>");
  EXPECT_EQ(tokens->items[2].as_string(), "</s>");
  EXPECT_EQ(tokens->items[3].as_string(), "<0x00>");
  EXPECT_EQ(tokens->items[259].as_string(), "\xE2\x96\x81t");  // " t" in llama2.c's export
  const auto& types = m.get_array_opt("tokenizer.ggml.token_type")->items;
  EXPECT_EQ(types[0].as_int(), 2);
  EXPECT_EQ(types[1].as_int(), 3);
  EXPECT_EQ(types[2].as_int(), 3);
  EXPECT_EQ(types[3].as_int(), 6);
  EXPECT_EQ(types[258].as_int(), 6);
  EXPECT_EQ(types[259].as_int(), 1);
  EXPECT_EQ(m.get_array_opt("tokenizer.ggml.scores")->items[260].as_float(), -1.0);
  EXPECT_EQ(m.get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(m.get_int("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(m.get_int("tokenizer.ggml.unknown_token_id"), 0);
  EXPECT_EQ(m.get_bool_opt("tokenizer.ggml.add_bos_token"), true);
  EXPECT_EQ(m.get_bool_opt("tokenizer.ggml.add_eos_token"), false);
  EXPECT_EQ(m.get_string("tokenizer.ggml.model"), "llama");
}

TEST(Llama2c, ConvertToGgufF32IsIdentical) {
  const auto dir = test::scratch_dir("llama2c_convert");
  ModelFile in = read_llama2c(test::shared_file("models/stories260K/stories260K.bin"),
                              test::shared_file("models/stories260K/tok512.bin"));
  const auto out = dir / "stories260K.gguf";
  uint64_t last_done = 0, last_total = 1;
  write_gguf_from(in, out, TensorType::F32, [&](uint64_t d, uint64_t t) { last_done = d; last_total = t; });
  EXPECT_EQ(last_done, last_total);
  ASSERT_TRUE(is_gguf_file(out));
  ModelFile back = open_model_file(out);
  EXPECT_EQ(back.meta.get_int("general.file_type"), 0);
  ASSERT_EQ(back.tensors.size(), in.tensors.size());
  for (size_t i = 0; i < in.tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].name, in.tensors[i].name);
    EXPECT_EQ(back.tensors[i].shape, in.tensors[i].shape);
    EXPECT_EQ(back.tensors[i].type, TensorType::F32);
    ASSERT_EQ(back.tensors[i].data.size(), in.tensors[i].data.size());
    EXPECT_EQ(std::memcmp(back.tensors[i].data.data(), in.tensors[i].data.data(), in.tensors[i].data.size()), 0);
  }
  for (const auto& [k, v] : in.meta.entries()) EXPECT_TRUE(back.meta.contains(k)) << k;
  EXPECT_EQ(back.meta.get_array_opt("tokenizer.ggml.tokens")->items[259].as_string(), "\xE2\x96\x81t");
}

TEST(Llama2c, ConvertQuantizedKeepsNormsF32AndRaggedRowsF32) {
  const auto dir = test::scratch_dir("llama2c_quant");
  ModelFile in = read_llama2c(test::shared_file("models/stories260K/stories260K.bin"), std::nullopt);
  EXPECT_FALSE(in.meta.contains("tokenizer.ggml.tokens"));
  for (auto [type, ftype] : {std::pair{TensorType::Q8_0, 7}, {TensorType::Q4_K, 14}, {TensorType::F16, 1},
                             {TensorType::BF16, 32}, {TensorType::Q4_0, 2}}) {
    const auto out = dir / (std::string(tensor_type_name(type)) + ".gguf");
    write_gguf_from(in, out, type);
    ModelFile q = read_gguf(out);
    EXPECT_EQ(q.meta.get_int("general.file_type"), ftype);
    const int64_t block = tensor_type_info(type).block_elems;
    for (const auto& t : q.tensors) {
      const TensorView& src = in.require(t.name);
      if (t.shape.size() == 1) {
        EXPECT_EQ(t.type, TensorType::F32) << t.name;
      } else if (t.row_length() % block != 0) {
        EXPECT_EQ(t.type, TensorType::F32) << t.name;  // e.g. ffn_down rows of 172 for q8_0
      } else {
        EXPECT_EQ(t.type, type) << t.name;
      }
      // Values stay close to the source.
      std::vector<float> a(t.row_length()), b(t.row_length());
      for (int64_t r : {int64_t{0}, t.n_rows() - 1}) {
        t.dequantize_row_to(r, a);
        src.dequantize_row_to(r, b);
        float amax = 0, err = 0;
        for (size_t i = 0; i < a.size(); ++i) {
          amax = std::max(amax, std::fabs(b[i]));
          err = std::max(err, std::fabs(a[i] - b[i]));
        }
        EXPECT_LE(err, 0.2f * amax + 1e-6f) << t.name;
      }
    }
  }
  // Q4_K needs 256-wide rows: every stories260K matrix is 64 or 172 wide, so all stay F32.
  ModelFile k = read_gguf(dir / "q4_K.gguf");
  EXPECT_EQ(k.require("blk.0.attn_q.weight").type, TensorType::F32);
}

TEST(Llama2c, ConvertGgufWithoutTypeCopiesAsIs) {
  const auto dir = test::scratch_dir("gguf_copy");
  ModelFile in = read_gguf(test::shared_file("tokenizers/ggml-vocab-llama-spm.gguf"));
  write_gguf_from(in, dir / "copy.gguf", std::nullopt);
  ModelFile back = read_gguf(dir / "copy.gguf");
  EXPECT_EQ(back.meta.size(), in.meta.size());
  EXPECT_EQ(back.meta.get_array_opt("tokenizer.ggml.scores")->items.size(), 32000u);
}

void write_file(const std::filesystem::path& p, const std::vector<char>& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<char> read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST(Llama2c, RejectsBadHeadersAndSizes) {
  const auto dir = test::scratch_dir("llama2c_bad");
  const auto good = read_file(test::shared_file("models/stories260K/stories260K.bin"));
  auto expect_error = [&](std::vector<char> bytes, const std::string& needle) {
    const auto p = dir / "bad.bin";
    write_file(p, bytes);
    try {
      read_llama2c(p, std::nullopt);
      ADD_FAILURE() << "no error, expected: " << needle;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.bin"), std::string::npos) << e.what();
    }
  };
  auto with_field = [&](int field, int32_t value) {
    auto b = good;
    std::memcpy(b.data() + 4 * field, &value, 4);
    return b;
  };
  expect_error(std::vector<char>(good.begin(), good.begin() + 20), "too small");
  expect_error(std::vector<char>(good.begin(), good.end() - 1), "needs exactly 1056540");
  auto longer = good;
  longer.push_back(0);
  expect_error(longer, "1056541 bytes");
  expect_error(with_field(5, -512), "separate classifier");  // would need wcls
  expect_error(with_field(0, 0), "dim out of range");
  expect_error(with_field(0, -64), "dim out of range");
  expect_error(with_field(3, 7), "n_heads must divide dim");
  expect_error(with_field(4, 3), "n_kv_heads must divide n_heads");
  expect_error(with_field(4, 16), "n_kv_heads must divide n_heads");
  expect_error(with_field(5, INT32_MIN), "vocab_size out of range");
  expect_error(with_field(2, 1 << 30), "n_layers out of range");
  expect_error(with_field(6, 0), "seq_len out of range");
  expect_error(with_field(3, 64), "head size must be even");  // head size 1
  // A separate classifier that is present is read as output.weight.
  auto sep = with_field(5, -512);
  sep.insert(sep.end(), good.begin() + 28, good.begin() + 28 + 512 * 64 * 4);
  write_file(dir / "sep.bin", sep);
  ModelFile mf = read_llama2c(dir / "sep.bin", std::nullopt);
  EXPECT_EQ(mf.require("output.weight").shape, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(std::memcmp(mf.require("output.weight").data.data(), good.data() + 28, 512 * 64 * 4), 0);
}

TEST(Llama2c, RejectsBadTokenizers) {
  const auto dir = test::scratch_dir("llama2c_badtok");
  const auto good = read_file(test::shared_file("models/stories260K/tok512.bin"));
  auto error_of = [&](const std::vector<char>& bytes, int64_t vocab) -> std::string {
    write_file(dir / "tok.bin", bytes);
    Metadata m;
    try {
      add_llama2c_tokenizer(m, dir / "tok.bin", vocab);
    } catch (const FormatError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of(good, 512), "");
  EXPECT_EQ(error_of(good, 500), "");  // the model may use only the first tokens
  EXPECT_NE(error_of(good, 513).find("holds 512 tokens"), std::string::npos);
  auto b = good;
  int32_t v = -1;
  std::memcpy(b.data() + 8, &v, 4);  // token 0's length
  EXPECT_NE(error_of(b, 512).find("token 0 has length -1"), std::string::npos);
  v = 1 << 30;
  std::memcpy(b.data() + 8, &v, 4);
  EXPECT_NE(error_of(b, 512).find("token 0 has length"), std::string::npos);
  b = good;
  v = 0;
  std::memcpy(b.data(), &v, 4);
  EXPECT_NE(error_of(b, 512).find("max_token_length"), std::string::npos);
  EXPECT_NE(error_of({}, 512).find("truncated"), std::string::npos);
  EXPECT_NE(error_of(std::vector<char>(good.begin(), good.begin() + 14), 512).find("runs past end"), std::string::npos);
  // Every truncation is a FormatError (or loads, when enough tokens remain).
  for (size_t len = 0; len < good.size(); len += 37) {
    const std::string e = error_of(std::vector<char>(good.begin(), good.begin() + len), 512);
    EXPECT_FALSE(e.empty()) << len;
  }
}

}  // namespace
}  // namespace peregrine
