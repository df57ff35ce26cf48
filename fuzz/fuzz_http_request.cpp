// libFuzzer target for the server's request parsing: the bytes after the first go through
// RequestParser the way a connection feeds it (pieces of a size the first byte picks, the head
// checked before the body, pipelined requests one after another, EOF at the end), and every
// complete request's body through the OpenAI request parsers. Each step must either accept or
// refuse with an ApiError carrying a 4xx/5xx status, and the same requests must be accepted
// whether the bytes arrive whole or in pieces, ending the same way (the input used up at a
// request boundary, or refused; a refusal may come only at EOF when the bytes trickle in,
// since Beast looks for the end of the head before it judges the whole of it). Anything else
// (another exception, a mismatch, a sanitizer report, a crash, a hang) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/http_request_parser.h"
#include "server/openai_request.h"

namespace {

using peregrine::server::ApiError;
using peregrine::server::HttpLimits;
using peregrine::server::RequestParser;

// Small limits, so the fuzzer reaches them.
constexpr HttpLimits kLimits{512, 12, 2048};

void check_status(const ApiError& e) {
  if (e.status() < 400 || e.status() > 599) std::abort();
}

void parse_openai(const std::string& body) {
  try {
    const nlohmann::json j = peregrine::server::parse_body(body);
    try {
      (void)peregrine::server::parse_completion_request(j);
    } catch (const ApiError& e) {
      check_status(e);
    }
    (void)peregrine::server::parse_chat_request(j);
  } catch (const ApiError& e) {
    check_status(e);
  }
}

// What a connection would see: each request (method, target, body), then "end" (the input
// ended between requests) or "refused".
std::string run(std::string_view input, size_t piece, bool openai) {
  std::string outcome;
  std::string buffer;
  auto parser = std::make_unique<RequestParser>(kLimits);
  size_t at = 0;
  while (true) {
    buffer.erase(0, parser->feed(buffer));
    switch (parser->state()) {
      case RequestParser::State::HeaderDone:
        parser->read_body();
        continue;
      case RequestParser::State::Complete: {
        const auto& r = parser->request();
        outcome += r.method + " " + r.target + " " + std::to_string(r.body.size()) + "|";
        if (openai) parse_openai(r.body);
        parser = std::make_unique<RequestParser>(kLimits);
        continue;
      }
      case RequestParser::State::Failed:
        check_status(parser->error());
        return outcome + "refused";
      case RequestParser::State::NeedMore:
        break;
    }
    if (at >= input.size()) {
      if (!parser->got_some()) return outcome + "end";
      parser->feed_eof();
      if (parser->state() != RequestParser::State::Failed) std::abort();
      return outcome + "refused";
    }
    buffer.append(input.substr(at, piece));
    at += piece;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 64;
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string whole = run(input, input.size() + 1, true);
  if (run(input, piece, false) != whole) std::abort();
  return 0;
}
