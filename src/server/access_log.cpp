#include "server/access_log.h"

#include <cstdio>

#include "server/api_error.h"

namespace peregrine::server {

std::string escape_log_field(std::string_view s, size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string clipped;
  if (s.size() > max_bytes) {
    clipped = clip_client_text(s, max_bytes);
    s = clipped;
  }
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c >= 0x20 && c < 0x7f) {
      out += ch;
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string AccessLog::format(const RequestLog& r) const {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.start).count();
  // A request refused before its request line was read has no method or target.
  auto or_dash = [](const std::string& s) { return s.empty() ? std::string("-") : escape_log_field(s); };
  std::string line =
      or_dash(r.remote) + " \"" + or_dash(r.method) + " " + or_dash(r.target) + "\" " + std::to_string(r.status);
  if (!r.model.empty()) line += " model=\"" + escape_log_field(r.model) + "\"";
  if (r.prompt_tokens >= 0) {
    line += " prompt_tokens=" + std::to_string(r.prompt_tokens) +
            " completion_tokens=" + std::to_string(r.completion_tokens);
  }
  char duration[32];
  std::snprintf(duration, sizeof duration, " %.3fs", seconds);
  line += duration;
  if (!r.user_agent.empty()) line += " ua=\"" + escape_log_field(r.user_agent) + "\"";
  if (log_prompts_ && !r.prompt.empty())
    line += " prompt=\"" + escape_log_field(r.prompt, kMaxLoggedPromptBytes) + "\"";
  return line;
}

void AccessLog::write(const RequestLog& r) const {
  const std::string line = format(r) + "\n";
  std::fputs(line.c_str(), stderr);
}

}  // namespace peregrine::server
