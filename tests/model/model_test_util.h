#pragma once
// Shared helpers of the model tests: loading stories260K and greedy decoding.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "common/test_paths.h"
#include "format/llama2c.h"
#include "model/model.h"

namespace peregrine::test {

inline ModelFile load_stories260k() {
  return read_llama2c(shared_file("models/stories260K/stories260K.bin"),
                      shared_file("models/stories260K/tok512.bin"));
}

inline int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Greedy decoding from BOS, one token per forward call.
inline std::vector<int32_t> greedy_from_bos(Model& model, KvType type, int n_steps) {
  KvCache kv = model.make_kv_cache(type, (n_steps + 1 + 15) / 16 + 1);
  std::vector<int32_t> out;
  std::vector<float> logits;
  int32_t token = 1;
  for (int pos = 0; pos < n_steps; ++pos) {
    if (!kv.pool().reserve(0, pos + 1)) throw std::runtime_error("out of KV blocks");
    Batch b;
    b.add(token, pos, 0, true);
    model.forward(b, kv, logits);
    token = argmax(logits);
    out.push_back(token);
  }
  return out;
}

}  // namespace peregrine::test
