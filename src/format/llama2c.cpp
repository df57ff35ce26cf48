#include "format/llama2c.h"

#include <cstring>
#include <fstream>

#include "util/error.h"

namespace peregrine {

bool is_gguf_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  return f.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

ModelFile read_llama2c(const std::filesystem::path& checkpoint,
                       const std::optional<std::filesystem::path>& tokenizer) {
  throw FormatError(checkpoint.string() + ": llama2.c checkpoints are not supported yet");
}

void add_llama2c_tokenizer(Metadata& meta, const std::filesystem::path& tokenizer, int64_t vocab_size) {
  throw FormatError(tokenizer.string() + ": llama2.c tokenizers are not supported yet");
}

}  // namespace peregrine
