#pragma once
// What the grammar fuzzers (fuzz_gbnf, fuzz_json_schema) hold a compiled Grammar to, written apart
// from the grammar library so that its answers can be compared with the library's:
//   * ReferenceRecognizer: an Earley recognizer over the same Grammar (items, prediction,
//     completion; nullable rules skipped while predicting, as Aycock and Horspool describe), which
//     says which bytes may follow a text and whether the text is a sentence;
//   * walk_grammar: drives a GrammarMatcher byte by byte with bytes taken from the fuzzer's input
//     and checks at every byte that the matcher agrees with the recognizer, that accept_byte takes
//     exactly the bytes its stacks' tops allow, that the text stays valid UTF-8, and that feeding
//     the whole text again gives the same state;
//   * check_masks: TokenConstraint's token masks at points of that walk against feeding each
//     token's bytes to a copy of the matcher, on a small vocabulary of pieces of the walked text.
// Any disagreement aborts (a finding). GrammarError from the library's budgets (too ambiguous, too
// costly) ends a walk: it is the documented refusal, not a bug.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace peregrine::fuzz {

// Prints what went wrong and aborts, so libFuzzer keeps the input.
[[noreturn]] void finding(const std::string& what);
// With PEREGRINE_FUZZ_VERBOSE set, prints what happened to an input (for checking seeds).
void note(const std::string& what);

// Wall-clock limit on the checks of one input, so that the harness's own work (many matcher
// copies, the reference recognizer) stays well inside libFuzzer's per-input timeout; a single
// library operation that runs past the timeout is still reported by libFuzzer.
class Deadline {
 public:
  explicit Deadline(std::chrono::milliseconds budget) : end_(std::chrono::steady_clock::now() + budget) {}
  bool passed() const { return std::chrono::steady_clock::now() > end_; }

 private:
  std::chrono::steady_clock::time_point end_;
};

class ReferenceRecognizer {
 public:
  // Gives up (usable() false) once one position holds more than max_items items.
  ReferenceRecognizer(const Grammar& g, size_t max_items);

  bool usable() const { return usable_; }
  ByteSet next_bytes() const;  // the bytes some item can scan now
  bool accepting() const;      // the root has been completed over the whole text
  void feed(uint8_t b);        // b must be in next_bytes()
  const std::vector<bool>& nullable() const { return nullable_; }

 private:
  struct Item {
    uint32_t pos;     // the element after the dot
    uint32_t rule;    // the rule whose alternative this is
    uint32_t origin;  // the position the alternative started at
  };
  void compute_nullable();
  void add(Item it);
  void close();
  void complete(const Item& it);

  const Grammar& g_;
  size_t max_items_;
  bool usable_ = true;
  std::vector<bool> nullable_;
  std::vector<std::vector<Item>> sets_;
  std::vector<std::unordered_map<uint32_t, std::vector<uint32_t>>> waiting_;  // per set: rule -> items before it
  std::unordered_set<uint64_t> seen_;                                          // the current set's items
};

// The bytes the matcher's stacks can take next: the union of their tops' byte sets.
ByteSet top_bytes(const GrammarMatcher& m);

// Every element refers to an existing rule or byte set, every alternative ends, the root exists.
void check_structure(const Grammar& g);

// Whether text is UTF-8 (no overlong forms, surrogates or code points past U+10FFFF): Complete,
// Partial (it ends inside a sequence that can still be completed) or Invalid.
enum class Utf8 { Complete, Partial, Invalid };
Utf8 utf8_state(std::string_view s);

struct WalkLimits {
  size_t max_bytes = 96;           // the longest text walked
  size_t reference_bytes = 96;     // the recognizer follows this many bytes (it grows per byte)
  size_t reference_items = 20000;  // per position, before it gives up
  size_t reference_elements = 1 << 16;  // grammars larger than this are walked without it
  bool finish = true;  // once the drive bytes run out, prefer bytes that close strings and brackets until accepting
};

struct Checkpoint {
  size_t at = 0;  // bytes of the text consumed
  GrammarMatcher matcher;
};

// The walk in a line: its length, whether complete, and the start of its text.
std::string describe(const struct Walk& walk);

struct Walk {
  std::string text;                      // the bytes the matcher accepted, in order
  std::vector<Checkpoint> checkpoints;   // the matcher at a few points (the start first)
  bool accepting = false;                // the whole text is a sentence
};

// Walks from the grammar's start: each drive byte is offered to the matcher; when it is refused,
// the (byte % n)-th allowed byte is taken instead. Returns false when the start itself is refused
// (GrammarError: too ambiguous or too costly to start).
bool walk_grammar(const std::shared_ptr<const Grammar>& g, std::string_view drive, const WalkLimits& limits,
                  const Deadline& deadline, Walk& out);

// TokenConstraint against per-token matching at the walk's checkpoints.
void check_masks(const std::shared_ptr<const Grammar>& g, const Walk& walk, const Deadline& deadline);

}  // namespace peregrine::fuzz
