#pragma once
// One access-log line per HTTP request on stderr: client, method, target, status, model, prompt
// and completion tokens, duration, user agent; the prompt text only when the operator asked for
// it (--log-prompts). Every field a client controls is escaped (bytes outside printable ASCII,
// quotes and backslashes as \xHH, \", \\), so a request cannot forge a line or send terminal
// escapes, and cut to 256 bytes (4 KiB of a prompt), so it cannot write megabytes either. A
// client that went away before its response is logged with status 499.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace peregrine::server {

struct RequestLog {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::string remote;  // client address
  std::string method;
  std::string target;  // as sent (never decoded)
  std::string user_agent;
  std::string model;  // the request's "model", when it had one
  int status = 0;
  int64_t prompt_tokens = -1;
  int64_t completion_tokens = -1;
  std::string prompt;  // filled only with --log-prompts
};

class AccessLog {
 public:
  explicit AccessLog(bool log_prompts) : log_prompts_(log_prompts) {}
  bool log_prompts() const { return log_prompts_; }
  // The line for this request (without the newline).
  std::string format(const RequestLog& r) const;
  // Writes the line in one call (lines from many threads do not interleave).
  void write(const RequestLog& r) const;

 private:
  const bool log_prompts_;
};

// Printable ASCII stays; everything else, '"' and '\' are escaped. A field longer than
// `max_bytes` is cut first (clip_client_text's marker says how much), so one request writes a
// line of bounded length.
std::string escape_log_field(std::string_view s, size_t max_bytes = 256);
// --log-prompts logs this much of each prompt.
inline constexpr size_t kMaxLoggedPromptBytes = 4096;

}  // namespace peregrine::server
