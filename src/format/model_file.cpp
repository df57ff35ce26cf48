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

TensorView TensorView::rows(int64_t r0, int64_t r1) const {
  if (shape.size() != 2 || r0 < 0 || r1 > n_rows() || r0 >= r1) {
    throw std::out_of_range("tensor '" + name + "': rows [" + std::to_string(r0) + ", " + std::to_string(r1) +
                            ") of a " + std::to_string(n_rows()) + "-row matrix");
  }
  TensorView v = *this;
  v.bf16_groups = {};
  v.shape = {shape[0], r1 - r0};
  const size_t stride = stride_bytes();
  v.data = data.subspan(static_cast<size_t>(r0) * stride, static_cast<size_t>(r1 - r0 - 1) * stride + row_bytes());
  return v;
}

TensorView TensorView::columns(int64_t c0, int64_t c1) const {
  const int64_t block = tensor_type_info(type).block_elems;
  if (shape.size() != 2 || c0 < 0 || c1 > row_length() || c0 >= c1) {
    throw std::out_of_range("tensor '" + name + "': columns [" + std::to_string(c0) + ", " + std::to_string(c1) +
                            ") of rows of " + std::to_string(row_length()));
  }
  if (c0 % block != 0 || c1 % block != 0) {
    throw std::invalid_argument("tensor '" + name + "': columns [" + std::to_string(c0) + ", " + std::to_string(c1) +
                                ") cut a " + std::string(tensor_type_info(type).name) + " block of " +
                                std::to_string(block));
  }
  TensorView v = *this;
  v.bf16_groups = {};
  v.shape = {c1 - c0, shape[1]};
  v.row_stride = stride_bytes();
  const size_t offset = tensor_bytes(type, c0);
  v.data = data.subspan(offset, static_cast<size_t>(n_rows() - 1) * v.row_stride + v.row_bytes());
  return v;
}

TensorView TensorView::matrix(int64_t i) const {
  if (shape.size() != 3 || i < 0 || i >= shape[2] || row_stride != 0) {
    throw std::out_of_range("tensor '" + name + "': matrix " + std::to_string(i) + " of a tensor that is not " +
                            "a contiguous stack of " + (shape.size() == 3 ? std::to_string(shape[2]) : "3-D") +
                            " matrices");
  }
  TensorView v = *this;
  v.bf16_groups = {};
  v.shape = {shape[0], shape[1]};
  const size_t bytes = static_cast<size_t>(shape[1]) * row_bytes();
  v.data = data.subspan(static_cast<size_t>(i) * bytes, bytes);
  return v;
}

TensorView TensorView::matrices(int64_t i0, int64_t i1) const {
  if (shape.size() != 3 || i0 < 0 || i1 > shape[2] || i0 >= i1 || row_stride != 0) {
    throw std::out_of_range("tensor '" + name + "': matrices [" + std::to_string(i0) + ", " + std::to_string(i1) +
                            ") of a tensor that is not a contiguous stack of that many matrices");
  }
  TensorView v = *this;
  v.bf16_groups = {};
  v.shape = {shape[0], shape[1], i1 - i0};
  const size_t bytes = static_cast<size_t>(shape[1]) * row_bytes();
  v.data = data.subspan(static_cast<size_t>(i0) * bytes, static_cast<size_t>(i1 - i0) * bytes);
  return v;
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

std::string ModelFile::name_in_file(std::string_view name) const {
  const auto origin = origins.find(name);
  return origin == origins.end() ? std::string(name) : origin->second.name;
}

std::string ModelFile::shape_in_file(std::string_view name, const std::vector<std::string>& dims) const {
  const bool reversed = origins.contains(name);  // GGUF's dimensions are the file's reversed
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + dims[reversed ? dims.size() - 1 - i : i];
  return s + "]";
}

std::string ModelFile::shape_in_file(std::string_view name, const std::vector<int64_t>& dims) const {
  std::vector<std::string> text;
  for (int64_t d : dims) text.push_back(std::to_string(d));
  return shape_in_file(name, text);
}

std::string ModelFile::shape_error(std::string_view name, const std::vector<int64_t>& expected) const {
  const auto origin = origins.find(name);
  return (origin == origins.end() ? path : origin->second.file) + ": tensor '" + name_in_file(name) + "' has shape " +
         shape_in_file(name, require(name).shape) + ", expected " + shape_in_file(name, expected);
}

ModelFile open_model_file(const std::filesystem::path& path,
                          const std::optional<std::filesystem::path>& llama2c_tokenizer) {
  if (std::filesystem::is_directory(path)) return read_hf_checkpoint(path);
  if (is_gguf_file(path)) return read_gguf(path);
  return read_llama2c(path, llama2c_tokenizer);
}

}  // namespace peregrine
