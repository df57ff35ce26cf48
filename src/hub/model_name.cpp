#include "hub/model_name.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "util/error.h"

namespace peregrine::hub {
namespace {

constexpr size_t kMaxPart = 96;       // the hub's limit on an organization or repository name
constexpr size_t kMaxRevision = 255;  // a git ref name's practical limit
constexpr size_t kMaxSelector = 1024;

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'; }

// An organization or repository name: letters, digits, '-', '_', '.'; not starting with '-' or
// '.'; no "--" (the cache folder's separator) and no "..". nullopt when valid, else why not.
std::optional<std::string> part_problem(std::string_view part, std::string_view what) {
  const std::string w(what);
  if (part.empty()) return w + " is empty";
  if (part.size() > kMaxPart) return w + " is longer than 96 characters";
  if (!std::all_of(part.begin(), part.end(), is_name_char))
    return w + " may hold only letters, digits, '-', '_' and '.'";
  if (part.front() == '-' || part.front() == '.') return w + " may not start with '-' or '.'";
  if (part.find("--") != std::string_view::npos || part.find("..") != std::string_view::npos)
    return w + " may not contain \"--\" or \"..\"";
  return std::nullopt;
}

std::optional<std::string> revision_problem(std::string_view rev) {
  if (rev.empty()) return "the revision after '@' is empty";
  if (rev.size() > kMaxRevision) return "the revision is longer than 255 characters";
  const bool chars_ok = std::all_of(rev.begin(), rev.end(), [](char c) { return is_name_char(c) || c == '/'; });
  if (!chars_ok || !is_safe_relative_path(rev))
    return "the revision '" + std::string(rev) + "' is not a branch, tag or commit name";
  return std::nullopt;
}

std::optional<std::string> selector_problem(std::string_view sel) {
  if (sel.empty()) return "the file or quantization after ':' is empty";
  if (sel.size() > kMaxSelector || !is_safe_relative_path(sel))
    return "'" + std::string(sel) + "' is not a file path inside the repository";
  return std::nullopt;
}

// Parses "ORG/NAME[@REV][:SEL]". Returns the name, or the reason it is not one.
std::variant<HubName, std::string> read_hub_name(std::string_view text) {
  HubName n;
  const size_t colon = text.find(':');
  if (colon != std::string_view::npos) {
    n.selector = std::string(text.substr(colon + 1));
    if (auto p = selector_problem(n.selector)) return *p;
    text = text.substr(0, colon);
  }
  if (const size_t at = text.find('@'); at != std::string_view::npos) {
    n.revision = std::string(text.substr(at + 1));
    n.revision_given = true;
    if (auto p = revision_problem(n.revision)) return *p;
    text = text.substr(0, at);
  }
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos) return "a Hugging Face name is ORG/NAME";
  if (auto p = part_problem(text.substr(0, slash), "the organization")) return *p;
  if (auto p = part_problem(text.substr(slash + 1), "the repository name")) return *p;
  n.repo = std::string(text);
  return n;
}

// What a path to a file looks like: a MODEL like this that does not exist is a missing file, not
// a name to look up.
bool looks_like_file_path(std::string_view arg) {
  if (arg.empty() || arg.front() == '/' || arg.front() == '.' || arg.front() == '~') return true;
  if (arg.find(':') != std::string_view::npos) return false;
  for (std::string_view ext : {".gguf", ".bin", ".safetensors", ".json"})
    if (arg.size() > ext.size() && arg.substr(arg.size() - ext.size()) == ext) return true;
  return false;
}

OllamaName read_ollama_name(std::string_view text) {
  const std::string shown = "ollama:" + std::string(text);
  OllamaName n;
  const size_t last_slash = text.rfind('/');
  const size_t colon = text.find(':', last_slash == std::string_view::npos ? 0 : last_slash);
  if (colon != std::string_view::npos) {
    n.tag = std::string(text.substr(colon + 1));
    text = text.substr(0, colon);
  }
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t end = text.find('/', start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  if (parts.size() > 3) throw UsageError("'" + shown + "': an Ollama name is [[HOST/]NAMESPACE/]MODEL[:TAG]");
  n.model = std::string(parts.back());
  if (parts.size() >= 2) n.ns = std::string(parts[parts.size() - 2]);
  if (parts.size() == 3) n.host = std::string(parts[0]);
  // A host may carry a port ("localhost:11434"), so ':' is allowed there alone.
  const bool host_ok = !n.host.empty() && n.host.size() <= 253 && n.host.front() != '.' &&
                       n.host.find("..") == std::string::npos &&
                       std::all_of(n.host.begin(), n.host.end(), [](char c) { return is_name_char(c) || c == ':'; });
  if (!host_ok) throw UsageError("'" + shown + "': the host '" + n.host + "' is not a host name");
  for (auto [part, what] : {std::pair{&n.ns, "the namespace"}, {&n.model, "the model name"}, {&n.tag, "the tag"}})
    if (auto p = part_problem(*part, what)) throw UsageError("'" + shown + "': " + *p);
  return n;
}

}  // namespace

std::string HubName::text() const {
  return repo + (revision_given ? "@" + revision : "") + (selector.empty() ? "" : ":" + selector);
}

std::string OllamaName::text() const {
  const bool short_form = host == "registry.ollama.ai" && ns == "library";
  return "ollama:" + (short_form ? model : host + "/" + ns + "/" + model) + ":" + tag;
}

bool is_safe_relative_path(std::string_view path) {
  if (path.empty() || path.front() == '/' || path.find('\0') != std::string_view::npos) return false;
  for (size_t start = 0;;) {
    const size_t end = path.find('/', start);
    const std::string_view part =
        path.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (part.empty() || part == "." || part == "..") return false;
    if (end == std::string_view::npos) return true;
    start = end + 1;
  }
}

HubName parse_hub_name(std::string_view arg) {
  std::string_view text = arg;
  if (text.starts_with("hf:")) text.remove_prefix(3);
  auto read = read_hub_name(text);
  if (auto* problem = std::get_if<std::string>(&read))
    throw UsageError("'" + std::string(arg) +
                     "' is not a Hugging Face name (ORG/NAME[@REVISION][:FILE|:QUANT]): " + *problem);
  return std::get<HubName>(std::move(read));
}

std::optional<ModelName> parse_model_name(std::string_view arg) {
  if (arg.starts_with("ollama:")) return read_ollama_name(arg.substr(7));
  if (arg.starts_with("hf:")) return parse_hub_name(arg);
  if (looks_like_file_path(arg)) return std::nullopt;
  auto read = read_hub_name(arg);
  if (auto* name = std::get_if<HubName>(&read)) return std::move(*name);
  return std::nullopt;
}

}  // namespace peregrine::hub
