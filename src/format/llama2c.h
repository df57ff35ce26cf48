#pragma once
// llama2.c files: the legacy float32 checkpoint (`run.c`'s format) and its tokenizer.bin.
//
// Checkpoint: 7 x int32 header {dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
// seq_len}; vocab_size < 0 means the classifier is stored separately (not shared with the
// embedding) and its magnitude is the vocabulary size. Then float32 tensors: token_embedding
// (vocab, dim), rms_att (L, dim), wq (L, dim, dim), wk (L, kv_dim, dim), wv (L, kv_dim, dim),
// wo (L, dim, dim), rms_ffn (L, dim), w1 (L, hidden, dim), w2 (L, dim, hidden), w3 (L, hidden, dim),
// rms_final (dim), freq_cis_real/imag (seq_len, head_size/2; unused), [wcls (vocab, dim)].
// RoPE there rotates adjacent pairs, which is llama.cpp's `llama` convention, so the weights map
// onto GGUF tensors with no permutation.
//
// tokenizer.bin: int32 max_token_length; per token: float32 score, int32 length, bytes.
#include <filesystem>
#include <optional>

#include "format/model_file.h"

namespace peregrine {

// Maps the checkpoint and returns it as a ModelFile with `llama`-architecture GGUF metadata and
// GGUF tensor names (token_embd.weight, blk.N.attn_q.weight, ..., output.weight when separate).
// If `tokenizer` is given its vocabulary is added as tokenizer.ggml.* metadata (model "llama",
// scores, token types: <unk> unknown, <s>/</s> control, <0xNN> byte, others normal).
ModelFile read_llama2c(const std::filesystem::path& checkpoint,
                       const std::optional<std::filesystem::path>& tokenizer);

// Adds tokenizer.ggml.* metadata for a llama2.c tokenizer.bin to `meta`.
// `vocab_size` is the model's vocabulary size (the file must hold at least that many tokens).
void add_llama2c_tokenizer(Metadata& meta, const std::filesystem::path& tokenizer, int64_t vocab_size);

// True if the file starts with the GGUF magic.
bool is_gguf_file(const std::filesystem::path& path);

}  // namespace peregrine
