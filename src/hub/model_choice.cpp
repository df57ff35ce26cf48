#include "hub/model_choice.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "util/error.h"

namespace peregrine::hub {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view base_name(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool ends_with_gguf(std::string_view path) { return lower(path).ends_with(".gguf"); }

// The parts of a GGUF file name between '-' and '.': "llama-3.2-1b-q4_k_m.gguf" -> llama, 3, 2,
// 1b, q4_k_m (lowercase, without the extension).
std::vector<std::string> name_tokens(std::string_view path) {
  std::string name = lower(base_name(path));
  name.resize(name.size() - 5);  // ".gguf"
  std::vector<std::string> out;
  std::string cur;
  for (char c : name) {
    if (c == '-' || c == '.') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// The GGUF files whose name holds `quant` as a whole part, else as any substring.
std::vector<RepoEntry> match_quant(const std::vector<RepoEntry>& ggufs, std::string_view quant) {
  const std::string q = lower(quant);
  std::vector<RepoEntry> exact, partial;
  for (const auto& f : ggufs) {
    const auto tokens = name_tokens(f.path);
    if (std::find(tokens.begin(), tokens.end(), q) != tokens.end())
      exact.push_back(f);
    else if (lower(base_name(f.path)).find(q) != std::string::npos)
      partial.push_back(f);
  }
  return exact.empty() ? partial : exact;
}

std::string listing(const std::vector<RepoEntry>& files) {
  std::string out;
  for (const auto& f : files) out += "\n  " + f.path + "  (" + human_bytes(f.size) + ")";
  return out;
}

bool has_file(const std::vector<RepoEntry>& files, std::string_view path) {
  return std::any_of(files.begin(), files.end(), [&](const RepoEntry& f) { return f.path == path; });
}

}  // namespace

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::vector<RepoEntry> model_gguf_files(const std::vector<RepoEntry>& files) {
  std::vector<RepoEntry> out;
  for (const auto& f : files)
    if (ends_with_gguf(f.path) && !lower(base_name(f.path)).starts_with("mmproj")) out.push_back(f);
  return out;
}

ModelChoice choose_model(const std::vector<RepoEntry>& files, std::string_view selector, std::string_view name) {
  const std::string n(name);
  const std::vector<RepoEntry> ggufs = model_gguf_files(files);
  if (!selector.empty()) {
    if (has_file(files, selector)) return {false, std::string(selector)};
    const auto matches = match_quant(ggufs, selector);
    if (matches.size() == 1) return {false, matches.front().path};
    if (matches.empty())
      throw UsageError(n + " has no file or GGUF quantization '" + std::string(selector) +
                       "'; its GGUF files:" + (ggufs.empty() ? std::string(" none") : listing(ggufs)));
    throw UsageError(n + ": '" + std::string(selector) + "' matches " + std::to_string(matches.size()) +
                     " files; name one as " + n + ":FILE:" + listing(matches));
  }
  // A checkpoint folder: config.json with safetensors weights (or with no GGUF beside it, so the
  // folder loader says what is missing).
  const bool safetensors = std::any_of(files.begin(), files.end(),
                                       [](const RepoEntry& f) { return lower(f.path).ends_with(".safetensors"); });
  if (has_file(files, "config.json") && (safetensors || ggufs.empty())) return {true, ""};
  if (ggufs.size() == 1) return {false, ggufs.front().path};
  if (ggufs.empty())
    throw UsageError(n + " holds neither a checkpoint (config.json) nor a GGUF file" +
                     (files.empty() ? std::string(" (no files at all)") : ""));
  throw UsageError(n + " holds " + std::to_string(ggufs.size()) + " GGUF files: pick one as " + n +
                   ":QUANT (e.g. :Q4_K_M) or " + n + ":FILE:" + listing(ggufs));
}

}  // namespace peregrine::hub
