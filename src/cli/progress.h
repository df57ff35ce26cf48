#pragma once
// A one-line progress display on stderr for long file writes (synth, convert).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace peregrine::cli {

class ProgressLine {
 public:
  explicit ProgressLine(std::string label) : label_(std::move(label)) {}
  void operator()(uint64_t done, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    // Redraw at most ~10 times a second, and always at the end.
    if (done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    const int width = 30, filled = static_cast<int>(frac * width);
    std::fprintf(stderr, "\r%s [%s%s] %5.1f%%  %.1f / %.1f MiB", label_.c_str(),
                 std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(),
                 frac * 100.0, done / 1048576.0, total / 1048576.0);
    if (done >= total) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  std::string label_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace peregrine::cli
