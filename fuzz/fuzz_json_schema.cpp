// libFuzzer target for the JSON Schema compiler: the input is JSON text (a schema), optionally
// followed by a NUL byte and "drive" bytes that steer a walk through the compiled grammar; once
// they run out the walk prefers bytes that close strings and brackets, to reach a whole document.
//
// A bug is:
//   * json_schema_to_gbnf throwing anything but GrammarError, or one without the "json schema: "
//     prefix;
//   * GBNF from the compiler that does not compile, unless past a size limit ("more than ...");
//     every other refusal must come from the schema compiler, in the schema's terms;
//   * the matcher breaking the invariants of fuzz_gbnf (grammar_oracle.h) on the schema's grammar;
//   * a document the grammar accepts whole that is not JSON, or that does not satisfy the schema
//     (schema_validator.h: types, properties, required, additionalProperties, enum, const,
//     anyOf/oneOf, $ref, items and their counts, string lengths);
//   * a sanitizer report, a crash, more than 10 s or 2 GiB for one input.
// Schemas go through the server's own gates first: nesting up to kMaxJsonDepth and 64 KiB of text.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar_oracle.h"
#include "schema_validator.h"
#include "util/json_depth.h"

namespace {

constexpr size_t kMaxSchemaText = 64 * 1024;  // server::kMaxGrammarBytes

using peregrine::fuzz::finding;

void check_document(const nlohmann::ordered_json& schema, const std::string& doc) {
  const nlohmann::json value = nlohmann::json::parse(doc, nullptr, false);
  if (value.is_discarded()) finding("the grammar accepted text that is not JSON: " + doc.substr(0, 400));
  if (std::string why = peregrine::fuzz::schema_violation(schema, schema, value); !why.empty()) {
    finding("the grammar accepted " + doc.substr(0, 400) + " which breaks the schema: " + why);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace peregrine;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view text = input.substr(0, nul);
  const std::string_view drive = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  if (text.size() > kMaxSchemaText || json_nesting_depth(text) > kMaxJsonDepth) return 0;
  const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(text, nullptr, false);
  if (schema.is_discarded()) return 0;

  std::string gbnf;
  try {
    gbnf = json_schema_to_gbnf(schema);
  } catch (const GrammarError& e) {
    fuzz::note(std::string("refused: ") + e.what());
    if (std::strncmp(e.what(), "json schema: ", 13) != 0) finding(std::string("unprefixed message: ") + e.what());
    return 0;
  }
  std::shared_ptr<const Grammar> grammar;
  try {
    grammar = std::make_shared<const Grammar>(compile_gbnf(gbnf));
  } catch (const GrammarError& e) {
    if (std::strstr(e.what(), "more than ") == nullptr) {
      finding(std::string("the schema's GBNF does not compile: ") + e.what() + "\n" + gbnf.substr(0, 2000));
    }
    return 0;
  }
  fuzz::check_structure(*grammar);

  const fuzz::Deadline deadline(std::chrono::milliseconds(1500));
  fuzz::WalkLimits limits;
  limits.max_bytes = 2048;
  limits.reference_bytes = 160;
  fuzz::Walk walk;
  if (!fuzz::walk_grammar(grammar, drive, limits, deadline, walk)) return 0;
  fuzz::note(fuzz::describe(walk));
  if (walk.accepting) check_document(schema, walk.text);
  return 0;
}
