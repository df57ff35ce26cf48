#include "server/access_log.h"

#include <httplib.h>

#include <cstdio>

#include "server/sse.h"

namespace peregrine::server {

void AccessLog::begin(const httplib::Response& res) {
  std::lock_guard<std::mutex> lock(mu_);
  open_[&res] = Entry{};
}

void AccessLog::note_tokens(const httplib::Response& res, int64_t prompt_tokens, int64_t completion_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = open_[&res];
  e.prompt_tokens = prompt_tokens;
  e.completion_tokens = completion_tokens;
}

void AccessLog::note_prompt(const httplib::Response& res, const std::string& prompt) {
  if (!log_prompts_) return;
  std::lock_guard<std::mutex> lock(mu_);
  open_[&res].prompt = prompt;
}

void AccessLog::end(const httplib::Request& req, const httplib::Response& res) {
  Entry e;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = open_.find(&res);
    if (it != open_.end()) {
      e = std::move(it->second);
      open_.erase(it);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - e.start).count();
  std::string line = req.remote_addr + " \"" + req.method + " " + req.path + "\" " + std::to_string(res.status);
  if (e.prompt_tokens >= 0) {
    line += " prompt_tokens=" + std::to_string(e.prompt_tokens) + " completion_tokens=" + std::to_string(e.completion_tokens);
  }
  char dur[32];
  std::snprintf(dur, sizeof dur, " %.3fs", seconds);
  line += dur;
  if (log_prompts_ && !e.prompt.empty()) line += " prompt=" + dump_json(e.prompt);
  line += "\n";
  std::fputs(line.c_str(), stderr);  // one call per line: lines from many threads do not interleave
}

}  // namespace peregrine::server
