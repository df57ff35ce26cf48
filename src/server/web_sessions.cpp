#include "server/web_sessions.h"

#include <sys/random.h>

#include <algorithm>
#include <array>
#include <stdexcept>

#include "server/auth.h"

namespace peregrine::server {
namespace {

std::string random_token() {
  std::array<unsigned char, 32> bytes{};
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (n < 0) throw std::runtime_error("getrandom failed: no session token");
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (const unsigned char b : bytes) {
    token += kHex[b >> 4];
    token += kHex[b & 15];
  }
  return token;
}

}  // namespace

std::string WebSessions::open() {
  std::string token = random_token();
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = Clock::now();
  std::erase_if(sessions_, [&](const Session& s) { return s.expires <= now; });
  if (sessions_.size() >= kMaxSessions) sessions_.erase(sessions_.begin());
  sessions_.push_back({token, now + kLifetime});
  return token;
}

bool WebSessions::valid(std::string_view token) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = Clock::now();
  bool found = false;
  for (const Session& s : sessions_) found |= constant_time_equal(s.token, token) && s.expires > now;
  return found;
}

void WebSessions::close(std::string_view token) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(sessions_, [&](const Session& s) { return constant_time_equal(s.token, token); });
}

std::string WebSessions::cookie_for(const std::string& token) {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(kLifetime).count();
  return std::string(kCookie) + "=" + token + "; Path=/; Max-Age=" + std::to_string(seconds) +
         "; HttpOnly; SameSite=Strict";
}

std::string WebSessions::expired_cookie() {
  return std::string(kCookie) + "=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict";
}

}  // namespace peregrine::server
