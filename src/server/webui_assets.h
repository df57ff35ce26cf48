#pragma once
// The web page's files (src/server/webui/), linked into the binary at build time.
#include <string_view>

namespace peregrine::server {

struct WebAsset {
  std::string_view name;          // "index.html"
  std::string_view content_type;  // from the extension
  std::string_view bytes;
};

// The file called `name` (no folders), or null.
const WebAsset* find_web_asset(std::string_view name);

}  // namespace peregrine::server
