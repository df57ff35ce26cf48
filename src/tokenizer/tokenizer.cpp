#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <stdexcept>

#include "tokenizer/bpe.h"
#include "tokenizer/normalize.h"
#include "tokenizer/spm.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

namespace peregrine {
namespace tokenizer {

struct TokenizerImpl {
  Vocab vocab;
  std::optional<BpeModel> bpe;              // set for "gpt2"
  std::vector<std::string> rendered;        // [n_vocab] token bytes with specials rendered
};

namespace {

constexpr std::string_view kEscapedSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// What a token renders as when special tokens are shown (llama.cpp's token_to_piece cache).
std::string render_token(const Vocab& v, Id id) {
  const std::string& piece = v.pieces[static_cast<size_t>(id)];
  if (v.has_attr(id, kAttrUnknown | kAttrControl | kAttrUserDefined)) return piece;
  if (v.has_attr(id, kAttrNormal)) {
    return v.kind == VocabKind::Spm ? replace_all(piece, kEscapedSpace, " ") : byte_level_decode(piece);
  }
  if (v.has_attr(id, kAttrByte)) {
    if (piece.size() == 6 && piece.starts_with("<0x") && piece[5] == '>') {
      const int hi = hex_value(piece[3]), lo = hex_value(piece[4]);
      if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
    }
    return piece;  // a byte token not spelled <0xNN>: show it as it is
  }
  return {};  // unused / undefined tokens render as nothing
}

// A stretch of the input: plain text still to tokenize, or a special token already matched
// (then offset/length are the bytes of its text, without any whitespace it swallowed).
struct Fragment {
  Id token;  // -1 for text
  size_t offset;
  size_t length;
};

// `spans` sorted by offset and not overlapping each other.
bool overlaps(std::span<const TextSpan> spans, size_t offset, size_t length) {
  const auto first_ending_after = std::partition_point(
      spans.begin(), spans.end(), [&](const TextSpan& s) { return s.offset + s.length <= offset; });
  return first_ending_after != spans.end() && first_ending_after->offset < offset + length;
}

// Whether an SPM text fragment gets the "▁" prefix (Vocab::space_prefix_rule).
bool wants_space_prefix(const Vocab& v, bool after_special, size_t offset, std::string_view fragment) {
  if (!v.add_space_prefix || !after_special) return false;
  switch (v.space_prefix_rule) {
    case SpacePrefix::Always: return true;
    case SpacePrefix::Metaspace: return !fragment.starts_with(' ');
    case SpacePrefix::MetaspaceFirst: return offset == 0 && !fragment.starts_with(' ');
  }
  return true;
}

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// llama.cpp's tokenizer_st_partition: split the text on every special token (longest first);
// control and unknown tokens only when parse_special and not overlapping a `literal` span,
// user-defined ones always. Tokens marked lstrip/rstrip swallow the whitespace beside them.
std::vector<Fragment> partition_special(const Vocab& v, std::string_view text, bool parse_special,
                                        std::span<const TextSpan> literal = {}) {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (const Id special : v.special_tokens) {
    if (!parse_special && v.has_attr(special, kAttrControl | kAttrUnknown)) continue;
    const std::string& piece = v.pieces[static_cast<size_t>(special)];
    const bool lstrip = v.has_attr(special, kAttrLstrip), rstrip = v.has_attr(special, kAttrRstrip);
    const bool may_be_literal = !literal.empty() && v.has_attr(special, kAttrControl | kAttrUnknown);
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t base = f.offset;
      size_t search = base;
      const size_t end = f.offset + f.length;
      while (true) {
        const size_t match = text.substr(0, end).find(piece, search);
        if (match == std::string_view::npos) {
          if (end > base) next.push_back({-1, base, end - base});
          break;
        }
        if (may_be_literal && overlaps(literal, match, piece.size())) {
          search = match + 1;  // this occurrence is text; look for the next one
          continue;
        }
        size_t left = match - base;
        if (lstrip) {
          while (left > 0 && is_space(text[base + left - 1])) --left;
        }
        if (left > 0) next.push_back({-1, base, left});
        next.push_back({special, match, piece.size()});
        base = match + piece.size();
        if (rstrip) {
          while (base < end && is_space(text[base])) ++base;
        }
        search = base;
      }
    }
    fragments.swap(next);
  }
  return fragments;
}

}  // namespace
}  // namespace tokenizer

