#include "server/http_message.h"

#include "server/sse.h"

namespace peregrine::server {
namespace {

const char* reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string head(const HttpResponse& r, int version, bool keep_alive) {
  std::string out = version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  out += std::to_string(r.status);
  out += ' ';
  out += reason_phrase(r.status);
  out += "\r\nContent-Type: ";
  out += r.content_type;
  out += "\r\n";
  for (const auto& [name, value] : r.headers) out += name + ": " + value + "\r\n";
  if (!keep_alive)
    out += "Connection: close\r\n";
  else if (version == 10)
    out += "Connection: keep-alive\r\n";
  return out;
}

}  // namespace

std::optional<std::string_view> HttpRequest::field(std::string_view name) const {
  for (const auto& [n, v] : fields) {
    if (iequals(n, name)) return std::string_view(v);
  }
  return std::nullopt;
}

size_t HttpRequest::field_count(std::string_view name) const {
  size_t n = 0;
  for (const auto& f : fields) n += iequals(f.first, name) ? 1 : 0;
  return n;
}

HttpResponse json_response(int status, const nlohmann::json& body) {
  HttpResponse r;
  r.status = status;
  r.body = dump_json(body);
  return r;
}

HttpResponse event_stream_head() {
  HttpResponse head;
  head.content_type = "text/event-stream";
  head.headers.emplace_back("Cache-Control", "no-cache");
  return head;
}

HttpResponse error_response(const ApiError& e) {
  HttpResponse r = json_response(e.status(), e.body());
  if (e.status() == 429 || e.status() == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

std::string serialize_response(const HttpResponse& r, int version, bool keep_alive, bool head_only) {
  std::string out = head(r, version, keep_alive);
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n\r\n";
  if (!head_only) out += r.body;
  return out;
}

std::string serialize_stream_head(const HttpResponse& r, int version, bool keep_alive) {
  std::string out = head(r, version, keep_alive && version == 11);
  if (version == 11) out += "Transfer-Encoding: chunked\r\n";
  out += "\r\n";
  return out;
}

std::string chunk(std::string_view data) {
  if (data.empty()) return {};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string size;
  for (size_t n = data.size(); n > 0; n /= 16) size.insert(size.begin(), kHex[n % 16]);
  std::string out;
  out.reserve(size.size() + data.size() + 4);
  out += size;
  out += "\r\n";
  out += data;
  out += "\r\n";
  return out;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    const int hi = hex_digit(s[i + 1]), lo = hex_digit(s[i + 2]);
    if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

}  // namespace peregrine::server
