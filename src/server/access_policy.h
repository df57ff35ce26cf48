#pragma once
// What a browser could be made to send, refused before any route runs. Without an API key (the
// default) the server trusts whoever can reach it, so it must not let a web page on another
// site reach it through the visitor's browser:
// - DNS rebinding: a page of attacker.example re-points its name at 127.0.0.1 and reads our
//   answers as same-origin. Every request's Host (or absolute-form authority) must be a name the
//   server knows it has: localhost and *.localhost, any IP literal (a rebinding needs a name),
//   this machine's host name, the --host name, and the --allowed-hosts list ("*": any).
// - Cross-origin requests: a request with an Origin other than the server's own (scheme + Host)
//   is refused unless --cors-origins lists it ("*": any); a listed origin gets CORS headers and
//   its preflights are answered, as Ollama does.
// - Simple requests: JSON routes require Content-Type application/json, a type no cross-origin
//   page can send without a preflight.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http_message.h"

namespace peregrine::server {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

class AccessPolicy {
 public:
  // `bound_host`: the --host the server bound; `allowed_hosts`, `cors_origins`: the flags' lists.
  AccessPolicy(std::string_view bound_host, const std::vector<std::string>& allowed_hosts,
               std::vector<std::string> cors_origins);

  // Throws ApiError 403 when the request's Host is not one of the server's names.
  void check_host(const HttpRequest& head) const;
  // Throws ApiError 403 for a cross-origin request from an origin not listed.
  void check_origin(const HttpRequest& head) const;
  // The request carries an Origin equal to the server's own (what a browser sends with the
  // page's own POSTs; a cookie alone is not enough for those).
  bool same_origin(const HttpRequest& head) const;
  // CORS headers every answer to this request carries (a listed cross-origin request), if any.
  HeaderList cors_headers(const HttpRequest& head) const;
  // The answer to a CORS preflight (OPTIONS with Origin and Access-Control-Request-Method) for a
  // route allowing `methods`, or nullopt when the request is not a preflight. Throws 403 for an
  // origin not listed.
  std::optional<HttpResponse> preflight(const HttpRequest& head, std::string_view methods) const;

 private:
  bool host_allowed(std::string_view host) const;
  bool origin_listed(std::string_view origin) const;

  std::vector<std::string> host_names_;     // lower-case exact names
  std::vector<std::string> host_suffixes_;  // ".localhost", ".example.com" (from "*.example.com")
  bool any_host_ = false;
  std::vector<std::string> cors_origins_;
  bool any_origin_ = false;
};

// Throws ApiError 415 unless the request's Content-Type is application/json (parameters such as
// charset allowed; application/*+json too).
void require_json_content_type(const HttpRequest& head);

// "a, b ,c" -> {"a", "b", "c"} (empty items dropped).
std::vector<std::string> split_list(std::string_view list);

}  // namespace peregrine::server
