#pragma once
// Writes any loaded model (GGUF, llama2.c or Hugging Face folder) as a GGUF v3 file, optionally re-typing its weight
// matrices. Powers `peregrine convert`.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>

#include "format/model_file.h"
#include "format/tensor_type.h"

namespace peregrine {

// llama.cpp's LLAMA_FTYPE value for a file whose weight matrices are mostly `weight_type`.
// Q4_K maps to MOSTLY_Q4_K_M (15), the name llama.cpp users know for a Q4_K file.
uint32_t llama_file_type(TensorType weight_type);

// Copies all metadata and tensors of `in` into a new GGUF at `out`. With `weight_type`, every
// tensor of 2+ dims (weight matrices, token_embd, output) is converted to it when its row length
// is a multiple of the type's block size, and kept as F32 otherwise; 1-D tensors (norms, biases,
// rope_freqs) are always F32. general.file_type is set to match. `progress(done, total)` is
// called in bytes after each tensor. Errors: FormatError (input/output file), UsageError.
void write_gguf_from(const ModelFile& in, const std::filesystem::path& out,
                     std::optional<TensorType> weight_type,
                     const std::function<void(uint64_t, uint64_t)>& progress = {});

// The same conversion in memory, for `--type` on run/serve/info: tensors that change type are
// converted into buffers the returned ModelFile owns (with the input's storage, which views of
// unchanged tensors still point into).
ModelFile retype_model(ModelFile in, TensorType weight_type);

}  // namespace peregrine
