#include "chat/chat_prompt.h"

#include <algorithm>
#include <set>

#include "util/utf8_encode.h"

namespace peregrine {
namespace {

// Placeholders are 4-byte UTF-8 sequences of the supplementary private-use planes.
constexpr uint32_t kFirstPrivate = 0xF0000;
constexpr uint32_t kLastPrivate = 0x10FFFD;

// The code point of the 4-byte sequence at s[i], or 0 if there is none there.
uint32_t four_byte_code_point(std::string_view s, size_t i) {
  if (i + 4 > s.size()) return 0;
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k])); };
  if ((b(0) & 0xF8) != 0xF0 || (b(1) & 0xC0) != 0x80 || (b(2) & 0xC0) != 0x80 || (b(3) & 0xC0) != 0x80) return 0;
  return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
}

void collect_private(std::string_view s, std::set<uint32_t>& used) {
  for (size_t i = 0; i < s.size(); ++i) {
    const uint32_t cp = four_byte_code_point(s, i);
    if (cp >= kFirstPrivate && cp <= kLastPrivate) used.insert(cp);
  }
}

std::string special_text(const Tokenizer& tok, TokenId id) { return id >= 0 ? tok.piece(id) : std::string(); }

std::string render(const ChatTemplate& t, const Tokenizer& tok, std::span<const ChatMessage> messages, bool gen,
                   const nlohmann::ordered_json& tools) {
  return t.render(messages, gen, special_text(tok, tok.bos()), special_text(tok, tok.eos()), tools);
}

// Every string a client wrote that the template may print: content, the calls' ids, names and
// arguments, the tool result's call id, and the strings (keys included) of the tool definitions.
template <typename F>
void for_each_client_string(std::span<const ChatMessage> messages, F&& f) {
  for (const ChatMessage& m : messages) {
    f(m.content);
    f(m.tool_call_id);
    for (const ChatToolCall& c : m.tool_calls) {
      f(c.id);
      f(c.name);
      f(c.arguments);
    }
  }
}

// Content with its special-token strings swapped for placeholders; `originals[cp - first]` keeps
// each string.
class Substitution {
 public:
  Substitution() = default;
  Substitution(const ChatTemplate& t, const Tokenizer& tok, std::span<const ChatMessage> messages,
               const nlohmann::ordered_json& tools)
      : tok_(&tok) {
    collect_private(t.source(), used_);
    for_each_client_string(messages, [&](const std::string& s) { collect_private(s, used_); });
    if (!tools.is_null()) collect_private(tools.dump(), used_);
    for (const ChatMessage& m : messages) {
      ChatMessage out{m.role, swap(m.content), {}, swap(m.tool_call_id)};
      for (const ChatToolCall& c : m.tool_calls)
        out.tool_calls.push_back({swap(c.id), swap(c.name), swap(c.arguments)});
      messages_.push_back(std::move(out));
    }
    tools_ = swap_json(tools);
  }

  const std::vector<ChatMessage>& messages() const { return messages_; }
  const nlohmann::ordered_json& tools() const { return tools_; }
  const std::vector<uint32_t>& code_points() const { return code_points_; }  // in allocation order
  const std::vector<std::string>& originals() const { return originals_; }   // same order

 private:
  std::string swap(const std::string& s) {
    std::string out;
    size_t at = 0;
    for (const TextSpan& span : tok_->find_special_text(s)) {
      while (used_.contains(next_)) ++next_;
      if (next_ > kLastPrivate) throw ChatTemplateError("too many special-token strings in the messages");
      out.append(s, at, span.offset - at);
      append_utf8(out, next_);
      code_points_.push_back(next_);
      originals_.emplace_back(s.substr(span.offset, span.length));
      at = span.offset + span.length;
      ++next_;
    }
    out.append(s, at);
    return out;
  }

  nlohmann::ordered_json swap_json(const nlohmann::ordered_json& j) {
    if (j.is_string()) return swap(j.get<std::string>());
    if (j.is_array()) {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const auto& item : j) out.push_back(swap_json(item));
      return out;
    }
    if (j.is_object()) {
      nlohmann::ordered_json out = nlohmann::ordered_json::object();
      for (auto it = j.begin(); it != j.end(); ++it) out[swap(it.key())] = swap_json(it.value());
      return out;
    }
    return j;
  }

  const Tokenizer* tok_ = nullptr;
  std::set<uint32_t> used_;
  uint32_t next_ = kFirstPrivate;
  std::vector<ChatMessage> messages_;
  nlohmann::ordered_json tools_;
  std::vector<uint32_t> code_points_;
  std::vector<std::string> originals_;
};

}  // namespace

ChatPrompt render_chat_prompt(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                              std::span<const ChatMessage> messages, bool add_generation_prompt,
                              ContentSpecialTokens content_special_tokens, const nlohmann::ordered_json& tools) {
  ChatPrompt p;
  const Substitution sub = content_special_tokens == ContentSpecialTokens::Parse
                               ? Substitution{}
                               : Substitution(chat_template, tokenizer, messages, tools);
  if (sub.code_points().empty()) {
    p.text = render(chat_template, tokenizer, messages, add_generation_prompt, tools);
    p.tokens = tokenizer.encode(p.text, false, true);
    return p;
  }
  const std::string rendered = render(chat_template, tokenizer, sub.messages(), add_generation_prompt, sub.tools());
  // Placeholders were allocated in increasing order, so a code point's index is found by search.
  std::vector<TextSpan> literal;
  p.text.reserve(rendered.size());
  for (size_t i = 0; i < rendered.size();) {
    const uint32_t cp = four_byte_code_point(rendered, i);
    const auto it = std::lower_bound(sub.code_points().begin(), sub.code_points().end(), cp);
    if (cp == 0 || it == sub.code_points().end() || *it != cp) {
      p.text.push_back(rendered[i++]);
      continue;
    }
    const std::string& original = sub.originals()[static_cast<size_t>(it - sub.code_points().begin())];
    literal.push_back({p.text.size(), original.size()});
    p.text += original;
    i += 4;
  }
  p.tokens = tokenizer.encode_with_literals(p.text, false, literal);
  return p;
}

}  // namespace peregrine
