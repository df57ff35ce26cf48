#include "format/json_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace peregrine {

namespace {
constexpr int kMaxDepth = 64;  // tokenizer.json needs about 6; deep nesting is only an attack
}

nlohmann::json read_json_file(const std::filesystem::path& path, size_t max_bytes) {
  const std::string name = path.string();
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw FormatError(name + ": cannot read: " + ec.message());
  if (size > max_bytes) {
    throw FormatError(name + ": " + std::to_string(size) + " bytes is over the " + std::to_string(max_bytes) +
                      "-byte limit for this file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(name + ": cannot open: " + std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto guard = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kMaxDepth) throw FormatError(name + ": JSON nests deeper than " + std::to_string(kMaxDepth) + " levels");
    return true;
  };
  try {
    return nlohmann::json::parse(text, guard);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(name + ": not valid JSON: " + e.what());
  }
}

}  // namespace peregrine
