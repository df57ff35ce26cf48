#include "grammar_oracle.h"

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>

#include "grammar/token_constraint.h"
#include "grammar/vocab_trie.h"

namespace peregrine::fuzz {

using Kind = GrammarElement::Kind;

void finding(const std::string& what) {
  std::fprintf(stderr, "FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

void note(const std::string& what) {
  static const bool verbose = std::getenv("PEREGRINE_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "note: %s\n", what.c_str());
}

// ---- the reference recognizer ----

ReferenceRecognizer::ReferenceRecognizer(const Grammar& g, size_t max_items) : g_(g), max_items_(max_items) {
  compute_nullable();
  sets_.emplace_back();
  waiting_.emplace_back();
  for (uint32_t alt : g_.rules[g_.root].alternatives) add({alt, g_.root, 0});
  close();
}

// A rule is nullable when one of its alternatives holds only nullable rules; found by counting,
// per alternative, the rule references not yet known nullable (a worklist, linear in the grammar).
void ReferenceRecognizer::compute_nullable() {
  nullable_.assign(g_.rules.size(), false);
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> uses(g_.rules.size());  // rule -> (rule, alt index)
  std::vector<std::vector<size_t>> remaining(g_.rules.size());
  std::vector<uint32_t> queue;
  for (uint32_t r = 0; r < g_.rules.size(); ++r) {
    const auto& alts = g_.rules[r].alternatives;
    remaining[r].assign(alts.size(), 0);
    for (uint32_t a = 0; a < alts.size(); ++a) {
      size_t refs = 0;
      bool has_bytes = false;
      for (uint32_t pos = alts[a]; g_.at(pos).kind != Kind::End; ++pos) {
        if (g_.at(pos).kind == Kind::Bytes) {
          has_bytes = true;
        } else {
          ++refs;
          uses[g_.at(pos).value].push_back({r, a});
        }
      }
      remaining[r][a] = has_bytes ? std::numeric_limits<size_t>::max() : refs;
      if (refs == 0 && !has_bytes && !nullable_[r]) {
        nullable_[r] = true;
        queue.push_back(r);
      }
    }
  }
  while (!queue.empty()) {
    const uint32_t done = queue.back();
    queue.pop_back();
    for (const auto& [r, a] : uses[done]) {
      size_t& left = remaining[r][a];
      if (left == std::numeric_limits<size_t>::max() || left == 0) continue;
      if (--left == 0 && !nullable_[r]) {
        nullable_[r] = true;
        queue.push_back(r);
      }
    }
  }
}

void ReferenceRecognizer::add(Item it) {
  const uint64_t key = uint64_t{it.pos} | (uint64_t{it.rule} << 21) | (uint64_t{it.origin} << 38);
  if (!seen_.insert(key).second) return;
  sets_.back().push_back(it);
  if (sets_.back().size() > max_items_) usable_ = false;
}

void ReferenceRecognizer::complete(const Item& it) {
  auto& waiting = waiting_[it.origin];
  auto found = waiting.find(it.rule);
  if (found == waiting.end()) return;
  const std::vector<uint32_t> before = found->second;  // add() may grow the map of this very set
  for (uint32_t idx : before) {
    const Item w = sets_[it.origin][idx];
    add({w.pos + 1, w.rule, w.origin});
  }
}

void ReferenceRecognizer::close() {
  const auto k = static_cast<uint32_t>(sets_.size() - 1);
  for (size_t i = 0; i < sets_.back().size() && usable_; ++i) {
    const Item it = sets_.back()[i];
    const GrammarElement& e = g_.at(it.pos);
    if (e.kind == Kind::End) {
      complete(it);
    } else if (e.kind == Kind::Rule) {
      waiting_[k][e.value].push_back(static_cast<uint32_t>(i));
      for (uint32_t alt : g_.rules[e.value].alternatives) add({alt, e.value, k});
      if (nullable_[e.value]) add({it.pos + 1, it.rule, it.origin});
    }
  }
}

ByteSet ReferenceRecognizer::next_bytes() const {
  ByteSet out;
  for (const Item& it : sets_.back()) {
    if (g_.at(it.pos).kind != Kind::Bytes) continue;
    const ByteSet& s = g_.byte_sets[g_.at(it.pos).value];
    for (size_t w = 0; w < 4; ++w) out.bits[w] |= s.bits[w];
  }
  return out;
}

bool ReferenceRecognizer::accepting() const {
  return std::any_of(sets_.back().begin(), sets_.back().end(), [&](const Item& it) {
    return it.rule == g_.root && it.origin == 0 && g_.at(it.pos).kind == Kind::End;
  });
}

void ReferenceRecognizer::feed(uint8_t b) {
  std::vector<Item> scanned;
  for (const Item& it : sets_.back()) {
    if (g_.at(it.pos).kind == Kind::Bytes && g_.takes(it.pos, b)) scanned.push_back({it.pos + 1, it.rule, it.origin});
  }
  sets_.emplace_back();
  waiting_.emplace_back();
  seen_.clear();
  for (const Item& it : scanned) add(it);
  close();
}

// ---- checks on one grammar ----

ByteSet top_bytes(const GrammarMatcher& m) {
  ByteSet out;
  for (const ParseStack& s : m.stacks()) {
    if (s.empty()) continue;
    const ByteSet& set = m.grammar().byte_sets[m.grammar().at(s.back()).value];
    for (size_t w = 0; w < 4; ++w) out.bits[w] |= set.bits[w];
  }
  return out;
}

void check_structure(const Grammar& g) {
  if (g.root >= g.rules.size()) finding("the root rule does not exist");
  if (g.elements.empty() || g.elements.back().kind != Kind::End) finding("the last alternative does not end");
  for (const GrammarElement& e : g.elements) {
    if (e.kind == Kind::Rule && e.value >= g.rules.size()) finding("a reference to a rule that does not exist");
    if (e.kind == Kind::Bytes && e.value >= g.byte_sets.size()) finding("a terminal without a byte set");
    if (e.kind == Kind::Bytes && g.byte_sets[e.value].empty()) finding("a terminal that takes no byte");
  }
  for (const GrammarRule& r : g.rules) {
    if (r.alternatives.empty()) finding("rule '" + r.name + "' has no alternatives");
    for (uint32_t alt : r.alternatives) {
      if (alt >= g.elements.size()) finding("rule '" + r.name + "' starts an alternative past the elements");
    }
  }
}

Utf8 utf8_state(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    uint32_t cp = 0;
    if (b >= 0xC2 && b <= 0xDF) {
      n = 2, cp = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
      n = 3, cp = b & 0x0F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      n = 4, cp = b & 0x07;
    } else {
      return Utf8::Invalid;
    }
    size_t k = 1;
    for (; k < n && i + k < s.size(); ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return Utf8::Invalid;
      cp = (cp << 6) | (c & 0x3F);
      // The second byte alone rules out overlong forms, surrogates and code points past U+10FFFF.
      if (k == 1) {
        if ((b == 0xE0 && c < 0xA0) || (b == 0xED && c > 0x9F) || (b == 0xF0 && c < 0x90) || (b == 0xF4 && c > 0x8F)) {
          return Utf8::Invalid;
        }
      }
    }
    if (k < n) return Utf8::Partial;
    i += n;
  }
  return Utf8::Complete;
}

namespace {

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 200)) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7F) {
      out += c;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", u);
      out += buf;
    }
  }
  return out;
}

