#include "server/http_request_parser.h"

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cctype>
#include <limits>

namespace peregrine::server {
namespace http = boost::beast::http;

struct RequestParser::Impl {
  http::request_parser<http::string_body> parser;
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

// The path of a request-target: origin-form "/p?q", absolute-form "http://host/p?q", or "*".
std::optional<std::string> target_path(std::string_view target) {
  if (target == "*") return std::string(target);
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() > scheme.size() && iequals(target.substr(0, scheme.size()), scheme)) {
      const size_t slash = target.find('/', scheme.size());
      target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
      break;
    }
  }
  if (target.empty() || target.front() != '/') return std::nullopt;
  return std::string(target.substr(0, target.find_first_of("?#")));
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
    return http_error(501, "Transfer-Encoding '" + std::string(other) + "' is not supported (only chunked)",
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
    if (holds_final_chunk_prefix(input.substr(used))) break;
    boost::beast::error_code ec;
    const size_t n = impl_->parser.put(boost::asio::const_buffer(input.data() + used, input.size() - used), ec);
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
  const auto path = target_path(r.target);
  if (!path) return fail(bad_request("malformed HTTP request: the request-target must be a path starting with '/'"));
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
