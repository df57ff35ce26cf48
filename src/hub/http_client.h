#pragma once
// HTTP(S) GETs over libcurl for talking to a model hub: redirects followed (at most 10, http and
// https only; libcurl sends a custom Authorization header only to the host it was given for),
// every response's headers kept (the hub puts what it knows about a file on the redirect, not on
// the final answer), connect and stall timeouts so a dead peer ends in an error, never a hang.
// One HttpSession is one connection cache, used by one thread at a time.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace peregrine::hub {

// A transfer that failed below HTTP (DNS, connect, TLS, a connection cut mid-body, a stall).
class TransferError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct HttpHop {
  long status = 0;
  std::map<std::string, std::string> headers;  // names lowercase; a repeated header keeps its last value
};

struct HttpResponse {
  std::vector<HttpHop> hops;  // every response, redirects first, the final one last
  std::string body;           // get(): the body (bounded); download(): the start of an error body

  long status() const { return hops.empty() ? 0 : hops.back().status; }
  // The final response's header, or "".
  std::string header(const std::string& lowercase_name) const;
  // The first response (of any hop) carrying the header, or "".
  std::string any_header(const std::string& lowercase_name) const;
};

struct HttpTimeouts {
  long connect_s = 30;
  long stall_s = 60;  // a transfer that moves no byte for this long fails
};

class HttpSession {
 public:
  explicit HttpSession(HttpTimeouts timeouts = {});
  ~HttpSession();
  HttpSession(const HttpSession&) = delete;
  HttpSession& operator=(const HttpSession&) = delete;

  // GET into memory. A body longer than `max_body` fails the transfer (TransferError).
  HttpResponse get(const std::string& url, const std::vector<std::string>& headers, size_t max_body);

  // GET with the final response's body handed to `sink` when its status is 2xx (the body of an
  // error answer goes, truncated, to HttpResponse::body). `start(final response)` runs once, before
  // the first body byte of a 2xx answer. A false return from `start` or `sink` aborts the transfer:
  // download then returns normally, with aborted() true; the callee knows why.
  HttpResponse download(const std::string& url, const std::vector<std::string>& headers,
                        const std::function<bool(const HttpHop& final_response)>& start,
                        const std::function<bool(std::span<const char>)>& sink);
  bool aborted() const { return aborted_; }

  struct State;  // one transfer's bookkeeping, which libcurl's callbacks fill (http_client.cpp)

 private:
  HttpResponse perform(const std::string& url, const std::vector<std::string>& headers, State& state);
  void* curl_ = nullptr;
  HttpTimeouts timeouts_;
  bool aborted_ = false;
};

// Percent-encodes every byte but unreserved ones (letters, digits, -._~), and '/' when `keep_slash`.
std::string url_encode(std::string_view s, bool keep_slash);

}  // namespace peregrine::hub
