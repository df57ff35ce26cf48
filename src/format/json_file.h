#pragma once
// Reads the JSON files of a Hugging Face checkpoint (config.json, tokenizer.json, ...) with
// bounded size and nesting, reporting any problem as FormatError "PATH: <problem>".
#include <cstddef>
#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace peregrine {

// Parses the whole file. Throws FormatError naming the file when it cannot be read, is larger
// than `max_bytes`, nests deeper than 64 levels or is not valid JSON.
nlohmann::json read_json_file(const std::filesystem::path& path, size_t max_bytes);

}  // namespace peregrine
