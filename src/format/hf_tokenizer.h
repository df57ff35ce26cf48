#pragma once
// Hugging Face tokenizer.json + tokenizer_config.json -> GGUF tokenizer metadata, the way
// llama.cpp's converter describes the same tokenizer, so the tokenizer module builds it with the
// algorithms it already has:
//   byte-level BPE (GPT-2 / Llama 3 / Qwen: Split regex + ByteLevel) -> tokenizer.ggml.model "gpt2"
//     with merges, and tokenizer.ggml.pre naming the recognised pre-tokenizer regex;
//   SentencePiece-style BPE (Llama 2 / Mistral / Gemma: "▁" for spaces, byte fallback)
//     -> "llama" with scores = -(rank of the first merge that builds the piece), which makes the
//     score-driven SentencePiece merge order the merge-rank order of the file.
// Added tokens become control (special) or user-defined tokens; tokenizer_config.json gives
// chat_template, bos/eos/unk/pad tokens and add_bos_token/add_eos_token (else the
// post-processor's template decides); a BOS or EOS it does not name (Qwen2/Qwen3: bos_token null)
// is generation_config.json's bos/eos_token_id, else config.json's, as transformers' generate()
// takes it. Anything else (WordPiece, Unigram, unknown normalizers or
// pre-tokenizers, a regex peregrine does not know) is a FormatError naming the file and the part.
//
// What GGUF has no key for is stated with peregrine's own keys (llama.cpp ignores them):
//   tokenizer.peregrine.normalizer   = "nfc"        text is NFC-normalized first (Qwen)
//   tokenizer.peregrine.space_prefix = "metaspace" | "metaspace-first"
//       Metaspace's rule: prepend "▁" unless the text already starts with a space (in every
//       fragment, or only in the fragment at the start of the input); without the key, GGUF's
//       add_space_prefix rule (always prepend) holds.
//   tokenizer.peregrine.exact_token_types = true   the token types are the file's own: no token
//       is made a control token because of its name (as llama.cpp does for "</s>", "<|im_end|>"),
//       and a BOS or EOS the metadata does not state is none (not llama.cpp's default id 11)
#include <cstdint>
#include <filesystem>

#include "format/metadata.h"

namespace peregrine {

// Adds the tokenizer of the checkpoint folder `dir` to `meta`. `model_vocab` is the number of
// rows of the model's token embedding (0 if unknown): the vocabulary is padded with unused
// "[PADn]" tokens up to it, as llama.cpp's converter does. Throws FormatError.
void add_hf_tokenizer(Metadata& meta, const std::filesystem::path& dir, int64_t model_vocab = 0);

// True when `dir` holds a tokenizer.json.
bool has_hf_tokenizer(const std::filesystem::path& dir);

}  // namespace peregrine
