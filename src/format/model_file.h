#pragma once
// What every model loader yields: metadata plus named tensor views. GGUF files are mapped and
// their tensors viewed in place (zero-copy); llama2.c checkpoints and Hugging Face safetensors
// folders are mapped too, with GGUF-style metadata synthesized for them. The engine never cares which kind of file a model came from.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/metadata.h"
#include "format/tensor_type.h"

namespace peregrine {

// A read-only view of one tensor's bytes.
// shape is in GGUF/ggml order: shape[0] is the innermost (contiguous) dimension, so a weight
// matrix used as y = W x with x of length n_in and y of length n_out has shape {n_in, n_out}:
// n_out rows of n_in elements each.
// A view may also be a slice of a 2-D tensor (rows(), columns()): the pieces of a weight matrix
// that one rank of a tensor-parallel model multiplies by. Slices share the file's bytes.
struct TensorView {
  std::string name;
  TensorType type = TensorType::F32;
  std::vector<int64_t> shape;        // 1..4 dims, each >= 1
  std::span<const std::byte> data;   // tensor_bytes(type, n_elements()) bytes when contiguous; a
                                     // column slice spans from its first row's start to its last row's end
  size_t row_stride = 0;             // bytes from one row to the next; 0 = row_bytes() (contiguous)
  // Optional: the same matrix repacked once at load for the bf16 kernels (kernels/bf16_pack.h:
  // 16-row groups, element pairs interleaved); empty if none. The slicing functions below drop it.
  std::span<const std::byte> bf16_groups{};

  int64_t n_elements() const;
  int64_t row_length() const { return shape.empty() ? 0 : shape[0]; }
  int64_t n_rows() const { return row_length() == 0 ? 0 : n_elements() / row_length(); }
  size_t row_bytes() const { return tensor_bytes(type, row_length()); }
  size_t stride_bytes() const { return row_stride != 0 ? row_stride : row_bytes(); }
  const std::byte* row(int64_t r) const { return data.data() + static_cast<size_t>(r) * stride_bytes(); }
  // Rows [r0, r1) of a 2-D tensor: outputs r0.. of y = W x. Zero-copy. Throws std::out_of_range.
  TensorView rows(int64_t r0, int64_t r1) const;
  // Elements [c0, c1) of every row of a 2-D tensor: the part of W x that inputs c0..c1-1 contribute.
  // c0 and c1 must be multiples of the type's block size (std::invalid_argument otherwise), since a
  // quantized block cannot be cut. Zero-copy: rows keep the tensor's stride.
  TensorView columns(int64_t c0, int64_t c1) const;
  // Matrix i of a 3-D tensor {n_in, n_out, n_matrices} (an MoE layer's experts stacked), as a
  // 2-D {n_in, n_out} view of its contiguous bytes. Zero-copy. Throws std::out_of_range.
  TensorView matrix(int64_t i) const;
  // Matrices [i0, i1) of a 3-D tensor, still 3-D ({n_in, n_out, i1 - i0}): the experts one rank of
  // an expert-parallel model holds. Zero-copy. Throws std::out_of_range.
  TensorView matrices(int64_t i0, int64_t i1) const;
  // Dequantized copy of row r into dst (dst.size() == row_length()).
  void dequantize_row_to(int64_t r, std::span<float> dst) const;
};

// Where a tensor came from when its file names and shapes it otherwise than GGUF (a Hugging Face
// folder: PyTorch names, dimensions outermost first), so errors speak the file's terms.
struct TensorOrigin {
  std::string file;  // the file holding it
  std::string name;  // the file's name for it
};

struct ModelFile {
  std::string path;                       // for error messages
  uint32_t gguf_version = 3;              // 0 for non-GGUF sources
  size_t alignment = 32;
  Metadata meta;
  std::vector<TensorView> tensors;        // in file order
  std::shared_ptr<const void> storage;    // keeps the mapping / buffers alive for the views

  std::map<std::string, TensorOrigin, std::less<>> origins;  // by GGUF name; empty for a GGUF or llama2.c file

  const TensorView* find(std::string_view name) const;
  // How errors name the tensor GGUF calls `name` and write a shape of it given in GGUF order: in
  // the file's own terms when it has an origin ('model.layers.0.self_attn.q_proj.weight',
  // dimensions reversed).
  std::string name_in_file(std::string_view name) const;
  std::string shape_in_file(std::string_view name, const std::vector<std::string>& dims) const;
  std::string shape_in_file(std::string_view name, const std::vector<int64_t>& dims) const;
  // "FILE: tensor 'NAME' has shape [...], expected [...]" in those terms (the tensor exists).
  std::string shape_error(std::string_view name, const std::vector<int64_t>& expected) const;
  // Throws FormatError("PATH: missing tensor 'NAME'").
  const TensorView& require(std::string_view name) const;
};

// Opens a model from a path: a directory as a Hugging Face checkpoint (hf_checkpoint.h), a file
// as GGUF by magic, otherwise as a llama2.c checkpoint (which needs
// `llama2c_tokenizer`, a tokenizer.bin; without one the model has no vocabulary and
// loading reports that clearly). Throws FormatError naming the file and the problem.
ModelFile open_model_file(const std::filesystem::path& path,
                          const std::optional<std::filesystem::path>& llama2c_tokenizer = std::nullopt);

}  // namespace peregrine
