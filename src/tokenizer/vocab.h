#pragma once
// The vocabulary as llama.cpp sees it after loading tokenizer.ggml.* metadata: pieces, scores,
// per-token attributes, special ids and the flags that steer encoding and decoding. Shared by
// the SPM and BPE tokenizers; built once per model and never modified afterwards.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "format/metadata.h"

namespace peregrine::tokenizer {

using Id = int32_t;

// Token attributes, as llama.cpp derives them from tokenizer.ggml.token_type (a bit set, because
// name-based fix-ups add CONTROL / RSTRIP to tokens of other types).
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrLstrip = 1u << 7,
  kAttrRstrip = 1u << 8,
};

enum class VocabKind { Spm, Bpe };

// When SPM text gets its "▁" prefix (add_space_prefix): GGUF's rule prepends it to every text
// fragment at the start or after a special token; Hugging Face's Metaspace pre-tokenizer only
// where the fragment does not already start with a space, and with prepend_scheme "first" only
// at the very start of the input (tokenizer.peregrine.space_prefix).
enum class SpacePrefix { Always, Metaspace, MetaspaceFirst };

// Hash that lets a std::string-keyed map be probed with a string_view (no temporary strings in
// the tokenizers' inner loops).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

struct Vocab {
  VocabKind kind = VocabKind::Spm;
  std::string model_name;  // tokenizer.ggml.model: "llama" | "gpt2"
  std::string pre_name;    // tokenizer.ggml.pre ("default" when absent)

  std::vector<std::string> pieces;  // [n_vocab] raw vocabulary strings
  std::vector<float> scores;        // [n_vocab] SPM merge priorities (0 when absent)
  std::vector<uint32_t> attrs;      // [n_vocab] TokenAttr bits
  StringMap<Id> piece_to_id;

  Id bos = -1, eos = -1, unk = -1, pad = -1, eot = -1, eom = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SPM: prepend " " to text; decode strips it again
  SpacePrefix space_prefix_rule = SpacePrefix::Always;
  bool nfc = false;               // NFC-normalize text first (tokenizer.peregrine.normalizer)
  bool ignore_merges = false;     // BPE (llama3): a pre-token that is itself a token is kept whole
  std::vector<uint8_t> end_of_generation;  // [n_vocab] 1 = stops generation
  std::vector<Id> special_tokens;  // control/user-defined/unknown ids, longest piece first

  int32_t n_vocab() const { return static_cast<int32_t>(pieces.size()); }
  bool valid(Id id) const { return id >= 0 && id < n_vocab(); }
  Id find(std::string_view piece) const {
    auto it = piece_to_id.find(piece);
    return it == piece_to_id.end() ? -1 : it->second;
  }
  bool has_attr(Id id, uint32_t attr) const { return (attrs[static_cast<size_t>(id)] & attr) != 0; }
};

// Reads the vocabulary part of tokenizer.ggml.*; `pre_defaults` are applied by the caller (they
// depend on the pre-tokenizer table). Throws FormatError("<source>: ...").
struct VocabDefaults {
  bool add_bos = false;
  bool ignore_merges = false;
};
Vocab load_vocab(const Metadata& meta, const std::string& source, VocabKind kind,
                 const VocabDefaults& defaults);

}  // namespace peregrine::tokenizer
