#include "server/http_request_parser.h"

#include <algorithm>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cctype>
#include <cstdint>
#include <limits>

namespace peregrine::server {
namespace http = boost::beast::http;

namespace {

// Follows the chunked framing over bytes Beast has not taken yet, to refuse a line that ends in a
// bare LF (a chunk-size line, the end of a chunk's data, a trailer line) as soon as it arrives:
// Beast waits for a CRLF that never comes, and the client would hear nothing until the request
// timeout. Everything else about the framing is Beast's to judge.
class ChunkLineCheck {
 public:
  // True when the bytes of `unread` not scanned yet end a line with a bare LF.
  bool bare_lf(std::string_view unread) {
    for (; scanned_ < unread.size() && at_ != At::Done; ++scanned_) {
      if (at_ == At::Data) {
        const uint64_t skip = std::min<uint64_t>(left_, unread.size() - scanned_);
        scanned_ += skip - 1;
        left_ -= skip;
        if (left_ == 0) begin(At::DataEnd);
        continue;
      }
      const char c = unread[scanned_];
      if (c == '\n') {
        if (prev_ != '\r') return true;
        end_line();
        continue;
      }
      if (at_ == At::Size) read_size_char(c);
      if (c != '\r') line_empty_ = false;
      prev_ = c;
    }
    return false;
  }
  // Beast took `n` bytes from the front of the unread input.
  void consumed(size_t n) { scanned_ -= std::min(n, scanned_); }

 private:
  enum class At { Size, Data, DataEnd, Trailer, Done };

  void begin(At at) {
    at_ = at;
    prev_ = 0;
    line_empty_ = true;
  }
  void end_line() {
    switch (at_) {
      case At::Size:
        begin(left_ == 0 ? At::Trailer : At::Data);
        break;
      case At::DataEnd:
        begin(At::Size);
        left_ = 0;
        in_digits_ = true;
        break;
      case At::Trailer:
        begin(line_empty_ ? At::Done : At::Trailer);
        break;
      default:
        break;
    }
  }
  void read_size_char(char c) {
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
    if (!in_digits_ || digit < 0) {
      in_digits_ = false;  // an extension or junk: Beast refuses junk
      return;
    }
    left_ = left_ > (std::numeric_limits<uint64_t>::max() >> 4) ? std::numeric_limits<uint64_t>::max()
                                                                : left_ * 16 + static_cast<uint64_t>(digit);
  }

  At at_ = At::Size;
  uint64_t left_ = 0;  // the chunk's size while its line is read, then its data bytes still to come
  bool in_digits_ = true;
  bool line_empty_ = true;
  char prev_ = 0;
  size_t scanned_ = 0;  // bytes of the unread input already followed
};

}  // namespace

struct RequestParser::Impl {
  http::request_parser<http::string_body> parser;
  char head_prev = 0;  // the last head byte taken (obs-fold spans pieces)
  ChunkLineCheck chunk_lines;
};

namespace {

ApiError http_error(int status, std::string message, std::string code) {
  return ApiError(status, std::move(message), "invalid_request_error", std::nullopt, std::move(code));
}

ApiError bad_request(std::string message) { return http_error(400, std::move(message), "bad_request"); }

ApiError header_too_large(size_t limit) {
  return http_error(431, "the request header is larger than " + std::to_string(limit) + " bytes", "header_too_large");
}

// "HTTP/d.d" closing the request line at the start of `rest`: a well-formed version other than
// the ones Beast takes (1.0, 1.1).
bool other_http_version(std::string_view rest) {
  const std::string_view line = rest.substr(0, rest.find("\r\n"));
  if (line.size() < 9) return false;
  const std::string_view v = line.substr(line.size() - 8);
  return v.starts_with("HTTP/") && std::isdigit(static_cast<unsigned char>(v[5])) && v[6] == '.' &&
         std::isdigit(static_cast<unsigned char>(v[7]));
}

// Beast's errors as statuses: limits are 431/413, an unknown version 505, everything else
// malformed framing (400). `rest`: the input from where the request began.
ApiError from_beast(const boost::beast::error_code& ec, const HttpLimits& limits, std::string_view rest) {
  if (ec == http::error::bad_version && other_http_version(rest)) {
    return http_error(505, "this HTTP version is not supported (HTTP/1.1 is)", "http_version_not_supported");
  }
  if (ec == http::error::header_limit) return header_too_large(limits.header_bytes);
  if (ec == http::error::body_limit) return payload_too_large(limits.body_bytes);
  if (ec == http::error::bad_transfer_encoding) {
    return bad_request(
        "malformed HTTP request: conflicting Transfer-Encoding (repeated chunked, or with Content-Length)");
  }
  if (ec == http::error::bad_content_length) {
    return bad_request(
        "malformed HTTP request: bad Content-Length (not a number, negative, conflicting values, or with "
        "Transfer-Encoding)");
  }
  return bad_request("malformed HTTP request: " + ec.message());
}

// Splits a comma-separated list of tokens, trimming spaces and tabs; empty elements dropped.
std::vector<std::string_view> token_list(std::string_view s) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (at <= s.size()) {
    size_t end = s.find(',', at);
    if (end == std::string_view::npos) end = s.size();
    std::string_view t = s.substr(at, end - at);
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    if (!t.empty()) out.push_back(t);
    at = end + 1;
  }
  return out;
}

// The path of a request-target: origin-form "/p?q", absolute-form "http://host/p?q" (its
// authority goes to `authority`), or "*". Refused (nullopt): anything else, a '#' anywhere (a
// fragment is never part of a request-target), and an absolute-form target whose path is empty
// but which goes on with a query ("http://host?/v1/models" is the path "/" with the query
// "/v1/models", which a careless proxy and a careless server read differently).
std::optional<std::string> target_path(std::string_view target, std::string& authority) {
  if (target == "*") return std::string(target);
  if (target.find('#') != std::string_view::npos) return std::nullopt;
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() > scheme.size() && iequals(target.substr(0, scheme.size()), scheme)) {
      const size_t end = target.find_first_of("/?", scheme.size());
      authority = std::string(target.substr(scheme.size(), end - scheme.size()));  // to the end when npos
      if (end == std::string_view::npos) return std::string("/");
      if (target[end] != '/') return std::nullopt;
      target = target.substr(end);
      break;
    }
  }
  if (target.empty() || target.front() != '/') return std::nullopt;
  return std::string(target.substr(0, target.find('?')));
}

