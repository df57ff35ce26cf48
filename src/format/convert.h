#pragma once
// Writes any loaded model (GGUF, llama2.c or Hugging Face folder) as a GGUF v3 file, optionally re-typing its weight
// matrices. Powers `peregrine convert`.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>

#include "format/model_file.h"
#include "format/quant_scheme.h"
#include "format/tensor_type.h"

namespace peregrine {

// Copies all metadata and tensors of `in` into a new GGUF at `out`. With a plain type, every
// tensor of 2+ dims (weight matrices, token_embd, output) is converted to it when its row length
// is a multiple of the type's block size, and kept as F32 otherwise; 1-D tensors (norms, biases,
// rope_freqs) are always F32. With a mix (quant_scheme.h), each quantizable tensor gets the mix's
// type for it (with llama.cpp's fallback for ragged rows), the experts' router keeps its type,
// 1-D tensors are F32. general.file_type is set to match. `progress(done, total)` is called in
// bytes after each tensor. Errors: FormatError (input/output file), UsageError.
void write_gguf_from(const ModelFile& in, const std::filesystem::path& out, std::optional<QuantScheme> scheme,
                     const std::function<void(uint64_t, uint64_t)>& progress = {});

// The same conversion in memory, for `--type` on run/serve/info: tensors that change type are
// converted into buffers the returned ModelFile owns (with the input's storage, which views of
// unchanged tensors still point into).
ModelFile retype_model(ModelFile in, QuantScheme scheme);

}  // namespace peregrine
