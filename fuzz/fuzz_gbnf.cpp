// libFuzzer target for GBNF grammars: the input is grammar text, optionally followed by a NUL byte
// and "drive" bytes that steer a walk through the compiled grammar (grammar_oracle.h).
//
// A bug is:
//   * compile_gbnf throwing anything but GrammarError, or a GrammarError without the
//     "grammar: " prefix every message carries;
//   * a compiled Grammar that breaks its structural guarantees;
//   * the matcher disagreeing with the reference recognizer (next bytes, completeness), with
//     its own stacks, or with itself when the text is fed again at once; text that is not UTF-8;
//   * a token mask that differs from feeding each token's bytes to the matcher;
//   * a sanitizer report, a crash, more than 10 s (libFuzzer's -timeout) or 2 GiB for one input.
// The grammar budgets (grammar.h) make too-ambiguous or too-costly grammars a GrammarError: those
// end the walk and are not findings. Inputs past the server's 64 KiB grammar limit are skipped.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "grammar/gbnf.h"
#include "grammar_oracle.h"

namespace {

constexpr size_t kMaxGrammarText = 64 * 1024;  // server::kMaxGrammarBytes

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace peregrine;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view text = input.substr(0, nul);
  const std::string_view drive = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  if (text.size() > kMaxGrammarText) return 0;

  std::shared_ptr<const Grammar> grammar;
  try {
    grammar = std::make_shared<const Grammar>(compile_gbnf(text));
  } catch (const GrammarError& e) {
    fuzz::note(std::string("refused: ") + e.what());
    if (std::strncmp(e.what(), "grammar: ", 9) != 0) fuzz::finding(std::string("unprefixed message: ") + e.what());
    return 0;
  }
  fuzz::check_structure(*grammar);

  const fuzz::Deadline deadline(std::chrono::milliseconds(1500));
  fuzz::Walk walk;
  if (!fuzz::walk_grammar(grammar, drive, fuzz::WalkLimits{}, deadline, walk)) return 0;
  fuzz::note(fuzz::describe(walk));
  fuzz::check_masks(grammar, walk, deadline);
  return 0;
}
