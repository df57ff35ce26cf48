#include "server/api_error.h"

namespace peregrine::server {

std::string clip_client_text(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return std::string(s.substr(0, cut)) + "...[" + std::to_string(s.size() - cut) + " more bytes]";
}

ApiError::ApiError(int status, std::string message, std::string type, std::optional<std::string> param,
                   std::optional<std::string> code)
    : std::runtime_error(clip_client_text(message, kMaxErrorMessageBytes)),
      status_(status),
      message_(clip_client_text(message, kMaxErrorMessageBytes)),
      type_(std::move(type)),
      param_(std::move(param)),
      code_(std::move(code)) {}

nlohmann::json ApiError::body() const {
  nlohmann::json e;
  e["message"] = message_;
  e["type"] = type_;
  e["param"] = param_ ? nlohmann::json(*param_) : nlohmann::json(nullptr);
  e["code"] = code_ ? nlohmann::json(*code_) : nlohmann::json(nullptr);
  return {{"error", e}};
}

ApiError invalid_request(std::string message, std::optional<std::string> param, std::optional<std::string> code) {
  return ApiError(400, std::move(message), "invalid_request_error", std::move(param), std::move(code));
}

ApiError model_not_found(const std::string& model) {
  return ApiError(404, "The model '" + clip_client_text(model) + "' does not exist", "invalid_request_error", "model",
                  "model_not_found");
}

ApiError not_found(const std::string& path) {
  return ApiError(404, "Unknown route: " + clip_client_text(path), "invalid_request_error", std::nullopt, "not_found");
}

ApiError method_not_allowed(const std::string& method, const std::string& path) {
  return ApiError(405, "Method " + clip_client_text(method) + " is not allowed on " + clip_client_text(path),
                  "invalid_request_error", std::nullopt, "method_not_allowed");
}

ApiError unauthorized() {
  return ApiError(401, "Incorrect or missing API key: send 'Authorization: Bearer KEY'", "invalid_request_error",
                  std::nullopt, "invalid_api_key");
}

ApiError payload_too_large(size_t limit) {
  return ApiError(413, "Request body is larger than the limit of " + std::to_string(limit) + " bytes",
                  "invalid_request_error", std::nullopt, "payload_too_large");
}

ApiError queue_full() {
  return ApiError(429, "The server's request queue is full; retry later", "rate_limit_error", std::nullopt,
                  "queue_full");
}

ApiError server_error(std::string message) {
  return ApiError(500, std::move(message), "server_error", std::nullopt, "internal_error");
}

ApiError not_ready() {
  return ApiError(503, "The server is not ready (model loading or shutting down)", "server_error", std::nullopt,
                  "not_ready");
}

}  // namespace peregrine::server
