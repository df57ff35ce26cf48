// The demo target model as a Hugging Face checkpoint folder, written by the project's own
// exporter (training/export_hf.py, run here into the build tree) and read back by peregrine's
// HF loader, must be the GGUF model exactly: same tensors byte for byte (so the Q/K permutation
// undoes the export's), same token ids, and bit-identical logits whenever the stored types are
// the same (f32 folder vs the f32 GGUF; bf16 shards vs the GGUF converted to bf16; both
// quantized to q8_0 while loading). A separate check shows the folder really is in HF's layout:
// its unpermuted Q/K with half-split (NeoX) RoPE give the same logits, up to float summation
// order, as the GGUF with adjacent-pair RoPE.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu_context.h"
#include "common/hf_demo_export.h"
#include "format/convert.h"
#include "format/gguf.h"
#include "format/hf_checkpoint.h"
#include "format/safetensors.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace peregrine {
namespace {

const std::filesystem::path kGguf = test::demo_gguf();
using test::exported_demo;

std::vector<float> prompt_logits(ModelFile file, const std::vector<TokenId>& prompt) {
  Model model(std::move(file), std::make_shared<CpuContext>(2));
  KvCache kv = model.make_kv_cache(KvType::F32, 64, 16);
  EXPECT_TRUE(kv.pool().reserve(0, static_cast<int64_t>(prompt.size())));
  Batch batch;
  for (size_t i = 0; i < prompt.size(); ++i) batch.add(prompt[i], static_cast<int32_t>(i), 0, true);
  std::vector<float> logits;
  model.forward(batch, kv, logits);
  return logits;
}

const std::vector<std::string> kPrompts = {"It is a truth universally", "Mr. Darcy",
                                           "\"My dear Mr. Bennet,\" said his lady to him one day,",
                                           "  odd  spacing\nand a new line; ünïcödé 😀"};

std::vector<TokenId> prompt_ids() {
  return Tokenizer::from_metadata(read_gguf(kGguf).meta, kGguf.string()).encode(kPrompts[2], true, false);
}

// The file whose mapping holds address `p` (from /proc/self/maps), or "".
std::string mapped_file_of(const void* p) {
  std::ifstream maps("/proc/self/maps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (std::string line; std::getline(maps, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream(line) >> std::hex >> lo >> dash >> hi;
    if (a >= lo && a < hi) return line.find('/') == std::string::npos ? "" : line.substr(line.find('/'));
  }
  return "";
}

void expect_same_tensors(const ModelFile& hf, const ModelFile& gguf) {
  ASSERT_EQ(hf.tensors.size(), gguf.tensors.size());
  for (const TensorView& want : gguf.tensors) {
    const TensorView* got = hf.find(want.name);
    ASSERT_NE(got, nullptr) << want.name;
    EXPECT_EQ(got->type, want.type) << want.name;
    EXPECT_EQ(got->shape, want.shape) << want.name;
    ASSERT_EQ(got->data.size(), want.data.size()) << want.name;
    EXPECT_EQ(std::memcmp(got->data.data(), want.data.data(), want.data.size()), 0) << want.name << " differs";
  }
}

void expect_bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST(HfDemo, F32FolderIsTheGgufModel) {
  const auto dir = exported_demo("f32", "");
  ModelFile hf = read_hf_checkpoint(dir), gguf = read_gguf(kGguf);
  expect_same_tensors(hf, gguf);
  // Weight matrices are views into the mapped safetensors file (no copy); the permuted Q/K and
  // the norms (widened to f32) live in buffers of their own.
  EXPECT_TRUE(mapped_file_of(hf.require("blk.0.ffn_up.weight").data.data()).ends_with("/model.safetensors"));
  EXPECT_TRUE(mapped_file_of(hf.require("token_embd.weight").data.data()).ends_with("/model.safetensors"));
  EXPECT_FALSE(mapped_file_of(hf.require("blk.0.attn_q.weight").data.data()).ends_with("/model.safetensors"));
  expect_bit_identical(prompt_logits(std::move(hf), prompt_ids()), prompt_logits(std::move(gguf), prompt_ids()));
}

TEST(HfDemo, Bf16ShardsAreTheGgufConvertedToBf16) {
  const auto dir = exported_demo("bf16-sharded", "--dtype bf16 --shards 3");
  ASSERT_TRUE(std::filesystem::exists(dir / "model.safetensors.index.json"));
  ModelFile hf = read_hf_checkpoint(dir);
  ModelFile gguf = retype_model(read_gguf(kGguf), TensorType::BF16);
  EXPECT_EQ(hf.require("blk.1.attn_k.weight").type, TensorType::BF16);
  expect_same_tensors(hf, gguf);
  expect_bit_identical(prompt_logits(std::move(hf), prompt_ids()), prompt_logits(std::move(gguf), prompt_ids()));
}

TEST(HfDemo, QuantizedWhileLoadingLikeTheGguf) {
  const auto dir = exported_demo("f32", "");
  for (TensorType t : {TensorType::Q8_0, TensorType::Q4_0, TensorType::F16}) {
    ModelFile hf = retype_model(read_hf_checkpoint(dir), t);
    ModelFile gguf = retype_model(read_gguf(kGguf), t);
    EXPECT_EQ(hf.require("blk.0.attn_q.weight").type, t);
    expect_same_tensors(hf, gguf);
    expect_bit_identical(prompt_logits(std::move(hf), prompt_ids()), prompt_logits(std::move(gguf), prompt_ids()));
  }
}

TEST(HfDemo, TokenizerJsonGivesTheGgufIds) {
  const auto dir = exported_demo("f32", "");
  const Tokenizer hf = Tokenizer::from_metadata(read_hf_checkpoint(dir).meta, dir.string());
  const Tokenizer gguf = Tokenizer::from_metadata(read_gguf(kGguf).meta, kGguf.string());
  EXPECT_EQ(hf.n_vocab(), gguf.n_vocab());
  EXPECT_EQ(hf.bos(), gguf.bos());
  EXPECT_EQ(hf.eos(), gguf.eos());
  for (const std::string& p : kPrompts) {
    for (bool special : {true, false}) EXPECT_EQ(hf.encode(p, special, true), gguf.encode(p, special, true)) << p;
  }
}

// The exported folder is in Hugging Face's layout: run its Q/K rows as stored, with the
// half-split RoPE pairing HF's rotate_half uses (peregrine's "qwen2" pairing), and the logits
// are the GGUF's up to summation order. With adjacent pairing they are far off (the control).
TEST(HfDemo, StoredLayoutIsHalfSplitRope) {
  const auto dir = exported_demo("f32", "");
  const SafetensorsFile st = read_safetensors(dir / "model.safetensors");
  auto as_stored = [&](const std::string& arch) {
    ModelFile mf = read_hf_checkpoint(dir);
    for (TensorView& t : mf.tensors) {
      const bool q = t.name.ends_with("attn_q.weight"), k = t.name.ends_with("attn_k.weight");
      if (!q && !k) continue;
      const std::string hf_name = "model.layers." + t.name.substr(4, t.name.find('.', 4) - 4) +
                                  (q ? ".self_attn.q_proj.weight" : ".self_attn.k_proj.weight");
      t.data = std::find_if(st.tensors.begin(), st.tensors.end(), [&](const auto& s) { return s.name == hf_name; })->data;
    }
    Metadata renamed;
    for (const auto& [key, value] : mf.meta.entries()) {
      renamed.set(key.starts_with("llama.") ? arch + key.substr(5) : key, value);
    }
    renamed.set("general.architecture", MetaValue::string(arch));
    mf.meta = renamed;
    return mf;
  };
  const auto want = prompt_logits(read_gguf(kGguf), prompt_ids());
  const auto neox = prompt_logits(as_stored("qwen2"), prompt_ids());
  const auto adjacent = prompt_logits(as_stored("llama"), prompt_ids());
  const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
  const double range = *hi - *lo;
  double d_neox = 0, d_adjacent = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    d_neox = std::max(d_neox, std::abs(double(neox[i]) - want[i]));
    d_adjacent = std::max(d_adjacent, std::abs(double(adjacent[i]) - want[i]));
  }
  std::printf("max |logit diff| / range: half-split %.2e, adjacent %.2e\n", d_neox / range, d_adjacent / range);
  EXPECT_LT(d_neox / range, 1e-5);  // f32 summation order only
  EXPECT_GT(d_adjacent / range, 1e-3);
}

}  // namespace
}  // namespace peregrine
