#include "server/access_policy.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>

namespace peregrine::server {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// "Name:8080" -> "name", "[::1]:80" -> "[::1]", "name." -> "name".
std::string host_name(std::string_view host) {
  if (!host.starts_with('[')) {
    const size_t colon = host.rfind(':');
    if (colon != std::string_view::npos && host.find(':') == colon &&
        std::all_of(host.begin() + static_cast<std::ptrdiff_t>(colon) + 1, host.end(),
                    [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; })) {
      host = host.substr(0, colon);
    }
  } else if (const size_t close = host.find(']'); close != std::string_view::npos) {
    host = host.substr(0, close + 1);
  }
  if (host.ends_with('.')) host.remove_suffix(1);
  return lower(host);
}

bool ip_literal(const std::string& name) {
  std::array<unsigned char, 16> address{};
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') {
    return inet_pton(AF_INET6, name.substr(1, name.size() - 2).c_str(), address.data()) == 1;
  }
  return inet_pton(AF_INET, name.c_str(), address.data()) == 1;
}

// The Host a request names: the absolute-form target's authority stands for Host.
std::optional<std::string_view> request_host(const HttpRequest& head) {
  if (!head.authority.empty()) return std::string_view(head.authority);
  return head.field("Host");
}

// "http://Host:80" -> "http://host": origins compare case-insensitively, the default port elided.
std::string normal_origin(std::string_view origin) {
  std::string o = lower(trim(origin));
  if (o.starts_with("http://") && o.ends_with(":80")) o.resize(o.size() - 3);
  return o;
}

ApiError forbidden(std::string message, std::string code) {
  return ApiError(403, std::move(message), "invalid_request_error", std::nullopt, std::move(code));
}

}  // namespace

std::vector<std::string> split_list(std::string_view list) {
  std::vector<std::string> out;
  while (!list.empty()) {
    const size_t comma = std::min(list.find(','), list.size());
    const std::string_view item = trim(list.substr(0, comma));
    if (!item.empty()) out.emplace_back(item);
    list.remove_prefix(std::min(comma + 1, list.size()));
  }
  return out;
}

AccessPolicy::AccessPolicy(std::string_view bound_host, const std::vector<std::string>& allowed_hosts,
                           std::vector<std::string> cors_origins)
    : host_names_{"localhost"}, host_suffixes_{".localhost"} {
  std::array<char, 256> machine{};
  if (gethostname(machine.data(), machine.size() - 1) == 0 && machine[0] != '\0') {
    host_names_.push_back(host_name(machine.data()));
  }
  host_names_.push_back(host_name(bound_host));
  for (const std::string& h : allowed_hosts) {
    if (h == "*") {
      any_host_ = true;
    } else if (h.starts_with("*.")) {
      host_suffixes_.push_back(lower(std::string_view(h).substr(1)));
    } else {
      host_names_.push_back(host_name(h));
    }
  }
  for (std::string& o : cors_origins) {
    if (o == "*") any_origin_ = true;
    cors_origins_.push_back(normal_origin(o));
  }
}

bool AccessPolicy::host_allowed(std::string_view host) const {
  const std::string name = host_name(host);
  if (any_host_ || ip_literal(name)) return true;
  if (std::find(host_names_.begin(), host_names_.end(), name) != host_names_.end()) return true;
  return std::any_of(host_suffixes_.begin(), host_suffixes_.end(),
                     [&](const std::string& suffix) { return name.ends_with(suffix); });
}

void AccessPolicy::check_host(const HttpRequest& head) const {
  const std::optional<std::string_view> host = request_host(head);
  if (!host || host_allowed(*host)) return;  // no Host: HTTP/1.0, never a browser
  throw forbidden("Host '" + clip_client_text(*host) +
                      "' is not a name of this server (localhost, an IP address, this machine's name, --host, or "
                      "--allowed-hosts)",
                  "host_not_allowed");
}

bool AccessPolicy::same_origin(const HttpRequest& head) const {
  const std::optional<std::string_view> origin = head.field("Origin");
  const std::optional<std::string_view> host = request_host(head);
  if (!origin || !host || head.field_count("Origin") != 1) return false;
  return normal_origin(*origin) == normal_origin("http://" + std::string(*host));
}

bool AccessPolicy::origin_listed(std::string_view origin) const {
  return any_origin_ ||
         std::find(cors_origins_.begin(), cors_origins_.end(), normal_origin(origin)) != cors_origins_.end();
}

void AccessPolicy::check_origin(const HttpRequest& head) const {
  const std::optional<std::string_view> origin = head.field("Origin");
  if (!origin || same_origin(head)) return;
  if (head.field_count("Origin") == 1 && origin_listed(*origin)) return;
  throw forbidden("Cross-origin request from '" + clip_client_text(*origin) +
                      "' refused: list the origin in --cors-origins to allow it",
                  "origin_not_allowed");
}

HeaderList AccessPolicy::cors_headers(const HttpRequest& head) const {
  const std::optional<std::string_view> origin = head.field("Origin");
  if (!origin || head.field_count("Origin") != 1 || same_origin(head) || !origin_listed(*origin)) return {};
  return {{"Access-Control-Allow-Origin", std::string(*origin)}, {"Vary", "Origin"}};
}

std::optional<HttpResponse> AccessPolicy::preflight(const HttpRequest& head, std::string_view methods) const {
  if (head.method != "OPTIONS" || !head.field("Origin") || !head.field("Access-Control-Request-Method")) {
    return std::nullopt;
  }
  check_origin(head);
  HttpResponse r;
  r.content_type = "text/plain; charset=utf-8";
  r.headers = cors_headers(head);
  r.headers.emplace_back("Access-Control-Allow-Methods", std::string(methods));
  r.headers.emplace_back("Access-Control-Allow-Headers", "Authorization, Content-Type");
  r.headers.emplace_back("Access-Control-Max-Age", "600");
  return r;
}

void require_json_content_type(const HttpRequest& head) {
  const std::string_view value = head.field("Content-Type").value_or("");
  const std::string type = lower(trim(value.substr(0, value.find(';'))));
  if (type == "application/json" || (type.starts_with("application/") && type.ends_with("+json"))) return;
  throw ApiError(415,
                 "This route takes a JSON body: send 'Content-Type: application/json'" +
                     (type.empty() ? std::string(" (none was sent)") : " (not '" + clip_client_text(type) + "')"),
                 "invalid_request_error", std::nullopt, "unsupported_media_type");
}

}  // namespace peregrine::server
