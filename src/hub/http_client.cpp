#include "hub/http_client.h"

#include <curl/curl.h>

#include <cctype>
#include <mutex>

namespace peregrine::hub {
namespace {

constexpr size_t kErrorBodyBytes = 4096;  // of an error answer's body, kept for the message

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

CURL* handle(void* p) { return static_cast<CURL*>(p); }

}  // namespace

struct HttpSession::State {
  HttpResponse response;
  size_t max_body = 0;
  bool body_too_large = false;
  const std::function<bool(const HttpHop&)>* start = nullptr;  // null: get() (the body goes to memory)
  const std::function<bool(std::span<const char>)>* sink = nullptr;
  bool started = false, to_sink = false, aborted = false;
};

namespace {

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto& st = *static_cast<HttpSession::State*>(user);
  const std::string_view line(data, size * count);
  if (line.starts_with("HTTP/")) {
    HttpHop hop;
    const size_t sp = line.find(' ');
    if (sp != std::string_view::npos)
      hop.status = std::strtol(std::string(line.substr(sp + 1, 3)).c_str(), nullptr, 10);
    st.response.hops.push_back(std::move(hop));
  } else if (const size_t colon = line.find(':'); colon != std::string_view::npos && !st.response.hops.empty()) {
    std::string name(line.substr(0, colon));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    st.response.hops.back().headers[trim(name)] = trim(line.substr(colon + 1));
  }
  return size * count;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto& st = *static_cast<HttpSession::State*>(user);
  const size_t n = size * count;
  const std::span<const char> bytes(data, n);
  if (st.start == nullptr) {  // get()
    if (st.response.body.size() + n > st.max_body) {
      st.body_too_large = true;
      return 0;
    }
    st.response.body.append(data, n);
    return n;
  }
  if (!st.started) {
    st.started = true;
    const long status = st.response.status();
    st.to_sink = status >= 200 && status < 300;
    if (st.to_sink && !(*st.start)(st.response.hops.back())) {
      st.aborted = true;
      return 0;
    }
  }
  if (st.to_sink) {
    if (!(*st.sink)(bytes)) {
      st.aborted = true;
      return 0;
    }
  } else if (st.response.body.size() < kErrorBodyBytes) {
    st.response.body.append(data, std::min(n, kErrorBodyBytes - st.response.body.size()));
  }
  return n;
}

}  // namespace

std::string HttpResponse::header(const std::string& name) const {
  if (hops.empty()) return "";
  auto it = hops.back().headers.find(name);
  return it == hops.back().headers.end() ? "" : it->second;
}

std::string HttpResponse::any_header(const std::string& name) const {
  for (const auto& hop : hops)
    if (auto it = hop.headers.find(name); it != hop.headers.end()) return it->second;
  return "";
}

HttpSession::HttpSession(HttpTimeouts timeouts) : timeouts_(timeouts) {
  static std::once_flag once;  // curl_global_init is not itself thread-safe
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  curl_ = curl_easy_init();
  if (curl_ == nullptr) throw TransferError("libcurl: cannot create a handle");
}

HttpSession::~HttpSession() { curl_easy_cleanup(handle(curl_)); }

HttpResponse HttpSession::perform(const std::string& url, const std::vector<std::string>& headers, State& st) {
  CURL* c = handle(curl_);
  curl_easy_reset(c);  // keeps the connection cache
  char error[CURL_ERROR_SIZE] = {0};
  curl_slist* list = nullptr;
  for (const auto& h : headers) list = curl_slist_append(list, h.c_str());
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, timeouts_.connect_s);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, timeouts_.stall_s);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM for DNS timeouts: sessions run on threads
  curl_easy_setopt(c, CURLOPT_USERAGENT, "peregrine/0.1");
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &st);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &st);
  const CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(list);
  if (rc == CURLE_WRITE_ERROR && st.body_too_large)
    throw TransferError("the answer is larger than " + std::to_string(st.max_body) + " bytes");
  if (rc == CURLE_WRITE_ERROR && st.aborted) {
    aborted_ = true;
    return std::move(st.response);
  }
  if (rc != CURLE_OK) throw TransferError(error[0] != '\0' ? error : curl_easy_strerror(rc));
  return std::move(st.response);
}

HttpResponse HttpSession::get(const std::string& url, const std::vector<std::string>& headers, size_t max_body) {
  aborted_ = false;
  State st;
  st.max_body = max_body;
  return perform(url, headers, st);
}

HttpResponse HttpSession::download(const std::string& url, const std::vector<std::string>& headers,
                                   const std::function<bool(const HttpHop&)>& start,
                                   const std::function<bool(std::span<const char>)>& sink) {
  aborted_ = false;
  State st;
  st.start = &start;
  st.sink = &sink;
  HttpResponse r = perform(url, headers, st);
  // An empty 2xx body never reached on_body: start() still runs once.
  if (!aborted_ && !st.started && r.status() >= 200 && r.status() < 300 && !start(r.hops.back())) aborted_ = true;
  return r;
}

std::string url_encode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace peregrine::hub
