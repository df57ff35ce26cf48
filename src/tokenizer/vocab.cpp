#include "tokenizer/vocab.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "util/error.h"

namespace peregrine::tokenizer {
namespace {

// GGUF token types (llama.cpp's LLAMA_TOKEN_TYPE_*).
uint32_t attr_from_token_type(int64_t type) {
  switch (type) {
    case 1: return kAttrNormal;
    case 2: return kAttrUnknown;
    case 3: return kAttrControl;
    case 4: return kAttrUserDefined;
    case 5: return kAttrUnused;
    case 6: return kAttrByte;
    default: return kAttrUndefined;
  }
}

// An array-valued key with elements of type `want` (or any numeric type when `numeric`), or null.
const MetaArray* typed_array(const Metadata& meta, std::string_view key, bool numeric,
                             MetaType want) {
  const MetaValue* v = meta.find(key);
  if (!v) return nullptr;
  if (v->type != MetaType::ARRAY) {
    throw FormatError("metadata key '" + std::string(key) + "' is not an array");
  }
  const MetaArray& arr = v->as_array();
  const bool ok = numeric ? (arr.elem_type != MetaType::STRING && arr.elem_type != MetaType::ARRAY &&
                             arr.elem_type != MetaType::BOOL)
                          : arr.elem_type == want;
  if (!ok) {
    throw FormatError("metadata key '" + std::string(key) + "' is an array of " +
                      std::string(meta_type_name(arr.elem_type)) + ", expected " +
                      (numeric ? std::string("numbers") : std::string(meta_type_name(want))));
  }
  return &arr;
}

// Tokens whose text marks them as ending a turn, although converters often forget to say so
// (llama.cpp's list; see its issue #9606).
constexpr std::array<std::string_view, 11> kEotTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "<end_of_utterance>"};
constexpr std::array<std::string_view, 21> kEogTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"};

bool contains(std::span<const std::string_view> list, std::string_view s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

Id read_special_id(const Metadata& meta, std::string_view key, Id fallback, int32_t n_vocab) {
  // A default that does not fit the vocabulary is dropped (llama.cpp does the same); an id the
  // file states explicitly must fit.
  if (fallback >= n_vocab) fallback = -1;
  const auto v = meta.get_int_opt(key);
  if (!v) return fallback;
  if (*v < 0 || *v >= n_vocab) {
    throw FormatError("metadata '" + std::string(key) + "' = " + std::to_string(*v) +
                      " is out of range for a vocabulary of " + std::to_string(n_vocab) + " tokens");
  }
  return static_cast<Id>(*v);
}

void load_pieces(const Metadata& meta, Vocab& v) {
  const MetaArray* tokens = typed_array(meta, "tokenizer.ggml.tokens", false, MetaType::STRING);
  if (!tokens) throw FormatError("missing metadata key 'tokenizer.ggml.tokens' (no vocabulary)");
  const size_t n = tokens->items.size();
  if (n == 0) throw FormatError("'tokenizer.ggml.tokens' is empty");
  if (n > static_cast<size_t>(INT32_MAX / 2)) throw FormatError("'tokenizer.ggml.tokens' is too large");

  const MetaArray* scores = typed_array(meta, "tokenizer.ggml.scores", true, MetaType::F32);
  if (scores && scores->items.size() != n) {
    throw FormatError("'tokenizer.ggml.scores' has " + std::to_string(scores->items.size()) +
                      " entries but the vocabulary has " + std::to_string(n) + " tokens");
  }
  const MetaArray* types = typed_array(meta, "tokenizer.ggml.token_type", true, MetaType::I32);
  if (types && types->items.size() != n) {
    throw FormatError("'tokenizer.ggml.token_type' has " + std::to_string(types->items.size()) +
                      " entries but the vocabulary has " + std::to_string(n) + " tokens");
  }

  v.pieces.resize(n);
  v.scores.assign(n, 0.0f);
  v.attrs.assign(n, kAttrNormal);
  v.piece_to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::string piece = tokens->items[i].as_string();
    if (piece.empty()) piece = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp names them
    const auto [it, inserted] = v.piece_to_id.emplace(piece, static_cast<Id>(i));
    if (!inserted) {
      throw FormatError("duplicate token in vocabulary: '" + piece + "' has ids " +
                        std::to_string(it->second) + " and " + std::to_string(i));
    }
    v.pieces[i] = std::move(piece);
    if (scores) v.scores[i] = static_cast<float>(scores->items[i].as_float());
    if (types) v.attrs[i] = attr_from_token_type(types->items[i].as_int());
  }
}

// llama.cpp's end-of-generation set: EOS/EOT/EOM plus tokens recognised by their text; such
// tokens are forced to be control tokens so they never render as text.
void find_end_of_generation(const Metadata& meta, Vocab& v) {
  const int32_t n = v.n_vocab();
  v.eot = read_special_id(meta, "tokenizer.ggml.eot_token_id", -1, n);
  v.eom = read_special_id(meta, "tokenizer.ggml.eom_token_id", -1, n);
  v.end_of_generation.assign(static_cast<size_t>(n), 0);
  // Token types from a Hugging Face file list every special token: a normal token named like
  // one ("</s>" in Qwen's vocabulary) stays normal text there.
  const bool exact_types = meta.get_bool_opt("tokenizer.peregrine.exact_token_types").value_or(false);
  for (Id id = 0; id < n; ++id) {
    if (exact_types && !v.has_attr(id, kAttrControl | kAttrUserDefined)) continue;
    const std::string& p = v.pieces[static_cast<size_t>(id)];
    bool eog = false;
    if (v.eot < 0 && contains(kEotTexts, p)) {
      v.eot = id;
      eog = true;
    }
    if (v.eom < 0 && p == "<|eom_id|>") {
      v.eom = id;
      eog = true;
    }
    if (contains(kEogTexts, p)) eog = true;
    if (eog) {
      v.end_of_generation[static_cast<size_t>(id)] = 1;
      v.attrs[static_cast<size_t>(id)] |= kAttrControl;
    }
  }
  for (Id id : {v.eos, v.eot, v.eom}) {
    if (id >= 0) v.end_of_generation[static_cast<size_t>(id)] = 1;
  }
}

// peregrine's keys for what Hugging Face tokenizers do and GGUF cannot say (format/hf_tokenizer.h).
void read_text_rules(const Metadata& meta, Vocab& v) {
  if (const auto n = meta.get_string_opt("tokenizer.peregrine.normalizer")) {
    if (*n != "nfc") throw FormatError("unsupported tokenizer.peregrine.normalizer '" + *n + "' (supported: nfc)");
    v.nfc = true;
  }
  if (const auto rule = meta.get_string_opt("tokenizer.peregrine.space_prefix")) {
    if (*rule == "metaspace") {
      v.space_prefix_rule = SpacePrefix::Metaspace;
    } else if (*rule == "metaspace-first") {
      v.space_prefix_rule = SpacePrefix::MetaspaceFirst;
    } else {
      throw FormatError("unsupported tokenizer.peregrine.space_prefix '" + *rule +
                        "' (supported: metaspace, metaspace-first)");
    }
  }
}

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Vocab load_vocab(const Metadata& meta, const std::string& source, VocabKind kind,
                 const VocabDefaults& defaults) {
  try {
    Vocab v;
    v.kind = kind;
    v.model_name = meta.get_string("tokenizer.ggml.model");
    v.pre_name = meta.get_string_opt("tokenizer.ggml.pre").value_or("default");
    load_pieces(meta, v);
    const int32_t n = v.n_vocab();

    // Per-kind defaults exactly as llama.cpp sets them before reading the file's overrides.
    Id def_bos = -1, def_eos = -1, def_unk = -1;
    if (kind == VocabKind::Spm) {
      def_bos = 1, def_eos = 2, def_unk = 0;
      v.add_bos = true;
      v.add_space_prefix = true;
    } else {
      def_bos = 11, def_eos = 11;
      v.add_bos = defaults.add_bos;
      v.ignore_merges = defaults.ignore_merges;
    }
    // A Hugging Face folder's tokenizer states every special token it has (hf_tokenizer.h): no
    // default stands in for a BOS or EOS it lacks (",", id 11, is no one's BOS).
    if (meta.get_bool_opt("tokenizer.peregrine.exact_token_types").value_or(false)) def_bos = def_eos = -1;
    v.add_space_prefix = meta.get_bool_opt("tokenizer.ggml.add_space_prefix").value_or(v.add_space_prefix);
    read_text_rules(meta, v);
    v.bos = read_special_id(meta, "tokenizer.ggml.bos_token_id", def_bos, n);
    v.eos = read_special_id(meta, "tokenizer.ggml.eos_token_id", def_eos, n);
    v.unk = read_special_id(meta, "tokenizer.ggml.unknown_token_id", def_unk, n);
    v.pad = read_special_id(meta, "tokenizer.ggml.padding_token_id", -1, n);
    v.add_bos = meta.get_bool_opt("tokenizer.ggml.add_bos_token").value_or(v.add_bos);
    v.add_eos = meta.get_bool_opt("tokenizer.ggml.add_eos_token").value_or(v.add_eos);
    if (v.add_bos && v.bos < 0) {
      throw FormatError("tokenizer.ggml.add_bos_token is true, but there is no BOS token");
    }
    if (v.add_eos && v.eos < 0) {
      throw FormatError("tokenizer.ggml.add_eos_token is true, but there is no EOS token");
    }

    find_end_of_generation(meta, v);

    for (Id id = 0; id < n; ++id) {
      if (v.has_attr(id, kAttrControl | kAttrUserDefined | kAttrUnknown)) v.special_tokens.push_back(id);
    }
    std::stable_sort(v.special_tokens.begin(), v.special_tokens.end(), [&](Id a, Id b) {
      return v.pieces[static_cast<size_t>(a)].size() > v.pieces[static_cast<size_t>(b)].size();
    });

    // Phi-3's chat tokens swallow the whitespace after them (llama.cpp keys this on the name).
    const std::string name = lowercase(meta.get_string_opt("general.name").value_or(""));
    if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
      for (Id id : v.special_tokens) v.attrs[static_cast<size_t>(id)] |= kAttrRstrip;
      auto set_rstrip = [&](std::string_view piece, bool on) {
        const Id id = v.find(piece);
        if (id < 0) return;
        auto& a = v.attrs[static_cast<size_t>(id)];
        a = on ? (a | kAttrRstrip) : (a & ~kAttrRstrip);
      };
      set_rstrip("</s>", true);
      for (std::string_view p : {"<unk>", "<s>", "<|endoftext|>"}) set_rstrip(p, false);
    }
    return v;
  } catch (const FormatError& e) {
    throw FormatError(source + ": " + e.what());
  }
}

}  // namespace peregrine::tokenizer