// Bytes that end things, tried in this order once the drive bytes run out.
constexpr std::string_view kClosing = "\"}])0e1a ";

uint8_t nth_byte(const ByteSet& set, size_t n) {
  size_t count = 0;
  for (unsigned b = 0; b < 256; ++b) count += set.has(static_cast<uint8_t>(b)) ? 1 : 0;
  n %= count;
  for (unsigned b = 0; b < 256; ++b) {
    if (set.has(static_cast<uint8_t>(b)) && n-- == 0) return static_cast<uint8_t>(b);
  }
  return 0;
}

uint8_t closing_byte(const ByteSet& set, size_t step) {
  for (char c : kClosing) {
    if (set.has(static_cast<uint8_t>(c))) return static_cast<uint8_t>(c);
  }
  return nth_byte(set, step);
}

bool is_checkpoint(size_t at) {
  return at <= 3 || at == 5 || at == 8 || at == 13 || at == 21 || at == 34 || at == 55 || at == 89 || at == 144;
}

// The matcher against the recognizer and against itself, at one point of the walk.
void check_state(const GrammarMatcher& m, const ReferenceRecognizer* ref, const std::string& text) {
  const ByteSet tops = top_bytes(m);
  if (m.can_continue() != !tops.empty()) finding("can_continue() disagrees with the stacks after '" + printable(text) + "'");
  if (ref == nullptr || !ref->usable()) return;
  if (ref->next_bytes() != tops) finding("the matcher's next bytes differ from the reference's after '" + printable(text) + "'");
  if (ref->accepting() != m.is_accepting()) {
    finding(std::string("the matcher says the text is ") + (m.is_accepting() ? "" : "not ") +
            "complete, the reference disagrees: '" + printable(text) + "'");
  }
}

