// `peregrine tokenize`: the ids a model's tokenizer gives a text, on one line.
#include <cstdio>
#include <filesystem>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "format/hf_checkpoint.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace peregrine::cli {
namespace {

// A folder needs only its tokenizer.json (and tokenizer_config.json): no weights are read.
Tokenizer open_tokenizer(const std::optional<std::string>& model, const std::optional<std::string>& tokenizer) {
  if (model && std::filesystem::is_directory(*model)) {
    return Tokenizer::from_metadata(read_hf_tokenizer_only(*model), *model);
  }
  ModelFile mf = open_model_arg(model, tokenizer);
  return Tokenizer::from_metadata(mf.meta, mf.path);
}

}  // namespace

int tokenize_command(const Args& args) {
  std::optional<std::string> model, tokenizer, prompt, file;
  bool no_bos = false, parse_special = false;
  ArgParser p("tokenize", "Print the token ids of a text, space-separated, on one line.");
  p.positional("MODEL", &model, std::string(kModelHelp) + " (a folder needs only tokenizer.json)");
  p.option("-p,--prompt", &prompt, "TEXT", "text to tokenize");
  p.option("-f,--file", &file, "FILE", "read the text from FILE, bytes exactly as they are");
  p.option("--tokenizer", &tokenizer, "FILE", "llama2.c tokenizer.bin (for a llama2.c model)");
  p.flag("--no-bos", &no_bos, "do not add BOS (or other special tokens the model adds)");
  p.flag("--parse-special", &parse_special, "turn special-token text such as <s> into its token");
  if (!p.parse(args)) return 0;
  if (prompt.has_value() == file.has_value()) throw UsageError("give exactly one of -p TEXT or -f FILE");
  std::string text = prompt ? *prompt : read_file_bytes(*file);

  Tokenizer tok = open_tokenizer(model, tokenizer);
  std::vector<TokenId> ids = tok.encode(text, !no_bos, parse_special);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
  }
  line += '\n';
  std::fputs(line.c_str(), stdout);
  return 0;
}

}  // namespace peregrine::cli
