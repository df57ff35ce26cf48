// Reading tool calls out of a model's text (tool_calls.h: parse_tool_output), for a whole answer
// or one that is still being generated.
#include <algorithm>

#include "chat/tool_calls.h"

namespace peregrine {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr size_t kIncomplete = std::string_view::npos;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

std::string_view rstrip(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string_view lstrip(std::string_view s) { return s.substr(std::min(skip_space(s, 0), s.size())); }

// The length of the longest suffix of `s` that is a proper prefix of `tag` (text that may yet
// become the tag).
size_t partial_tag_suffix(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

// Where the JSON value starting at s[i] ends (one past it), or kIncomplete when the text ends
// first. Only the extent is found (strings with escapes, nesting); validity is checked later.
size_t value_end(std::string_view s, size_t i) {
  if (i >= s.size()) return kIncomplete;
  int depth = 0;
  bool in_string = false;
  for (size_t j = i; j < s.size(); ++j) {
    const char c = s[j];
    if (in_string) {
      if (c == '\\') {
        ++j;
      } else if (c == '"') {
        in_string = false;
        if (depth == 0) return j + 1;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth <= 0) return depth < 0 ? j : j + 1;
    } else if (depth == 0 && (c == ',' || is_space(c))) {
      return j;
    }
  }
  return kIncomplete;
}

// One call object {"name": ..., "arguments"|"parameters": ...} read from s[i] on, as far as the
// text goes.
struct CallScan {
  bool malformed = false;  // not the start of a call object
  bool complete = false;   // the closing brace was read
  size_t end = 0;          // one past the closing brace
  std::optional<std::string> name;
  bool has_arguments = false;
  bool arguments_complete = false;
  std::string arguments;  // raw text (a prefix while incomplete)
};

CallScan malformed() {
  CallScan r;
  r.malformed = true;
  return r;
}

CallScan scan_call(std::string_view s, size_t i) {
  CallScan r;
  i = skip_space(s, i);
  if (i >= s.size()) return r;
  if (s[i] != '{') return malformed();
  for (i = skip_space(s, i + 1); i < s.size();) {
    if (s[i] == '}') {
      r.complete = true;
      r.end = i + 1;
      return r;
    }
    if (s[i] == ',') {
      i = skip_space(s, i + 1);
      continue;
    }
    if (s[i] != '"') return malformed();
    const size_t key_end = value_end(s, i);
    if (key_end == kIncomplete) return r;
    auto key = nlohmann::json::parse(s.substr(i, key_end - i), nullptr, false);
    if (!key.is_string()) return malformed();
    i = skip_space(s, key_end);
    if (i >= s.size()) return r;
    if (s[i] != ':') return malformed();
    const size_t v = skip_space(s, i + 1);
    const size_t v_end = value_end(s, v);
    const std::string k = key.get<std::string>();
    if (k == "arguments" || k == "parameters") {
      r.has_arguments = true;
      r.arguments_complete = v_end != kIncomplete;
      r.arguments = std::string(s.substr(v, v_end == kIncomplete ? std::string_view::npos : v_end - v));
    } else if (k == "name" && v_end != kIncomplete) {
      auto name = nlohmann::json::parse(s.substr(v, v_end - v), nullptr, false);
      if (!name.is_string()) return malformed();
      r.name = name.get<std::string>();
    }
    if (v_end == kIncomplete) return r;
    i = skip_space(s, v_end);
  }
  return r;
}

bool known(std::span<const std::string> names, const std::optional<std::string>& name) {
  return name && std::find(names.begin(), names.end(), *name) != names.end();
}

// A finished call: a known name and an object as arguments (a string holding an object, as some
// models write it, is unwrapped).
std::optional<ParsedToolCall> finished_call(const CallScan& scan, std::span<const std::string> names) {
  if (scan.malformed || !scan.complete || !known(names, scan.name)) return std::nullopt;
  std::string arguments = scan.has_arguments ? scan.arguments : "{}";
  auto value = nlohmann::ordered_json::parse(arguments, nullptr, false);
  if (value.is_string()) {
    arguments = value.get<std::string>();
    value = nlohmann::ordered_json::parse(arguments, nullptr, false);
  }
  if (!value.is_object()) return std::nullopt;
  return ParsedToolCall{*scan.name, arguments, true};
}

// Appends a text segment to the content; whitespace next to a call is dropped.
void add_content(ParsedToolOutput& out, std::string_view segment, bool after_call, bool before_call) {
  if (after_call) segment = lstrip(segment);
  if (before_call) segment = rstrip(segment);
  out.content += segment;
}

ParsedToolOutput parse_hermes(std::string_view text, std::span<const std::string> names, bool final) {
  ParsedToolOutput out;
  bool after_call = false;
  for (size_t pos = 0;;) {
    const size_t open = text.find(kOpen, pos);
    if (open == std::string_view::npos) {
      std::string_view rest = text.substr(pos);
      if (!final) rest = rstrip(rest.substr(0, rest.size() - partial_tag_suffix(rest, kOpen)));
      add_content(out, rest, after_call, false);
      return out;
    }
    const size_t body = open + kOpen.size();
    const size_t close = text.find(kClose, body);
    const std::string_view call_text =
        text.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body);
    const CallScan scan = scan_call(call_text, 0);
    const size_t next = close == std::string_view::npos ? text.size() : close + kClose.size();
    if (close == std::string_view::npos) {
      // The call has not ended: a call of a known tool (cut short if the text is final), held
      // back while it may still become one, text otherwise.
      const bool ended_untagged = final && scan.complete && lstrip(call_text.substr(scan.end)).empty();
      const std::optional<ParsedToolCall> done = ended_untagged ? finished_call(scan, names) : std::nullopt;
      if (done || (!scan.malformed && known(names, scan.name)) || (!final && !scan.malformed && !scan.name)) {
        add_content(out, text.substr(pos, open - pos), after_call, true);
        if (done) {
          out.calls.push_back(*done);
        } else if (scan.name) {
          out.calls.push_back({*scan.name, scan.arguments, false});
        }
        return out;
      }
    }
    const bool trailing_ok = scan.complete && lstrip(call_text.substr(scan.end)).empty();
    const std::optional<ParsedToolCall> call = trailing_ok ? finished_call(scan, names) : std::nullopt;
    if (call) {
      add_content(out, text.substr(pos, open - pos), after_call, true);
      out.calls.push_back(*call);
      after_call = true;
    } else {
      add_content(out, text.substr(pos, next - pos), after_call, false);
      after_call = false;
    }
    pos = next;
  }
}

// Llama 3.1/3.2: the whole answer is a call object (or several joined by ';'), after an optional
// <|python_tag|>; anything else is text.
ParsedToolOutput parse_llama3(std::string_view text, std::span<const std::string> names, bool final) {
  ParsedToolOutput out;
  size_t i = skip_space(text, 0);
  const std::string_view head = text.substr(i);
  if (head.starts_with(kPythonTag)) {
    i = skip_space(text, i + kPythonTag.size());
  } else if (!final && kPythonTag.starts_with(head)) {
    return out;  // maybe the tag
  }
  if (i >= text.size() && !final) return out;
  std::vector<ParsedToolCall> calls;
  while (true) {
    const CallScan scan = scan_call(text, i);
    if (scan.malformed) break;
    if (!scan.complete) {
      // A call of a known tool (cut short if the text is final); held back while its name is
      // still to come; text otherwise.
      if (!known(names, scan.name) && (final || scan.name)) break;
      if (scan.name) calls.push_back({*scan.name, scan.arguments, false});
      out.calls = std::move(calls);
      return out;
    }
    const std::optional<ParsedToolCall> call = finished_call(scan, names);
    if (!call) break;
    calls.push_back(*call);
    i = skip_space(text, scan.end);
    if (i < text.size() && text[i] == ';') i = skip_space(text, i + 1);
    if (i >= text.size()) {
      if (!final && !calls.empty()) calls.back().complete = true;
      out.calls = std::move(calls);
      return out;
    }
  }
  if (calls.empty()) {
    out.content = std::string(final ? text : rstrip(text));
    return out;
  }
  // Calls followed by something that is not a call: that is text.
  out.calls = std::move(calls);
  out.content = std::string(final ? text.substr(i) : rstrip(text.substr(i)));
  return out;
}

}  // namespace

ParsedToolOutput parse_tool_output(ToolCallFormat format, std::string_view text, std::span<const std::string> names,
                                   bool final) {
  if (format == ToolCallFormat::Llama3Json) return parse_llama3(text, names, final);
  return parse_hermes(text, names, final);
}

}  // namespace peregrine