// obs-fold (a field line continued on the next line after a space or tab, RFC 9112 5.2): Beast
// joins the lines; nginx and the RFC's advice for servers refuse the message. `prev` is the byte
// before `head` (kept across calls).
bool has_obs_fold(std::string_view head, char& prev) {
  for (const char c : head) {
    if (prev == '\n' && (c == ' ' || c == '\t')) return true;
    prev = c;
  }
  return false;
}

// Transfer codings: chunked alone is the one we decode.
std::optional<ApiError> transfer_coding_error(const HttpRequest& r) {
  std::vector<std::string_view> codings;
  size_t fields = 0;
  for (const auto& [name, value] : r.fields) {
    if (!iequals(name, "Transfer-Encoding")) continue;
    ++fields;
    for (std::string_view t : token_list(value)) codings.push_back(t);
  }
  if (fields == 0) return std::nullopt;
  if (r.version == 10) return bad_request("malformed HTTP request: Transfer-Encoding in an HTTP/1.0 request");
  if (r.field("Content-Length"))
    return bad_request("malformed HTTP request: both Content-Length and Transfer-Encoding");
  size_t chunked = 0;
  std::string_view other;
  for (std::string_view c : codings) {
    if (iequals(c, "chunked"))
      ++chunked;
    else if (other.empty())
      other = c;
  }
  if (codings.empty() || chunked > 1 || (chunked == 1 && !iequals(codings.back(), "chunked"))) {
    return bad_request("malformed HTTP request: chunked must be applied once, as the final transfer coding");
  }
  if (!other.empty()) {
    return http_error(501, "Transfer-Encoding '" + clip_client_text(other) + "' is not supported (only chunked)",
                      "not_implemented");
  }
  return std::nullopt;
}

}  // namespace

RequestParser::RequestParser(const HttpLimits& limits) : impl_(std::make_unique<Impl>()), limits_(limits) {
  impl_->parser.header_limit(static_cast<std::uint32_t>(limits.header_bytes));
  // The body limit is set in read_body(): a declared size over it is answered only after the
  // head passed the server's checks (an unauthenticated client hears 401, not 413).
  // (No limit yet is the largest one: Beast 1.74 compares a Content-Length with an empty limit as
  // if it were exceeded.)
  impl_->parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  impl_->parser.eager(false);  // stop after the header
}

RequestParser::~RequestParser() = default;

bool RequestParser::got_some() const { return impl_->parser.got_some(); }

std::optional<uint64_t> RequestParser::content_length() const {
  if (impl_->parser.chunked()) return std::nullopt;
  return impl_->parser.content_length().value_or(0);
}

size_t RequestParser::body_bytes() const { return impl_->parser.get().body().size(); }

void RequestParser::fail(ApiError e) {
  error_ = std::make_unique<ApiError>(std::move(e));
  state_ = State::Failed;
}

// Beast 1.74 (Debian 12) asserts that the final chunk's header is re-presented with at least 5
// bytes once it has seen "0\r\n" (boostorg/beast#2861, fixed in Boost 1.86): given "0\r\n" plus
// one byte, a build with assertions aborts, where the code after the assertion would correctly ask
// for more. Those 4 bytes can never end a chunked body (it ends with CRLF CRLF), so holding them
// back until another byte arrives changes no outcome. Found by fuzz_http_request (a chunked
// request trickled in 1-byte pieces; the input is kept in fuzz/http_seeds).
bool RequestParser::holds_final_chunk_prefix(std::string_view unread) const {
  return head_done_ && impl_->parser.chunked() && unread.size() == 4 && unread.substr(0, 3) == "0\r\n";
}