using tokenizer::Id;
using tokenizer::TokenizerImpl;
using tokenizer::Vocab;
using tokenizer::VocabKind;

Tokenizer::Tokenizer(std::shared_ptr<const TokenizerImpl> impl) : impl_(std::move(impl)) {}

Tokenizer Tokenizer::from_metadata(const Metadata& meta, const std::string& source) {
  auto impl = std::make_shared<TokenizerImpl>();
  VocabKind kind = VocabKind::Spm;
  tokenizer::VocabDefaults defaults;
  const tokenizer::PreTokenizerSpec* spec = nullptr;
  const MetaArray* merges = nullptr;
  try {
    const auto model = meta.get_string_opt("tokenizer.ggml.model");
    if (!model) throw FormatError("missing metadata key 'tokenizer.ggml.model' (the file has no tokenizer)");
    if (*model == "llama") {
      kind = VocabKind::Spm;
    } else if (*model == "gpt2") {
      kind = VocabKind::Bpe;
      const std::string pre = meta.get_string_opt("tokenizer.ggml.pre").value_or("default");
      spec = tokenizer::find_pre_tokenizer(pre);
      if (!spec) {
        throw FormatError("unsupported tokenizer.ggml.pre '" + pre +
                          "' (supported: " + tokenizer::supported_pre_tokenizers() + ")");
      }
      defaults.add_bos = spec->add_bos;
      defaults.ignore_merges = spec->ignore_merges;
      const MetaValue* m = meta.find("tokenizer.ggml.merges");
      if (!m) throw FormatError("missing metadata key 'tokenizer.ggml.merges' (needed by a gpt2 tokenizer)");
      if (m->type != MetaType::ARRAY || m->as_array().elem_type != MetaType::STRING) {
        throw FormatError("'tokenizer.ggml.merges' is not an array of strings");
      }
      merges = &m->as_array();
    } else {
      throw FormatError("unsupported tokenizer.ggml.model '" + *model + "' (supported: llama, gpt2)");
    }
  } catch (const FormatError& e) {
    throw FormatError(source + ": " + e.what());
  }

  impl->vocab = tokenizer::load_vocab(meta, source, kind, defaults);
  try {
    if (kind == VocabKind::Bpe) impl->bpe.emplace(impl->vocab, *merges, *spec);
  } catch (const FormatError& e) {
    throw FormatError(source + ": " + e.what());
  } catch (const std::invalid_argument& e) {
    throw FormatError(source + ": " + e.what());
  }
  const Vocab& v = impl->vocab;
  impl->rendered.reserve(v.pieces.size());
  for (Id id = 0; id < v.n_vocab(); ++id) impl->rendered.push_back(tokenizer::render_token(v, id));
  return Tokenizer(std::move(impl));
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  return encode_fragments(text, add_special, parse_special, {});
}

std::vector<TokenId> Tokenizer::encode_with_literals(std::string_view text, bool add_special,
                                                     std::span<const TextSpan> literal) const {
  return encode_fragments(text, add_special, true, literal);
}

std::vector<TextSpan> Tokenizer::find_special_text(std::string_view text) const {
  const Vocab& v = impl_->vocab;
  std::vector<TextSpan> spans;
  for (const tokenizer::Fragment& f : tokenizer::partition_special(v, text, true)) {
    if (f.token >= 0 && v.has_attr(f.token, tokenizer::kAttrControl | tokenizer::kAttrUnknown))
      spans.push_back({f.offset, f.length});
  }
  return spans;
}

