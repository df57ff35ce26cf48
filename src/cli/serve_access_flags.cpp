#include "cli/serve_access_flags.h"

#include <cstdlib>

#include "cli/model_loading.h"
#include "server/access_policy.h"
#include "util/error.h"

namespace peregrine::cli {
namespace {

// A key file's text without the line ending editors and `echo` add.
std::string key_from_file(const std::string& path) {
  std::string key = read_file_bytes(path);
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r')) key.pop_back();
  if (key.empty()) throw UsageError("--api-key-file " + path + " is empty");
  return key;
}

}  // namespace

void ServeAccessFlags::add_to(ArgParser& p) {
  p.option("--api-key", &api_key, "KEY",
           "require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize and the web page. Other local "
           "users can read a command line (ps, /proc): prefer --api-key-file or PEREGRINE_API_KEY");
  p.option("--api-key-file", &api_key_file, "FILE",
           "the API key from FILE (its first line ending dropped); the environment's PEREGRINE_API_KEY is used when "
           "neither flag is given");
  p.option("--allowed-hosts", &allowed_hosts, "LIST",
           "Host names to answer besides localhost, IP addresses, this machine's name and --host: comma-separated, "
           "'*.example.com' for a domain, '*' for any (the check stops DNS rebinding)");
  p.option("--cors-origins", &cors_origins, "LIST",
           "browser origins allowed to call the API from other sites, comma-separated ('http://app.example:3000'), "
           "'*' for any; others are refused (403)");
}

void ServeAccessFlags::apply(server::ServerOptions& options) const {
  if (api_key && api_key_file) throw UsageError("--api-key and --api-key-file: give one");
  if (api_key) {
    options.api_key = *api_key;
  } else if (api_key_file) {
    options.api_key = key_from_file(*api_key_file);
  } else if (const char* env = std::getenv("PEREGRINE_API_KEY"); env != nullptr && *env != '\0') {
    options.api_key = std::string(env);
  }
  if (options.api_key && options.api_key->empty()) throw UsageError("--api-key is empty");
  if (allowed_hosts) options.allowed_hosts = server::split_list(*allowed_hosts);
  if (cors_origins) options.cors_origins = server::split_list(*cors_origins);
}

}  // namespace peregrine::cli