// Feeding the whole text at once gives the state the walk reached; the text and a byte the state
// refuses, fed at once, are refused and change nothing.
void check_replay(const GrammarMatcher& start, const GrammarMatcher& walked, const std::string& text) {
  try {
    GrammarMatcher again = start;
    if (!again.accept_bytes(text)) finding("the walked text is refused when fed at once: '" + printable(text) + "'");
    if (again.stacks() != walked.stacks()) finding("feeding the text at once gives other stacks: '" + printable(text) + "'");
    const ByteSet tops = top_bytes(walked);
    for (unsigned b = 0; b < 256; ++b) {
      if (tops.has(static_cast<uint8_t>(b))) continue;
      GrammarMatcher fresh = start;
      if (fresh.accept_bytes(text + static_cast<char>(b))) finding("a byte outside the tops was taken");
      if (fresh.stacks() != start.stacks()) finding("bytes refused together changed the state");
      break;
    }
  } catch (const GrammarError& e) {
    finding(std::string("replaying the walked text threw: ") + e.what());
  }
}

}  // namespace

std::string describe(const Walk& walk) {
  return "walked " + std::to_string(walk.text.size()) + " bytes, " + (walk.accepting ? "complete" : "incomplete") +
         ": '" + printable(walk.text) + "'";
}

bool walk_grammar(const std::shared_ptr<const Grammar>& g, std::string_view drive, const WalkLimits& limits,
                  const Deadline& deadline, Walk& out) {
  std::optional<GrammarMatcher> start;
  try {
    start.emplace(g);
  } catch (const GrammarError& e) {
    note(std::string("start refused: ") + e.what());
    return false;  // too ambiguous or too costly to start: the documented refusal
  }
  GrammarMatcher m = *start;
  std::optional<ReferenceRecognizer> ref;
  if (g->elements.size() <= limits.reference_elements) {
    ref.emplace(*g, limits.reference_items);
    for (size_t r = 0; r < g->rules.size(); ++r) {
      if (ref->nullable()[r] != g->rules[r].nullable) finding("rule '" + g->rules[r].name + "': nullable disagrees");
    }
  }
  out = Walk{};
  size_t used = 0;
  while (true) {
    if (ref && out.text.size() >= limits.reference_bytes) ref.reset();
    check_state(m, ref ? &*ref : nullptr, out.text);
    const Utf8 utf8 = utf8_state(out.text);
    if (utf8 == Utf8::Invalid) finding("the grammar allows text that is not UTF-8: '" + printable(out.text) + "'");
    if (utf8 == Utf8::Partial && m.is_accepting()) {
      finding("a complete text ends inside a UTF-8 sequence: '" + printable(out.text) + "'");
    }
    if (is_checkpoint(out.text.size())) out.checkpoints.push_back({out.text.size(), m});
    const ByteSet tops = top_bytes(m);
    const bool driven = used < drive.size();
    if (tops.empty() || out.text.size() >= limits.max_bytes || deadline.passed()) break;
    if (!driven && (!limits.finish || m.is_accepting())) break;
    uint8_t b = 0;
    try {
      if (driven) {
        const auto d = static_cast<uint8_t>(drive[used++]);
        const bool took = m.accept_byte(d);
        if (took != tops.has(d)) finding("accept_byte disagrees with the stacks' tops after '" + printable(out.text) + "'");
        if (took) {
          b = d;
        } else {
          b = nth_byte(tops, d);
          if (!m.accept_byte(b)) finding("a byte the tops allow was refused after '" + printable(out.text) + "'");
        }
      } else {
        b = closing_byte(tops, out.text.size());
        if (!m.accept_byte(b)) finding("a byte the tops allow was refused after '" + printable(out.text) + "'");
      }
    } catch (const GrammarError& e) {
      note(std::string("byte refused: ") + e.what());
      break;  // too ambiguous or too costly at this byte: the documented refusal
    }
    out.text += static_cast<char>(b);
    if (ref) ref->feed(b);
  }
  out.accepting = m.is_accepting();
  check_replay(*start, m, out.text);
  out.checkpoints.push_back({out.text.size(), m});
  return true;
}

