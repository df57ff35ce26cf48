#pragma once
// Shared helpers of the model tests: loading stories260K and greedy decoding.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "common/test_paths.h"
#include "format/llama2c.h"
#include "model/model.h"

namespace peregrine::test {

// Until format's read_llama2c lands: a minimal test-local view of the llama2.c checkpoint with
// the same GGUF names and llama.* keys. Checkpoint layout: see format/llama2c.h.
inline ModelFile load_llama2c_for_test(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  auto bytes = std::make_shared<std::vector<std::byte>>(std::filesystem::file_size(path));
  in.read(reinterpret_cast<char*>(bytes->data()), static_cast<std::streamsize>(bytes->size()));
  int32_t h[7];
  std::memcpy(h, bytes->data(), sizeof h);
  const int64_t dim = h[0], hidden = h[1], L = h[2], heads = h[3], kv_heads = h[4], seq_len = h[6];
  const int64_t vocab = h[5] < 0 ? -int64_t{h[5]} : h[5];
  const int64_t kv_dim = dim / heads * kv_heads;
  ModelFile f;
  f.path = path.string();
  f.gguf_version = 0;
  f.meta.set("general.architecture", MetaValue::string("llama"));
  f.meta.set("llama.embedding_length", MetaValue::u32(uint32_t(dim)));
  f.meta.set("llama.feed_forward_length", MetaValue::u32(uint32_t(hidden)));
  f.meta.set("llama.block_count", MetaValue::u32(uint32_t(L)));
  f.meta.set("llama.attention.head_count", MetaValue::u32(uint32_t(heads)));
  f.meta.set("llama.attention.head_count_kv", MetaValue::u32(uint32_t(kv_heads)));
  f.meta.set("llama.context_length", MetaValue::u32(uint32_t(seq_len)));
  f.meta.set("llama.attention.layer_norm_rms_epsilon", MetaValue::f32(1e-5f));
  size_t off = sizeof h;
  auto take = [&](std::string name, std::vector<int64_t> shape) {
    TensorView t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    const size_t n = size_t(t.n_elements()) * 4;
    t.data = std::span<const std::byte>(bytes->data() + off, n);
    off += n;
    f.tensors.push_back(std::move(t));
  };
  auto per_layer = [&](const std::string& suffix, std::vector<int64_t> shape) {
    for (int64_t l = 0; l < L; ++l) take("blk." + std::to_string(l) + "." + suffix, shape);
  };
  take("token_embd.weight", {dim, vocab});
  per_layer("attn_norm.weight", {dim});
  per_layer("attn_q.weight", {dim, dim});
  per_layer("attn_k.weight", {dim, kv_dim});
  per_layer("attn_v.weight", {dim, kv_dim});
  per_layer("attn_output.weight", {dim, dim});
  per_layer("ffn_norm.weight", {dim});
  per_layer("ffn_gate.weight", {dim, hidden});
  per_layer("ffn_down.weight", {hidden, dim});
  per_layer("ffn_up.weight", {dim, hidden});
  take("output_norm.weight", {dim});
  off += size_t(seq_len * (dim / heads)) * 4;  // unused RoPE tables
  if (h[5] < 0) take("output.weight", {dim, vocab});
  f.storage = bytes;
  return f;
}

inline ModelFile load_stories260k() {
  if (std::getenv("PEREGRINE_TEST_LOCAL_LLAMA2C")) {
    return load_llama2c_for_test(shared_file("models/stories260K/stories260K.bin"));
  }
  return read_llama2c(shared_file("models/stories260K/stories260K.bin"),
                      shared_file("models/stories260K/tok512.bin"));
}

inline int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Greedy decoding from BOS, one token per forward call.
inline std::vector<int32_t> greedy_from_bos(Model& model, KvType type, int n_steps) {
  KvCache kv(model.config(), type, (n_steps + 1 + 15) / 16 + 1);
  std::vector<int32_t> out;
  std::vector<float> logits;
  int32_t token = 1;
  for (int pos = 0; pos < n_steps; ++pos) {
    if (!kv.reserve(0, pos + 1)) throw std::runtime_error("out of KV blocks");
    Batch b;
    b.add(token, pos, 0, true);
    model.forward(b, kv, logits);
    token = argmax(logits);
    out.push_back(token);
  }
  return out;
}

}  // namespace peregrine::test
