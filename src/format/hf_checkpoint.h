#pragma once
// A Hugging Face checkpoint folder -> ModelFile, as if llama.cpp's converter had turned it into
// a GGUF: config.json gives the metadata (hf_config.h), the weights come from model.safetensors
// or the shards model.safetensors.index.json names, the tokenizer from tokenizer.json and
// tokenizer_config.json (hf_tokenizer.h).
//
// Tensors get GGUF names (model.layers.N.self_attn.q_proj.weight -> blk.N.attn_q.weight, ...)
// and GGUF shapes (the reversed PyTorch shape: the same bytes). Weight matrices in F32, F16 or
// BF16 are views into the mapped files; what must change is copied into buffers the ModelFile
// owns: Q/K rows permuted for RoPE (llama), 1-D tensors (norms, biases) widened to F32 as the
// converter stores them, and any tensor whose data is not aligned to its element size.
#include <filesystem>

#include "format/model_file.h"

namespace peregrine {

// True when `path` is a directory with a config.json.
bool is_hf_checkpoint(const std::filesystem::path& path);

// Throws FormatError "FILE: <problem>" naming the file at fault.
ModelFile read_hf_checkpoint(const std::filesystem::path& dir);

// Metadata holding only the tokenizer of a folder with tokenizer.json (and, optionally,
// tokenizer_config.json) but perhaps no weights: what `peregrine tokenize DIR` needs.
Metadata read_hf_tokenizer_only(const std::filesystem::path& dir);

}  // namespace peregrine
