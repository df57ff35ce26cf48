#include "cli/model_loading.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/embedded_model.h"
#include "format/gguf.h"
#include "util/error.h"

namespace peregrine::cli {

ModelFile open_model_arg(const std::optional<std::string>& path,
                         const std::optional<std::string>& tokenizer) {
  if (!path) {
    if (auto bytes = embedded_demo_model()) return read_gguf_bytes(*bytes, "<embedded demo model>");
    throw UsageError("no MODEL given (and this build has no embedded demo model): pass a .gguf "
                     "file or a llama2.c .bin with --tokenizer");
  }
  if (!std::filesystem::exists(*path)) throw UsageError("model file not found: " + *path);
  if (tokenizer && !std::filesystem::exists(*tokenizer))
    throw UsageError("tokenizer file not found: " + *tokenizer);
  std::optional<std::filesystem::path> tok;
  if (tokenizer) tok = *tokenizer;
  return open_model_file(*path, tok);
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read file: " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace peregrine::cli
