#include "cli/tools/logits_file.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "util/error.h"

namespace peregrine::cli {
namespace {

constexpr char kMagic[8] = {'P', 'R', 'G', 'L', 'O', 'G', 'P', '1'};
constexpr uint32_t kMaxVocab = 1u << 24, kMaxCtx = 1u << 24, kMaxName = 4096;
constexpr size_t kFixedHeader = 8 + 4 + 4 + 8 + 4 + 4 + 4;

template <class T>
void put(std::ofstream& out, T v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof v);
}

template <class T>
T take(const char*& p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return v;
}

}  // namespace

size_t LogitsHeader::record_bytes() const {
  return sizeof(double) + (whole() ? size_t{n_vocab} * 4 : 4 + size_t{top_k} * 8);
}

LogitsWriter::LogitsWriter(std::string path, const LogitsHeader& header)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), header_(header) {
  header_.tokens.clear();  // only needed here, not kept
  out_.open(tmp_, std::ios::binary | std::ios::trunc);
  if (!out_) throw UsageError("cannot write '" + tmp_ + "'");
  out_.write(kMagic, sizeof kMagic);
  put(out_, header.n_vocab);
  put(out_, header.top_k);
  put(out_, header.vocab_hash);
  put(out_, header.ctx);
  put(out_, header.n_windows);
  put(out_, static_cast<uint32_t>(header.model_name.size()));
  out_.write(header.model_name.data(), static_cast<std::streamsize>(header.model_name.size()));
  out_.write(reinterpret_cast<const char*>(header.tokens.data()),
             static_cast<std::streamsize>(header.tokens.size() * sizeof(int32_t)));
}

void LogitsWriter::add(double nll, std::span<const float> log_probs) {
  put(out_, nll);
  if (header_.whole()) {
    out_.write(reinterpret_cast<const char*>(log_probs.data()), static_cast<std::streamsize>(log_probs.size_bytes()));
    return;
  }
  const std::vector<int32_t> top = top_tokens(log_probs, header_.top_k);
  in_top_.assign(log_probs.size(), 0);
  for (int32_t id : top) in_top_[static_cast<size_t>(id)] = 1;
  put(out_, log_mass_outside(log_probs, in_top_));
  for (int32_t id : top) {
    put(out_, id);
    put(out_, log_probs[static_cast<size_t>(id)]);
  }
}

void LogitsWriter::finish() {
  out_.close();
  if (!out_) throw std::runtime_error("writing '" + tmp_ + "' failed (disk full?)");
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) throw std::runtime_error("cannot rename '" + tmp_ + "' to '" + path_ + "': " + ec.message());
  finished_ = true;
}

LogitsWriter::~LogitsWriter() {
  if (finished_) return;
  out_.close();
  std::error_code ec;
  std::filesystem::remove(tmp_, ec);  // an interrupted run leaves nothing behind
}

LogitsReader::LogitsReader(const std::string& path) : path_(path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  in_.open(path, std::ios::binary);
  if (ec || !in_) throw UsageError("cannot read the logits file '" + path + "'");
  // A file that is not what it should be is a FormatError (exit 1), as a bad model file is.
  const auto bad = [&](const std::string& why) { return FormatError("'" + path + "' " + why); };
  char fixed[kFixedHeader];
  if (size < kFixedHeader || !in_.read(fixed, sizeof fixed) || std::memcmp(fixed, kMagic, sizeof kMagic) != 0) {
    throw bad("is not a logits file written by `peregrine perplexity --save-logits`");
  }
  const char* p = fixed + sizeof kMagic;
  LogitsHeader& h = header_;
  h.n_vocab = take<uint32_t>(p);
  h.top_k = take<uint32_t>(p);
  h.vocab_hash = take<uint64_t>(p);
  h.ctx = take<uint32_t>(p);
  h.n_windows = take<uint32_t>(p);
  const auto name_len = take<uint32_t>(p);
  if (h.n_vocab < 1 || h.n_vocab > kMaxVocab || h.top_k < 1 || h.top_k > h.n_vocab || h.ctx < 4 ||
      h.ctx > kMaxCtx || h.n_windows < 1 || name_len > kMaxName) {
    throw bad("has a corrupt header");
  }
  // Every size from the header must add up to the file's before anything is allocated.
  using u128 = unsigned __int128;
  const u128 expected = u128{kFixedHeader} + name_len + u128{h.n_windows} * h.ctx * 4 +
                        u128{h.n_windows} * static_cast<uint64_t>(h.scored_per_window()) * h.record_bytes();
  if (expected != size) throw bad("is truncated or corrupt (its size does not match its header)");
  h.model_name.resize(name_len);
  h.tokens.resize(size_t{h.n_windows} * h.ctx);
  in_.read(h.model_name.data(), name_len);
  in_.read(reinterpret_cast<char*>(h.tokens.data()), static_cast<std::streamsize>(h.tokens.size() * 4));
  if (!in_) throw bad("could not be read");
  for (int32_t t : h.tokens) {
    if (t < 0 || static_cast<uint32_t>(t) >= h.n_vocab) throw bad("holds a token outside its vocabulary");
  }
}

void LogitsReader::next(BasePosition& out) {
  buf_.resize(header_.record_bytes());
  if (!in_.read(buf_.data(), static_cast<std::streamsize>(buf_.size()))) {
    throw FormatError("'" + path_ + "' ended early");
  }
  const char* p = buf_.data();
  out.nll = take<double>(p);
  if (header_.whole()) {
    out.top_ids.clear();
    out.log_probs.resize(header_.n_vocab);
    std::memcpy(out.log_probs.data(), p, size_t{header_.n_vocab} * 4);
    out.log_rest = -INFINITY;
    return;
  }
  out.log_rest = take<float>(p);
  out.top_ids.resize(header_.top_k);
  out.log_probs.resize(header_.top_k);
  for (uint32_t k = 0; k < header_.top_k; ++k) {
    out.top_ids[k] = take<int32_t>(p);
    out.log_probs[k] = take<float>(p);
    if (out.top_ids[k] < 0 || static_cast<uint32_t>(out.top_ids[k]) >= header_.n_vocab) {
      throw FormatError("'" + path_ + "' holds a token outside its vocabulary");
    }
  }
}

}  // namespace peregrine::cli
