#include "cli/model_loading.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/embedded_model.h"
#include "format/convert.h"
#include "format/gguf.h"
#include "hub/resolve.h"
#include "util/error.h"

namespace peregrine::cli {
namespace {

ModelFile open_model_path(const std::optional<std::string>& path, const std::optional<std::string>& tokenizer) {
  if (!path) {
    if (auto bytes = embedded_demo_model()) return read_gguf_bytes(*bytes, "<embedded demo model>");
    throw UsageError("no MODEL given (and this build has no embedded demo model): pass a .gguf "
                     "file, a Hugging Face checkpoint folder, or a llama2.c .bin with --tokenizer");
  }
  const std::string resolved = resolve_model_path(*path);
  if (tokenizer && !std::filesystem::exists(*tokenizer))
    throw UsageError("tokenizer file not found: " + *tokenizer);
  std::optional<std::filesystem::path> tok;
  if (tokenizer) tok = *tokenizer;
  return open_model_file(resolved, tok);
}

}  // namespace

std::optional<QuantScheme> parse_weight_type(const std::optional<std::string>& name) {
  if (!name) return std::nullopt;
  std::optional<QuantScheme> s = parse_quant_scheme(*name);
  if (!s) throw UsageError("unknown --type '" + *name + "' (choose " + quant_scheme_names() + ")");
  return s;
}

std::string resolve_model_path(const std::string& arg) {
  if (std::filesystem::exists(arg)) return arg;
  if (auto named = hub::resolve_model_name(arg)) return named->path.string();
  throw UsageError("model file not found: " + arg);
}

std::string model_display_name(const std::optional<std::string>& path) {
  if (!path) return "demo-target";  // the embedded models/demo-target.gguf
  if (!std::filesystem::exists(*path))
    if (auto named = hub::resolve_model_name(*path)) return named->display_name;
  const std::filesystem::path p(*path);
  if (std::filesystem::is_directory(p)) return std::filesystem::weakly_canonical(p).filename().string();
  return p.stem().string();
}

ModelFile open_model_arg(const std::optional<std::string>& path, const std::optional<std::string>& tokenizer,
                         std::optional<QuantScheme> scheme) {
  ModelFile mf = open_model_path(path, tokenizer);
  if (scheme) mf = retype_model(std::move(mf), *scheme);
  return mf;
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read file: " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace peregrine::cli
