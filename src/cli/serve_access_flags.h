#pragma once
// `serve`'s flags for who may use the server: the API key (on the command line, where every
// local user can read it in the process list; from a file; or from PEREGRINE_API_KEY), the Host
// names it answers to and the browser origins allowed to call it (server/access_policy.h).
#include <optional>
#include <string>

#include "cli/args.h"
#include "server/http_server.h"

namespace peregrine::cli {

struct ServeAccessFlags {
  std::optional<std::string> api_key;
  std::optional<std::string> api_key_file;
  std::optional<std::string> allowed_hosts;
  std::optional<std::string> cors_origins;

  // Registers --api-key, --api-key-file, --allowed-hosts and --cors-origins.
  void add_to(ArgParser& parser);
  // Sets the key (one of --api-key and --api-key-file, else PEREGRINE_API_KEY when set) and the
  // lists in `options`. Throws UsageError for both key flags, an unreadable or empty key file, or
  // an empty key.
  void apply(server::ServerOptions& options) const;
};

}  // namespace peregrine::cli
