#pragma once
// One access-log line per HTTP request on stderr: client, method, path, status, prompt and
// completion tokens, duration; the prompt text only when the operator asked for it
// (--log-prompts). Handlers note tokens against their Response while it is being produced; the
// line is written when the server has sent the response.
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace peregrine::server {

class AccessLog {
 public:
  explicit AccessLog(bool log_prompts) : log_prompts_(log_prompts) {}

  void begin(const httplib::Response& res);
  void note_tokens(const httplib::Response& res, int64_t prompt_tokens, int64_t completion_tokens);
  void note_prompt(const httplib::Response& res, const std::string& prompt);  // kept only with --log-prompts
  // Writes the line and forgets the request.
  void end(const httplib::Request& req, const httplib::Response& res);

 private:
  struct Entry {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    int64_t prompt_tokens = -1;
    int64_t completion_tokens = -1;
    std::string prompt;
  };
  const bool log_prompts_;
  std::mutex mu_;
  std::map<const httplib::Response*, Entry> open_;
};

}  // namespace peregrine::server