// ---- token masks ----

namespace {

const std::vector<std::string>& fixed_pieces() {
  static const std::vector<std::string> pieces = {
      "",  " ",  "a",    "b",  "x",  "0",  "1",     "9",    "{",    "}",   "[",          "]",
      "\"", ":", ",",    "\n", "\\", "-",  ".",     "e",    "true", "null", "\"a\"",     " \"",
      "  ", "\":", "\",", "{\"", "ab", "\xC3", "\xA9", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\x80", "\xFF"};
  return pieces;
}

// Pieces of the walked text starting at each checkpoint (some allowed there, some one byte off),
// with and without a leading space, and fixed pieces.
std::vector<std::string> make_vocab(const Walk& walk) {
  std::vector<std::string> vocab = fixed_pieces();
  for (const Checkpoint& c : walk.checkpoints) {
    for (size_t len : {1, 2, 3, 5, 8}) {
      if (c.at + len > walk.text.size()) break;
      std::string piece = walk.text.substr(c.at, len);
      vocab.push_back(piece);
      vocab.push_back(" " + piece);
      piece.back() = static_cast<char>(piece.back() + 1);
      vocab.push_back(piece);
    }
  }
  if (vocab.size() > 240) vocab.resize(240);
  return vocab;
}

void check_mask_at(TokenConstraint& tc, const GrammarMatcher& m, bool drop_leading_space, const std::string& context,
                   const Deadline& deadline) {
  TokenSet allowed;
  try {
    tc.allowed(m, allowed, drop_leading_space);
  } catch (const GrammarError&) {
    return;  // too costly to walk: the documented refusal
  }
  const int32_t n = tc.trie().n_vocab();
  std::vector<bool> expected(static_cast<size_t>(n));
  try {
    for (int32_t id = 0; id < n; ++id) {
      if (deadline.passed()) return;  // the harness's time is up: no verdict here
      GrammarMatcher probe = m;
      expected[static_cast<size_t>(id)] = tc.accept_token(probe, id, drop_leading_space);
    }
  } catch (const GrammarError&) {
    return;  // a token's bytes are too ambiguous to follow: no reference answer here
  }
  for (int32_t id = 0; id < n; ++id) {
    if (allowed.contains(id) != expected[static_cast<size_t>(id)]) {
      finding("the mask " + std::string(allowed.contains(id) ? "allows" : "refuses") + " token '" +
              printable(tc.trie().bytes(id)) + "' (drop_leading_space " + (drop_leading_space ? "on" : "off") +
              ") that its bytes " + (expected[static_cast<size_t>(id)] ? "keep" : "break") + " " + context);
    }
  }
  std::vector<float> logits(static_cast<size_t>(n), 1.0f);
  size_t kept = 0;
  try {
    kept = tc.mask_logits(m, logits, drop_leading_space);
  } catch (const GrammarError&) {
    return;
  }
  size_t finite = 0;
  for (int32_t id = 0; id < n; ++id) {
    const bool open = logits[static_cast<size_t>(id)] == 1.0f;
    finite += open ? 1 : 0;
    if (open != allowed.contains(id)) finding("mask_logits and allowed() disagree on token '" + printable(tc.trie().bytes(id)) + "'");
  }
  if (finite != kept) finding("mask_logits miscounts the allowed tokens");
}

}  // namespace

void check_masks(const std::shared_ptr<const Grammar>& g, const Walk& walk, const Deadline& deadline) {
  auto trie = std::make_shared<const VocabTrie>(make_vocab(walk));
  std::optional<TokenConstraint> tc;
  try {
    tc.emplace(g, trie);
  } catch (const GrammarError& e) {
    finding(std::string("TokenConstraint refused a grammar whose matcher started: ") + e.what());
  }
  if (tc->start().stacks() != walk.checkpoints.front().matcher.stacks()) finding("TokenConstraint starts elsewhere");
  // Twice, the second time in reverse, so cached answers are checked too.
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < walk.checkpoints.size(); ++i) {
      if (deadline.passed()) return;
      const Checkpoint& c = walk.checkpoints[round == 0 ? i : walk.checkpoints.size() - 1 - i];
      const std::string context = "after '" + printable(walk.text.substr(0, c.at)) + "'";
      check_mask_at(*tc, c.matcher, false, context, deadline);
      if (c.at == 0) check_mask_at(*tc, c.matcher, true, context, deadline);
    }
  }
}

}  // namespace peregrine::fuzz
