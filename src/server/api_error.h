#pragma once
// An HTTP error in OpenAI's shape: status code plus {"error": {"message", "type", "param",
// "code"}}. Request parsing throws ApiError; the HTTP layer turns it into the response.
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace peregrine::server {

// A client's bytes echoed in a message or a log line keep at most this many bytes (the rest is
// replaced by a marker saying how much was cut), so a request cannot make the server write
// megabytes per request; a whole error message keeps at most kMaxErrorMessageBytes.
inline constexpr size_t kMaxEchoedBytes = 256;
inline constexpr size_t kMaxErrorMessageBytes = 1024;

// `s` cut to at most `max_bytes` (on a UTF-8 character boundary) plus "...[N more bytes]".
std::string clip_client_text(std::string_view s, size_t max_bytes = kMaxEchoedBytes);

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string type, std::optional<std::string> param = std::nullopt,
           std::optional<std::string> code = std::nullopt);

  int status() const { return status_; }
  // The whole message (what() would stop at a NUL the client put in it), clipped to
  // kMaxErrorMessageBytes.
  const std::string& message() const { return message_; }
  // {"error": {"message": ..., "type": ..., "param": ... | null, "code": ... | null}}
  nlohmann::json body() const;

 private:
  int status_;
  std::string message_;
  std::string type_;
  std::optional<std::string> param_;
  std::optional<std::string> code_;
};

// The usual ones. `param` names the offending request field.
ApiError invalid_request(std::string message, std::optional<std::string> param = std::nullopt,
                         std::optional<std::string> code = std::nullopt);   // 400 invalid_request_error
ApiError model_not_found(const std::string& model);                        // 404 model_not_found
ApiError not_found(const std::string& path);                               // 404 unknown route
ApiError method_not_allowed(const std::string& method, const std::string& path);  // 405
ApiError unauthorized();                                                   // 401 invalid_api_key
ApiError payload_too_large(size_t limit);                                  // 413
ApiError queue_full();                                                     // 429
ApiError server_error(std::string message);                                // 500 server_error
ApiError not_ready();                                                      // 503 while loading / stopping

}  // namespace peregrine::server