size_t RequestParser::feed(std::string_view input) {
  size_t used = 0;
  if (!impl_->parser.got_some()) {
    // RFC 9112 2.2: ignore empty lines before a request line.
    while (used < input.size() && (input[used] == '\r' || input[used] == '\n')) ++used;
  }
  while (state_ == State::NeedMore && used < input.size()) {
    const bool chunked_body = head_done_ && impl_->parser.chunked();
    if (chunked_body && impl_->chunk_lines.bare_lf(input.substr(used))) {
      fail(bad_request("malformed HTTP request: a chunked-body line ends in a bare LF (CRLF is required)"));
      break;
    }
    if (holds_final_chunk_prefix(input.substr(used))) break;
    boost::beast::error_code ec;
    const size_t n = impl_->parser.put(boost::asio::const_buffer(input.data() + used, input.size() - used), ec);
    if (chunked_body) impl_->chunk_lines.consumed(n);
    if (!head_done_ && has_obs_fold(input.substr(used, n), impl_->head_prev)) {
      fail(bad_request("malformed HTTP request: a header field line continued on the next (obs-fold)"));
      used += n;
      break;
    }
    used += n;
    head_bytes_ += head_done_ ? 0 : n;
    if (ec == http::error::need_more) break;
    if (ec) {
      fail(from_beast(ec, limits_, input.substr(used)));
      break;
    }
    if (!head_done_ && impl_->parser.is_header_done()) {
      head_done_ = true;
      finish_head();  // HeaderDone or Failed, even when there is no body
    } else if (impl_->parser.is_done()) {
      request_.body = std::move(impl_->parser.get().body());
      state_ = State::Complete;
    } else if (n == 0) {
      break;
    }
  }
  return used;
}

void RequestParser::feed_eof() {
  if (state_ == State::Complete || state_ == State::Failed) return;
  fail(bad_request("the connection closed before the request was complete"));
}

void RequestParser::read_body() {
  if (state_ != State::HeaderDone) return;
  if (impl_->parser.content_length().value_or(0) > limits_.body_bytes)
    return fail(payload_too_large(limits_.body_bytes));
  state_ = State::NeedMore;
  impl_->parser.body_limit(limits_.body_bytes);
  impl_->parser.eager(true);
  if (impl_->parser.is_done()) {  // no body at all
    request_.body = std::move(impl_->parser.get().body());
    state_ = State::Complete;
  }
}

void RequestParser::finish_head() {
  const auto& msg = impl_->parser.get();
  HttpRequest& r = request_;
  // Beast applies its limit to the request line and to the fields separately once the whole head
  // is in hand, but to the whole buffer while it waits for more: check the total, so the answer
  // does not depend on how the bytes arrived.
  if (head_bytes_ > limits_.header_bytes) return fail(header_too_large(limits_.header_bytes));
  r.method = std::string(msg.method_string());
  r.target = std::string(msg.target());
  r.version = static_cast<int>(msg.version());
  for (const auto& f : msg) r.fields.emplace_back(std::string(f.name_string()), std::string(f.value()));
  if (r.version != 10 && r.version != 11) {
    return fail(http_error(505,
                           "HTTP version " + std::to_string(r.version / 10) + "." + std::to_string(r.version % 10) +
                               " is not supported (HTTP/1.1 is)",
                           "http_version_not_supported"));
  }
  if (r.fields.size() > limits_.header_fields) {
    return fail(http_error(431, "the request has more than " + std::to_string(limits_.header_fields) + " header fields",
                           "header_too_large"));
  }
  const auto path = target_path(r.target, r.authority);
  if (!path) {
    return fail(bad_request(
        "malformed HTTP request: the request-target must be a path starting with '/' (or an absolute URL with "
        "one), without '#'"));
  }
  r.path = *path;
  const size_t hosts = r.field_count("Host");
  if ((r.version == 11 && hosts != 1) || hosts > 1) {
    return fail(bad_request("malformed HTTP request: an HTTP/1.1 request needs exactly one Host header field"));
  }
  if (auto e = transfer_coding_error(r)) return fail(std::move(*e));
  if (auto expect = r.field("Expect")) {
    if (!iequals(*expect, "100-continue") || r.field_count("Expect") > 1) {
      return fail(http_error(417, "only 'Expect: 100-continue' is supported", "expectation_failed"));
    }
    r.expect_continue = r.version == 11;
  }
  r.keep_alive = impl_->parser.keep_alive();
  r.has_body = impl_->parser.chunked() || impl_->parser.content_length().value_or(0) > 0;
  state_ = State::HeaderDone;
}

}  // namespace peregrine::server