std::vector<TokenId> Tokenizer::encode_fragments(std::string_view text, bool add_special, bool parse_special,
                                                 std::span<const TextSpan> literal) const {
  const Vocab& v = impl_->vocab;
  std::vector<TokenId> out;
  if (add_special && v.add_bos) out.push_back(v.bos);
  bool prev_special = true;  // SPM: a space prefix goes on text at the start or after a special
  for (const tokenizer::Fragment& f : tokenizer::partition_special(v, text, parse_special, literal)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    std::string_view fragment = text.substr(f.offset, f.length);
    std::string normalized;
    if (v.nfc) {
      normalized = tokenizer::nfc(fragment);
      fragment = normalized;
    }
    if (v.kind == VocabKind::Spm) {
      std::string spaced;
      if (tokenizer::wants_space_prefix(v, prev_special, f.offset, fragment)) spaced = " ";
      spaced.append(fragment);
      tokenizer::spm_encode(v, tokenizer::replace_all(spaced, " ", tokenizer::kEscapedSpace), out);
    } else {
      impl_->bpe->encode(v, fragment, out);
    }
    prev_special = false;
  }
  if (add_special && v.add_eos) out.push_back(v.eos);
  return out;
}

std::string Tokenizer::token_to_bytes(TokenId id, bool render_special) const {
  const Vocab& v = impl_->vocab;
  if (!v.valid(id)) return {};
  if (!render_special && v.has_attr(id, tokenizer::kAttrUnknown | tokenizer::kAttrControl)) return {};
  return impl_->rendered[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool render_special) const {
  std::string out;
  bool strip_space = impl_->vocab.add_space_prefix;
  for (const TokenId id : ids) {
    std::string bytes = token_to_bytes(id, render_special);
    if (strip_space && !bytes.empty() && bytes[0] == ' ') bytes.erase(0, 1);
    strip_space = false;
    out += bytes;
  }
  return out;
}

const std::string& Tokenizer::piece(TokenId id) const {
  if (!impl_->vocab.valid(id)) throw std::out_of_range("token id " + std::to_string(id) + " out of range");
  return impl_->vocab.pieces[static_cast<size_t>(id)];
}

int32_t Tokenizer::n_vocab() const { return impl_->vocab.n_vocab(); }

size_t Tokenizer::max_piece_bytes() const {
  size_t longest = 1;
  for (const std::string& p : impl_->vocab.pieces) longest = std::max(longest, p.size());
  // NFC can shrink the input before it is split: at most to a third (three conjoining Hangul
  // jamo, 9 bytes, compose into one 3-byte syllable).
  return impl_->vocab.nfc ? 3 * longest : longest;
}
TokenId Tokenizer::bos() const { return impl_->vocab.bos; }
TokenId Tokenizer::eos() const { return impl_->vocab.eos; }
TokenId Tokenizer::eot() const { return impl_->vocab.eot; }
bool Tokenizer::add_bos() const { return impl_->vocab.add_bos; }
bool Tokenizer::add_eos() const { return impl_->vocab.add_eos; }
bool Tokenizer::add_space_prefix() const { return impl_->vocab.add_space_prefix; }

bool Tokenizer::is_end_of_generation(TokenId id) const {
  const Vocab& v = impl_->vocab;
  return v.valid(id) && v.end_of_generation[static_cast<size_t>(id)] != 0;
}

bool Tokenizer::is_control(TokenId id) const {
  const Vocab& v = impl_->vocab;
  return v.valid(id) && v.has_attr(id, tokenizer::kAttrControl);
}

std::string_view Tokenizer::model_kind() const {
  return impl_->vocab.kind == VocabKind::Spm ? "llama" : "gpt2";
}

std::string_view Tokenizer::pre_tokenizer() const { return impl_->vocab.pre_name; }

}  // namespace peregrine
