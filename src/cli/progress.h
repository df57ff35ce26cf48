#pragma once
// One-line progress displays on stderr: for long file writes (synth, convert) and for downloads
// (pull: bytes, rate and time left).
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace peregrine::cli {

// "[#########                     ]  31.0%": a bar of 30 cells.
inline std::string progress_bar(double frac) {
  const int width = 30, filled = static_cast<int>(frac * width);
  return "[" + std::string(filled, '#') + std::string(width - filled, ' ') + "]";
}

class ProgressLine {
 public:
  explicit ProgressLine(std::string label) : label_(std::move(label)) {}
  void operator()(uint64_t done, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    // Redraw at most ~10 times a second, and always at the end.
    if (done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    std::fprintf(stderr, "\r%s %s %5.1f%%  %.1f / %.1f MiB", label_.c_str(), progress_bar(frac).c_str(), frac * 100.0,
                 done / 1048576.0, total / 1048576.0);
    if (done >= total) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  std::string label_;
  std::chrono::steady_clock::time_point last_{};
};

// A download's line: "pull ORG/NAME [####    ]  45.1%  1.1 / 2.5 GiB  12.3 MiB/s  1:52 left".
// On a terminal it is redrawn ~10 times a second; elsewhere (a log, a test) only the last state is
// written, by finish().
class TransferLine {
 public:
  explicit TransferLine(std::string label) : label_(std::move(label)), terminal_(::isatty(STDERR_FILENO) == 1) {}
  void operator()(uint64_t done, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (!started_) {  // what was already on disk does not count towards the rate
      started_ = true;
      start_ = now;
      base_ = done;
    }
    done_ = done;
    total_ = total;
    if (!terminal_ || now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    draw(now);
  }
  // Writes the final state and ends the line.
  void finish() {
    if (!started_) return;
    draw(std::chrono::steady_clock::now());
    std::fputc('\n', stderr);
    std::fflush(stderr);
    started_ = false;
  }

 private:
  void draw(std::chrono::steady_clock::time_point now) const {
    const double frac = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double rate = seconds > 0 && done_ > base_ ? static_cast<double>(done_ - base_) / seconds : 0;
    std::string left = "";
    if (rate > 0 && done_ < total_) {
      const auto s = static_cast<long long>(static_cast<double>(total_ - done_) / rate);
      char buf[48];
      std::snprintf(buf, sizeof buf, "  %lld:%02lld left", s / 60, s % 60);
      left = buf;
    }
    std::fprintf(stderr, "%s%s %s %5.1f%%  %.1f / %.1f MiB  %.1f MiB/s%s%s", terminal_ ? "\r" : "", label_.c_str(),
                 progress_bar(frac).c_str(), frac * 100.0, done_ / 1048576.0, total_ / 1048576.0, rate / 1048576.0,
                 left.c_str(), terminal_ ? "\033[K" : "");
    std::fflush(stderr);
  }

  std::string label_;
  bool terminal_;
  bool started_ = false;
  uint64_t base_ = 0, done_ = 0, total_ = 0;
  std::chrono::steady_clock::time_point start_{}, last_{};
};

}  // namespace peregrine::cli
