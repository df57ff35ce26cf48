#include "format/model_file.h"

#include <stdexcept>

#include "format/gguf.h"
#include "format/hf_checkpoint.h"
#include "format/llama2c.h"
#include "util/error.h"

namespace peregrine {

int64_t TensorView::n_elements() const {
  if (shape.empty()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // loaders validate shapes, so this cannot overflow
  return n;
}

void TensorView::dequantize_row_to(int64_t r, std::span<float> dst) const {
  if (r < 0 || r >= n_rows())
    throw std::out_of_range("tensor '" + name + "': row " + std::to_string(r) + " of " +
                            std::to_string(n_rows()));
  if (static_cast<int64_t>(dst.size()) != row_length())
    throw std::invalid_argument("tensor '" + name + "': destination holds " +
                                std::to_string(dst.size()) + " floats, row has " +
                                std::to_string(row_length()));
  dequantize_row(type, row(r), dst.data(), row_length());
}

const TensorView* ModelFile::find(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorView& ModelFile::require(std::string_view name) const {
  if (const TensorView* t = find(name)) return *t;
  throw FormatError(path + ": missing tensor '" + std::string(name) + "'");
}

ModelFile open_model_file(const std::filesystem::path& path,
                          const std::optional<std::filesystem::path>& llama2c_tokenizer) {
  if (std::filesystem::is_directory(path)) return read_hf_checkpoint(path);
  if (is_gguf_file(path)) return read_gguf(path);
  return read_llama2c(path, llama2c_tokenizer);
}

}  // namespace peregrine
