#pragma once
// Helpers the server tests share: SSE framing checks and Prometheus samples.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace peregrine::test {

using nlohmann::json;

// Splits an SSE body that must be exactly a sequence of "data: <payload>\n\n", ending with
// "data: [DONE]\n\n"; returns the JSON payloads before [DONE].
inline std::vector<json> sse_payloads(const std::string& body) {
  std::vector<json> out;
  size_t at = 0;
  bool done = false;
  while (at < body.size()) {
    EXPECT_FALSE(done) << "bytes after [DONE]";
    EXPECT_EQ(body.compare(at, 6, "data: "), 0) << "event does not start with 'data: ' at byte " << at;
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) {
      ADD_FAILURE() << "unterminated event at byte " << at;
      break;
    }
    const std::string payload = body.substr(at + 6, end - at - 6);
    EXPECT_EQ(payload.find('\n'), std::string::npos) << "newline inside an event";
    if (payload == "[DONE]")
      done = true;
    else
      out.push_back(json::parse(payload));
    at = end + 2;
  }
  EXPECT_TRUE(done) << "no data: [DONE]";
  EXPECT_TRUE(body.size() >= 14 && body.compare(body.size() - 14, 14, "data: [DONE]\n\n") == 0);
  return out;
}

inline double metric(const std::string& text, const std::string& sample) {
  const size_t at = text.find("\n" + sample + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + sample.size() + 2));
}

}  // namespace peregrine::test
