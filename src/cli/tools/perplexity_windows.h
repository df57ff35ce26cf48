#pragma once
// How `peregrine perplexity` cuts a text into windows and runs them, as llama.cpp's
// llama-perplexity does: the text's tokens (BOS first when the tokenizer adds one) in
// non-overlapping windows of ctx tokens (the remainder dropped), each window's first token
// replaced by BOS, and the positions of its second half scored: logits at positions
// [ctx/2, ctx - 1) each predicting the token after them (ctx - 1 - ctx/2 per window).
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "util/batch.h"

namespace peregrine::cli {

struct PerplexityWindows {
  int64_t ctx = 0;
  int64_t count = 0;
  TokenId bos = -1;             // replaces each window's first token; -1: the tokenizer adds none
  std::vector<TokenId> tokens;  // count * ctx: the text's tokens the windows cover

  int64_t first() const { return ctx / 2; }
  int64_t scored() const { return ctx - 1 - first(); }
  TokenId input(int64_t w, int64_t j) const {
    return j == 0 && bos >= 0 ? bos : tokens[static_cast<size_t>(w * ctx + j)];
  }
  TokenId target(int64_t w, int64_t j) const { return tokens[static_cast<size_t>(w * ctx + j + 1)]; }
};

// Runs the windows through `model` in forward calls of up to `batch` tokens: a call holds parts
// of one window or several whole windows (each its own sequence), so results are the same for
// any batch (the model's rows do not depend on what shares a call). For each scored position, in
// window and position order, calls score(w, j, its logits); after each window, done(w + 1).
class WindowRunner {
 public:
  using Score = std::function<void(int64_t w, int64_t j, std::span<const float> logits)>;
  using Done = std::function<void(int64_t windows_done)>;

  WindowRunner(Model& model, KvType kv_type, int64_t ctx, int64_t batch);
  void run(const PerplexityWindows& windows, const Score& score, const Done& done);

 private:
  Model& model_;
  int64_t ctx_, batch_;
  KvCache kv_;
  Batch call_;
  std::vector<float> logits_;
};

}  // namespace peregrine::cli
