#pragma once
// Sessions of the web page when the server has an API key: the page's login form sends the key
// once (POST /webui/login, Authorization: Bearer) and gets a random token in an HttpOnly,
// SameSite=Strict cookie with an expiry, so no script (ours or another app's on the same host:
// cookies are not separated by port) ever reads the key from a cookie. Tokens live in memory
// only: a restart logs every page out.
#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine::server {

class WebSessions {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxSessions = 64;  // the oldest goes beyond this
  static constexpr std::chrono::hours kLifetime{12};
  static constexpr std::string_view kCookie = "peregrine_session";

  // A new session's token (64 hex digits from the kernel's random source).
  std::string open();
  // True when `token` names a session that has not expired. Compares against every session in
  // constant time per entry.
  bool valid(std::string_view token) const;
  void close(std::string_view token);

  // The Set-Cookie values that start and end a session.
  static std::string cookie_for(const std::string& token);
  static std::string expired_cookie();

 private:
  struct Session {
    std::string token;
    Clock::time_point expires;
  };
  mutable std::mutex mu_;
  std::vector<Session> sessions_;  // oldest first
};

}  // namespace peregrine::server
