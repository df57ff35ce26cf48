#pragma once
// Incremental, strict HTTP/1.1 request framing (RFC 9112) with limits enforced before the bytes
// they guard are kept: feed it bytes as they arrive; it stops after the header so the server can
// refuse (route, API key, size) before reading any of the body, then continues with the body
// (Content-Length or chunked, both under one body limit). One parser per request; the bytes a
// parser does not consume belong to the next (pipelined) request.
//
// Refused with the status to answer (the connection then closes): malformed syntax, a negative
// or conflicting Content-Length, Content-Length together with Transfer-Encoding, chunked not
// the final coding, a bad chunk size (400); a missing or repeated Host in HTTP/1.1 (400); any
// transfer coding other than chunked (501); header bytes or field lines over the limit (431);
// a body over the limit, declared or decoded (413); an Expect other than 100-continue (417);
// HTTP versions other than 1.0 and 1.1 (505).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "server/http_message.h"

namespace peregrine::server {

class RequestParser {
 public:
  enum class State {
    NeedMore,    // feed more bytes
    HeaderDone,  // request() holds the head; call read_body() to go on (or refuse)
    Complete,    // request() holds the whole request
    Failed,      // error() says what to answer
  };

  explicit RequestParser(const HttpLimits& limits);
  ~RequestParser();
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  // Consumes a prefix of `input` (returns its length; the caller keeps the rest for later). Stops
  // at HeaderDone, Complete or Failed.
  size_t feed(std::string_view input);
  // The peer will send nothing more: a request in progress fails (400).
  void feed_eof();
  // After HeaderDone: parse the body from the next feed() on (Complete at once if there is
  // none; Failed with 413 if its declared size is over the limit).
  void read_body();

  State state() const { return state_; }
  // After read_body(): the declared Content-Length (nullopt when chunked), and the body bytes
  // taken so far (decoded).
  std::optional<uint64_t> content_length() const;
  size_t body_bytes() const;
  bool got_some() const;  // any byte of this request was consumed
  const HttpRequest& request() const { return request_; }
  HttpRequest take_request() { return std::move(request_); }
  const ApiError& error() const { return *error_; }

 private:
  struct Impl;
  void fail(ApiError e);
  void finish_head();
  bool holds_final_chunk_prefix(std::string_view unread) const;
  std::unique_ptr<Impl> impl_;
  HttpLimits limits_;
  State state_ = State::NeedMore;
  bool head_done_ = false;
  size_t head_bytes_ = 0;  // consumed before the head was done
  HttpRequest request_;
  std::unique_ptr<ApiError> error_;
};

}  // namespace peregrine::server
