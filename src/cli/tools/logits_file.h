#pragma once
// The file `peregrine perplexity --save-logits` writes and `--kl-divergence` reads: a base run's
// log-probabilities at every scored position, with what identifies the run (vocabulary, windows,
// the text's tokens), so a comparison with another model, vocabulary or text fails clearly.
//
// Layout (little-endian; docs/perplexity.md):
//   magic "PRGLOGP1" (8 bytes)
//   u32 n_vocab, u32 top_k (== n_vocab: the whole distribution), u64 vocabulary hash
//   u32 ctx, u32 n_windows, u32 name length, name bytes (the base model's name, for reports)
//   i32 tokens[n_windows * ctx]   the text's tokens the windows cover (before BOS replaces the first)
//   then for each window, each scored position (ctx - 1 - ctx / 2 of them), in order:
//     f64 nll of the next token
//     whole distribution: f32 log_probs[n_vocab]
//     top K:              f32 log_rest (log of the probability outside the top K),
//                         K x (i32 id, f32 log_prob), most likely first
#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "cli/tools/perplexity_stats.h"

namespace peregrine::cli {

struct LogitsHeader {
  uint32_t n_vocab = 0;
  uint32_t top_k = 0;  // == n_vocab: whole distributions
  uint64_t vocab_hash = 0;
  uint32_t ctx = 0;
  uint32_t n_windows = 0;
  std::string model_name;
  std::vector<int32_t> tokens;  // n_windows * ctx

  bool whole() const { return top_k == n_vocab; }
  int64_t scored_per_window() const { return static_cast<int64_t>(ctx) - 1 - ctx / 2; }
  size_t record_bytes() const;
};

// Writes FILE.tmp and renames it to FILE on finish(), so an interrupted run leaves no file that
// looks complete. Throws UsageError if the file cannot be written.
class LogitsWriter {
 public:
  LogitsWriter(std::string path, const LogitsHeader& header);
  LogitsWriter(const LogitsWriter&) = delete;
  LogitsWriter& operator=(const LogitsWriter&) = delete;
  ~LogitsWriter();  // removes FILE.tmp unless finish() succeeded
  // One scored position: its NLL and this run's log-probabilities (n_vocab).
  void add(double nll, std::span<const float> log_probs);
  void finish();

 private:
  std::string path_, tmp_;
  LogitsHeader header_;
  std::ofstream out_;
  std::vector<uint8_t> in_top_;
  bool finished_ = false;
};

// Reads the header (checked against the file's size before anything is allocated), then the
// positions in order. Throws UsageError for a file it cannot open, FormatError for one that is
// not a logits file, is truncated, or is corrupt.
class LogitsReader {
 public:
  explicit LogitsReader(const std::string& path);
  const LogitsHeader& header() const { return header_; }
  void next(BasePosition& out);

 private:
  std::string path_;
  LogitsHeader header_;
  std::ifstream in_;
  std::vector<char> buf_;
};

}  // namespace peregrine::cli
