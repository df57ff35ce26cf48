#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex_splitter.h"

#include <pcre2.h>

#include <stdexcept>

#include "tokenizer/utf8.h"

namespace peregrine::tokenizer {
namespace {

struct MatchState {
  // Per call: PCRE2 match data and a JIT stack big enough for long runs of one class (the
  // default 32 KiB machine stack overflows on e.g. a few thousand spaces).
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;

  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    if (!data || !context || !stack) throw std::bad_alloc();
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

}  // namespace

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(std::span<const std::string> patterns) {
  for (const std::string& pattern : patterns) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    auto compiled = std::make_unique<Compiled>();
    compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error,
                                   &error_offset, nullptr);
    if (!compiled->code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      throw std::invalid_argument("pre-tokenizer regex '" + pattern + "' does not compile at offset " +
                                  std::to_string(error_offset) + ": " +
                                  reinterpret_cast<const char*>(message));
    }
    // JIT is an optimisation: if the platform lacks it, the interpreter gives the same matches.
    pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
    regexes_.push_back(std::move(compiled));
  }
}

RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

std::vector<std::string_view> RegexSplitter::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  MatchState state;
  std::vector<std::string_view> next;
  for (const auto& regex : regexes_) {
    next.clear();
    for (std::string_view piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t gap_start = 0;  // start of the text not yet emitted
      size_t pos = 0;
      while (pos < piece.size()) {
        const int rc = pcre2_match(regex->code, subject, piece.size(), pos, 0, state.data, state.context);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR message[256];
          pcre2_get_error_message(rc, message, sizeof(message));
          throw std::runtime_error(std::string("pre-tokenizer regex match failed: ") +
                                   reinterpret_cast<const char*>(message));
        }
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
        const size_t begin = ovector[0], end = ovector[1];
        if (end == begin) {
          if (begin >= piece.size()) break;
          // An empty match splits nothing; step over one character and search on.
          pos = begin + std::min(utf8::lead_length(static_cast<unsigned char>(piece[begin])),
                                 piece.size() - begin);
          continue;
        }
        if (begin > gap_start) next.push_back(piece.substr(gap_start, begin - gap_start));
        next.push_back(piece.substr(begin, end - begin));
        gap_start = pos = end;
      }
      if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
    }
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace peregrine::tokenizer
