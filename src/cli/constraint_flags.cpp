#include "cli/constraint_flags.h"

#include <fstream>
#include <sstream>

#include "engine/grammar_step.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "util/error.h"

namespace peregrine::cli {
namespace {

std::string read_text(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(std::string(flag) + " '" + path + "': cannot read the file");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::shared_ptr<TokenConstraint> load_constraint(const std::optional<std::string>& json_schema_file,
                                                 const std::optional<std::string>& grammar_file,
                                                 const Tokenizer& tokenizer) {
  if (json_schema_file && grammar_file) throw UsageError("--json-schema and --grammar cannot be combined");
  std::string gbnf;
  if (json_schema_file) {
    nlohmann::ordered_json schema;
    try {
      schema = nlohmann::ordered_json::parse(read_text(*json_schema_file, "--json-schema"));
    } catch (const nlohmann::json::exception& e) {
      throw UsageError("--json-schema '" + *json_schema_file + "': not valid JSON: " + e.what());
    }
    gbnf = json_schema_to_gbnf(schema);
  } else if (grammar_file) {
    gbnf = read_text(*grammar_file, "--grammar");
  } else {
    return nullptr;
  }
  return std::make_shared<TokenConstraint>(std::make_shared<const Grammar>(compile_gbnf(gbnf)),
                                           make_vocab_trie(tokenizer));
}

}  // namespace peregrine::cli
