#include "chat/chat_prompt.h"

#include <algorithm>
#include <set>

#include "tokenizer/utf8.h"

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

std::string render(const ChatTemplate& t, const Tokenizer& tok, std::span<const ChatMessage> messages, bool gen) {
  return t.render(messages, gen, special_text(tok, tok.bos()), special_text(tok, tok.eos()));
}

// Content with its special-token strings swapped for placeholders; `originals[cp - first]` keeps
// each string.
struct Substitution {
  std::vector<ChatMessage> messages;
  std::vector<uint32_t> code_points;   // in allocation order
  std::vector<std::string> originals;  // same order
};

Substitution substitute(const ChatTemplate& t, const Tokenizer& tok, std::span<const ChatMessage> messages) {
  std::set<uint32_t> used;
  collect_private(t.source(), used);
  for (const ChatMessage& m : messages) collect_private(m.content, used);
  Substitution sub;
  uint32_t next = kFirstPrivate;
  for (const ChatMessage& m : messages) {
    ChatMessage out{m.role, {}};
    size_t at = 0;
    for (const TextSpan& span : tok.find_special_text(m.content)) {
      while (used.contains(next)) ++next;
      if (next > kLastPrivate) throw ChatTemplateError("too many special-token strings in the messages");
      out.content.append(m.content, at, span.offset - at);
      utf8::append_code_point(out.content, next);
      sub.code_points.push_back(next);
      sub.originals.emplace_back(m.content.substr(span.offset, span.length));
      at = span.offset + span.length;
      ++next;
    }
    out.content.append(m.content, at);
    sub.messages.push_back(std::move(out));
  }
  return sub;
}

}  // namespace

ChatPrompt render_chat_prompt(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                              std::span<const ChatMessage> messages, bool add_generation_prompt,
                              ContentSpecialTokens content_special_tokens) {
  ChatPrompt p;
  const Substitution sub = content_special_tokens == ContentSpecialTokens::Parse
                               ? Substitution{}
                               : substitute(chat_template, tokenizer, messages);
  if (sub.code_points.empty()) {
    p.text = render(chat_template, tokenizer, messages, add_generation_prompt);
    p.tokens = tokenizer.encode(p.text, false, true);
    return p;
  }
  const std::string rendered = render(chat_template, tokenizer, sub.messages, add_generation_prompt);
  // Placeholders were allocated in increasing order, so a code point's index is found by search.
  std::vector<TextSpan> literal;
  p.text.reserve(rendered.size());
  for (size_t i = 0; i < rendered.size();) {
    const uint32_t cp = four_byte_code_point(rendered, i);
    const auto it = std::lower_bound(sub.code_points.begin(), sub.code_points.end(), cp);
    if (cp == 0 || it == sub.code_points.end() || *it != cp) {
      p.text.push_back(rendered[i++]);
      continue;
    }
    const std::string& original = sub.originals[static_cast<size_t>(it - sub.code_points.begin())];
    literal.push_back({p.text.size(), original.size()});
    p.text += original;
    i += 4;
  }
  p.tokens = tokenizer.encode_with_literals(p.text, false, literal);
  return p;
}

}  // namespace peregrine
