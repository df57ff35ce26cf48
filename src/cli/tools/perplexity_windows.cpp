#include "cli/tools/perplexity_windows.h"

#include <algorithm>
#include <stdexcept>

namespace peregrine::cli {
namespace {

constexpr int32_t kBlock = 16;

// A call of `batch` tokens touches at most batch / ctx + 2 windows (the tail of one, whole ones,
// the head of the next); each needs the blocks of a whole window.
int64_t blocks_needed(int64_t ctx, int64_t batch) {
  return (batch / ctx + 2) * ((ctx + kBlock - 1) / kBlock);
}

}  // namespace

WindowRunner::WindowRunner(Model& model, KvType kv_type, int64_t ctx, int64_t batch)
    : model_(model), ctx_(ctx), batch_(batch), kv_(model.make_kv_cache(kv_type, blocks_needed(ctx, batch), kBlock)) {}

void WindowRunner::run(const PerplexityWindows& win, const Score& score, const Done& done) {
  struct Row {
    int64_t w, j;
  };
  std::vector<Row> rows;
  const int64_t total = win.count * ctx_, first = win.first();
  const auto vocab = static_cast<size_t>(model_.config().n_vocab);
  for (int64_t pos = 0; pos < total;) {
    const int64_t end = std::min(pos + batch_, total);
    call_.clear();
    rows.clear();
    for (int64_t g = pos; g < end; ++g) {
      const int64_t w = g / ctx_, j = g % ctx_;
      const auto seq = static_cast<SeqId>(w);
      // Always room: blocks_needed counts the windows a call can touch.
      if (j == 0 && !kv_.pool().reserve(seq, ctx_))
        throw std::logic_error("perplexity: KV cache too small for a window");
      const bool want = j >= first && j < ctx_ - 1;
      call_.add(win.input(w, j), static_cast<int32_t>(j), seq, want);
      if (want) rows.push_back({w, j});
    }
    model_.forward(call_, kv_, logits_);
    for (size_t r = 0; r < rows.size(); ++r) {
      score(rows[r].w, rows[r].j, std::span<const float>(logits_).subspan(r * vocab, vocab));
    }
    // The windows this call finished give their blocks back.
    for (int64_t w = pos / ctx_; w < (end + ctx_ - 1) / ctx_; ++w) {
      if ((w + 1) * ctx_ > end) break;
      kv_.pool().release(static_cast<SeqId>(w));
      done(w + 1);
    }
    pos = end;
  }
}

}  // namespace peregrine::cli
