// tokenizer.json / tokenizer_config.json -> tokenizer.ggml.* metadata (see hf_tokenizer.h).
#include "format/hf_tokenizer.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/json_file.h"
#include "util/error.h"

namespace peregrine {
namespace {

using nlohmann::json;

constexpr size_t kMaxTokenizerJson = size_t{512} << 20;  // Gemma 3's is 33 MB
constexpr size_t kMaxConfigJson = size_t{64} << 20;      // Gemma 3's config is 1.1 MB
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// GGUF token types (llama.cpp's LLAMA_TOKEN_TYPE_*).
enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// The pre-tokenizer regexes of the Hugging Face files, and the llama.cpp pre-tokenizer that
// splits text the same way (peregrine's tokenizer module implements those by name).
constexpr std::string_view kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// What ByteLevel(use_regex: true) splits with.
constexpr std::string_view kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct KnownPre {
  std::string_view regex;
  bool ignore_merges;
  std::string_view gguf_name;
};
constexpr std::array<KnownPre, 4> kKnownPre = {{
    {kLlama3Regex, true, "llama-bpe"},
    {kLlama3Regex, false, "smaug-bpe"},
    {kQwen2Regex, false, "qwen2"},
    {kGpt2Regex, false, "gpt-2"},
}};

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}
  [[noreturn]] void fail(const std::string& what) const { throw FormatError(file_ + ": " + what); }

  const json& member(const json& obj, std::string_view key, const std::string& where) const {
    if (!obj.is_object() || !obj.contains(key)) fail(where + " has no '" + std::string(key) + "'");
    return obj[std::string(key)];
  }
  std::string string_member(const json& obj, std::string_view key, const std::string& where) const {
    const json& v = member(obj, key, where);
    if (!v.is_string()) fail(where + "." + std::string(key) + " is not a string");
    return v.get<std::string>();
  }
  bool bool_member(const json& obj, std::string_view key, bool fallback) const {
    if (!obj.is_object() || !obj.contains(key) || obj[std::string(key)].is_null()) return fallback;
    const json& v = obj[std::string(key)];
    if (!v.is_boolean()) fail("'" + std::string(key) + "' is not true or false");
    return v.get<bool>();
  }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

// What the normalizer and pre-tokenizer do, reduced to what the tokenizer module can express.
struct TextRules {
  bool byte_level = false;
  bool nfc = false;
  bool replace_space = false;      // " " -> "▁" (normalizer Replace, or Metaspace)
  bool prepend = false;            // normalizer Prepend("▁"): always, as GGUF's add_space_prefix
  std::string metaspace_prefix;    // "", "metaspace" or "metaspace-first"
  std::vector<std::string> regexes;
};

void read_normalizer(const Reader& r, const json& n, TextRules& rules) {
  if (n.is_null()) return;
  const std::string type = r.string_member(n, "type", "normalizer");
  if (type == "Sequence") {
    for (const json& child : r.member(n, "normalizers", "normalizer")) read_normalizer(r, child, rules);
  } else if (type == "NFC") {
    rules.nfc = true;
  } else if (type == "Prepend" && r.string_member(n, "prepend", "Prepend normalizer") == kSpace) {
    rules.prepend = true;
  } else if (type == "Replace" && n.contains("pattern") && n["pattern"].contains("String") &&
             n["pattern"]["String"] == " " && n.value("content", "") == kSpace) {
    rules.replace_space = true;
  } else {
    r.fail("normalizer " + n.dump().substr(0, 120) + " is not supported (supported: NFC, Prepend \"▁\", "
           "Replace \" \" with \"▁\", Sequence of those)");
  }
}

void read_pre_tokenizer(const Reader& r, const json& p, TextRules& rules) {
  if (p.is_null()) return;
  const std::string type = r.string_member(p, "type", "pre_tokenizer");
  const std::string behavior = p.value("behavior", "");
  if (type == "Sequence") {
    for (const json& child : r.member(p, "pretokenizers", "pre_tokenizer")) read_pre_tokenizer(r, child, rules);
  } else if (type == "Split" && p.contains("pattern") && p["pattern"].contains("Regex") &&
             behavior == "Isolated" && !r.bool_member(p, "invert", false)) {
    rules.regexes.push_back(r.string_member(p["pattern"], "Regex", "Split pattern"));
  } else if (type == "Split" && rules.replace_space && p.contains("pattern") && p["pattern"].contains("String") &&
             p["pattern"]["String"] == " ") {
    // Splitting at spaces after the normalizer turned every space into "▁" splits nothing.
  } else if (type == "ByteLevel") {
    if (r.bool_member(p, "add_prefix_space", false)) r.fail("pre_tokenizer ByteLevel with add_prefix_space is not supported");
    rules.byte_level = true;
    if (r.bool_member(p, "use_regex", true)) rules.regexes.emplace_back(kGpt2Regex);
  } else if (type == "Metaspace" && p.value("replacement", "") == kSpace && !r.bool_member(p, "split", false)) {
    rules.replace_space = true;
    const std::string scheme = p.value("prepend_scheme", r.bool_member(p, "add_prefix_space", true) ? "always" : "never");
    if (scheme == "always") rules.metaspace_prefix = "metaspace";
    else if (scheme == "first") rules.metaspace_prefix = "metaspace-first";
    else if (scheme != "never") r.fail("Metaspace prepend_scheme '" + scheme + "' is not supported");
  } else {
    r.fail("pre_tokenizer " + p.dump().substr(0, 160) + " is not supported (supported: Split with an Isolated "
           "regex, ByteLevel, Metaspace without split, Sequence of those)");
  }
}

std::string merge_text(const Reader& r, const json& m, size_t rank) {
  if (m.is_string()) return m.get<std::string>();
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    return m[0].get<std::string>() + " " + m[1].get<std::string>();
  }
  r.fail("merge " + std::to_string(rank) + " is neither \"a b\" nor [\"a\", \"b\"]");
}

struct Vocabulary {
  std::vector<std::string> pieces;
  std::vector<int32_t> types;
  std::unordered_map<std::string, int32_t> ids;
};

bool is_byte_token(std::string_view p) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return p.size() == 6 && p.starts_with("<0x") && hex(p[3]) && hex(p[4]) && p[5] == '>';
}

Vocabulary read_vocabulary(const Reader& r, const json& tok, const json& model, bool sentencepiece, int64_t model_vocab) {
  const json& vocab = r.member(model, "vocab", "model");
  if (!vocab.is_object()) r.fail("model.vocab is not an object");
  std::vector<std::optional<std::string>> slots;
  auto place = [&](const std::string& piece, const json& id_json, const std::string& what) -> int64_t {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 || id_json.get<int64_t>() >= kMaxVocab) {
      r.fail(what + " '" + piece + "' has an invalid id");
    }
    const auto id = id_json.get<int64_t>();
    if (static_cast<size_t>(id) >= slots.size()) slots.resize(static_cast<size_t>(id) + 1);
    return id;
  };
  for (const auto& [piece, id_json] : vocab.items()) {
    const int64_t id = place(piece, id_json, "token");
    if (slots[static_cast<size_t>(id)]) r.fail("tokens '" + *slots[static_cast<size_t>(id)] + "' and '" + piece + "' share id " + std::to_string(id));
    slots[static_cast<size_t>(id)] = piece;
  }
  std::unordered_map<int64_t, int32_t> added_type;
  if (tok.contains("added_tokens") && !tok["added_tokens"].is_null()) {
    for (const json& a : tok["added_tokens"]) {
      const std::string content = r.string_member(a, "content", "added token");
      for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
        if (r.bool_member(a, flag, false)) r.fail("added token '" + content + "' sets " + flag + ", which is not supported");
      }
      const int64_t id = place(content, r.member(a, "id", "added token '" + content + "'"), "added token");
      slots[static_cast<size_t>(id)] = content;  // an added token's text wins over the model's
      added_type[id] = r.bool_member(a, "special", false) ? kControl : kUserDefined;
    }
  }
  if (model_vocab > 0 && static_cast<int64_t>(slots.size()) > model_vocab) {
    r.fail("has " + std::to_string(slots.size()) + " tokens but the model's embedding has only " +
           std::to_string(model_vocab) + " rows");
  }
  if (model_vocab > 0) slots.resize(static_cast<size_t>(model_vocab));
  if (slots.empty()) r.fail("the vocabulary is empty");

  const std::optional<std::string> unk =
      model.contains("unk_token") && model["unk_token"].is_string() ? std::optional(model["unk_token"].get<std::string>()) : std::nullopt;
  Vocabulary v;
  v.pieces.reserve(slots.size());
  v.types.reserve(slots.size());
  for (size_t id = 0; id < slots.size(); ++id) {
    int32_t type = kNormal;
    std::string piece;
    if (!slots[id]) {
      piece = "[PAD" + std::to_string(id) + "]";  // a hole, as llama.cpp's converter fills it
      type = kUnused;
    } else {
      piece = *slots[id];
      if (auto it = added_type.find(static_cast<int64_t>(id)); it != added_type.end()) type = it->second;
      if (unk && piece == *unk) type = kUnknown;
      else if (sentencepiece && is_byte_token(piece) && type == kNormal) type = kByte;
    }
    if (!v.ids.emplace(piece, static_cast<int32_t>(id)).second) {
      r.fail("token '" + piece + "' appears twice (ids " + std::to_string(v.ids[piece]) + " and " + std::to_string(id) + ")");
    }
    v.pieces.push_back(std::move(piece));
    v.types.push_back(type);
  }
  return v;
}

// llama.cpp's pre-tokenizer name for the file's regexes, or a FormatError.
std::string pre_tokenizer_name(const Reader& r, const TextRules& rules, bool ignore_merges) {
  if (rules.regexes.size() == 1) {
    for (const KnownPre& k : kKnownPre) {
      if (k.regex == rules.regexes[0] && k.ignore_merges == ignore_merges) return std::string(k.gguf_name);
    }
  }
  std::string list;
  for (const auto& re : rules.regexes) list += (list.empty() ? "" : ", ") + re;
  r.fail("pre-tokenizer regex [" + list + "]" + (ignore_merges ? " with ignore_merges" : "") +
         " is not one peregrine implements (Llama 3, Qwen 2, GPT-2)");
}

void add_byte_level_model(const Reader& r, const json& model, const TextRules& rules, Metadata& meta) {
  if (rules.replace_space || rules.prepend || !rules.metaspace_prefix.empty()) {
    r.fail("mixes ByteLevel with SentencePiece-style space handling, which is not supported");
  }
  const bool ignore_merges = r.bool_member(model, "ignore_merges", false);
  meta.set("tokenizer.ggml.model", MetaValue::string("gpt2"));
  meta.set("tokenizer.ggml.pre", MetaValue::string(pre_tokenizer_name(r, rules, ignore_merges)));
  std::vector<MetaValue> merges;
  const json& list = r.member(model, "merges", "model");
  merges.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].is_array()) {
      for (const json& part : list[i]) {
        if (part.is_string() && part.get<std::string>().find(' ') != std::string::npos) {
          r.fail("merge " + std::to_string(i) + " holds a space, which GGUF merges cannot express");
        }
      }
    }
    merges.push_back(MetaValue::string(merge_text(r, list[i], i)));
  }
  meta.set("tokenizer.ggml.merges", MetaValue::array(MetaType::STRING, std::move(merges)));
}

void add_sentencepiece_model(const Reader& r, const json& model, const TextRules& rules, const Vocabulary& v,
                             Metadata& meta) {
  if (!rules.replace_space) {
    r.fail("is neither byte-level (ByteLevel pre-tokenizer) nor SentencePiece-style (spaces as \"▁\")");
  }
  if (!rules.regexes.empty()) r.fail("a SentencePiece-style tokenizer with a Split regex is not supported");
  if (r.bool_member(model, "ignore_merges", false)) r.fail("ignore_merges on a SentencePiece-style tokenizer is not supported");
  // score(piece) = -(rank of the first merge producing it): the highest-scoring merge is the
  // lowest-ranked one. Pieces no merge produces keep a score below every merge.
  const json& list = r.member(model, "merges", "model");
  std::vector<float> scores(v.pieces.size(), -static_cast<float>(list.size() + 1));
  std::vector<uint8_t> scored(v.pieces.size(), 0);
  for (size_t i = 0; i < list.size(); ++i) {
    std::string text = merge_text(r, list[i], i);
    std::string joined;
    if (list[i].is_array()) {
      joined = list[i][0].get<std::string>() + list[i][1].get<std::string>();
    } else {
      const size_t space = text.find(' ', 1);
      if (space == std::string::npos) r.fail("merge " + std::to_string(i) + " '" + text + "' has no space");
      joined = text.substr(0, space) + text.substr(space + 1);
    }
    const auto it = v.ids.find(joined);
    if (it == v.ids.end()) continue;  // cannot apply: the merged piece is not a token
    if (!scored[static_cast<size_t>(it->second)]) {
      scored[static_cast<size_t>(it->second)] = 1;
      scores[static_cast<size_t>(it->second)] = -static_cast<float>(i);
    }
  }
  meta.set("tokenizer.ggml.model", MetaValue::string("llama"));
  meta.set("tokenizer.ggml.pre", MetaValue::string("default"));
  meta.set("tokenizer.ggml.scores", MetaValue::f32_array(scores));
  const bool space_prefix = rules.prepend || !rules.metaspace_prefix.empty();
  meta.set("tokenizer.ggml.add_space_prefix", MetaValue::boolean(space_prefix));
  if (!rules.metaspace_prefix.empty()) {
    meta.set("tokenizer.peregrine.space_prefix", MetaValue::string(rules.metaspace_prefix));
  }
}

// "<s>" or {"content": "<s>", ...} or null.
std::optional<std::string> token_text(const Reader& r, const json& cfg, std::string_view key) {
  if (!cfg.contains(key) || cfg[std::string(key)].is_null()) return std::nullopt;
  const json& v = cfg[std::string(key)];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  r.fail("'" + std::string(key) + "' is neither a string nor {\"content\": ...}");
}

// The post-processor's template for one sequence: a special token before it (BOS) / after it (EOS).
struct Template {
  std::optional<std::string> before, after;
};
Template post_template(const Reader& r, const json& post) {
  Template t;
  if (post.is_null()) return t;
  const std::string type = r.string_member(post, "type", "post_processor");
  if (type == "Sequence") {
    for (const json& p : r.member(post, "processors", "post_processor")) {
      Template inner = post_template(r, p);
      if (inner.before) t.before = inner.before;
      if (inner.after) t.after = inner.after;
    }
  } else if (type == "TemplateProcessing") {
    const json& single = r.member(post, "single", "TemplateProcessing");
    for (size_t i = 0; i < single.size(); ++i) {
      if (!single[i].contains("SpecialToken")) continue;
      const std::string id = r.string_member(single[i]["SpecialToken"], "id", "SpecialToken");
      if (i == 0) t.before = id;
      else if (i + 1 == single.size()) t.after = id;
      else r.fail("post_processor puts a special token inside the sequence, which is not supported");
    }
  } else if (type != "ByteLevel") {
    r.fail("post_processor '" + type + "' is not supported (supported: TemplateProcessing, ByteLevel)");
  }
  return t;
}

struct ModelTokenId {
  int64_t id;
  std::filesystem::path file;  // the file that gave it
};

// `key` ("bos_token_id") from generation_config.json, else config.json: what transformers'
// generate() falls back to when the tokenizer names no such token (Qwen2 and Qwen3 set bos_token
// null there). A list (several EOS ids) gives its first. nullopt when neither file says.
std::optional<ModelTokenId> model_token_id(const std::filesystem::path& dir, const std::string& key) {
  for (const char* file : {"generation_config.json", "config.json"}) {
    const auto path = dir / file;
    if (!std::filesystem::is_regular_file(path)) continue;
    const json j = read_json_file(path, kMaxConfigJson);
    if (!j.is_object() || !j.contains(key)) continue;
    const json& v = j[key];
    if (v.is_number_integer()) return ModelTokenId{v.get<int64_t>(), path};
    if (v.is_array() && !v.empty() && v[0].is_number_integer()) return ModelTokenId{v[0].get<int64_t>(), path};
  }
  return std::nullopt;
}

// Sets `tokenizer.ggml.<what>_id` to the id of the token `text` names, else to the id the model's
// configuration gives (which must be in the vocabulary). False when neither names one.
bool set_special_id(const Reader& cfg_reader, const std::filesystem::path& dir, const Vocabulary& v,
                    const std::string& text, const std::string& what, Metadata& meta) {
  const std::string key = "tokenizer.ggml." + what + "_id";
  if (!text.empty()) {
    const auto it = v.ids.find(text);
    if (it == v.ids.end()) cfg_reader.fail(what + " '" + text + "' is not in the vocabulary");
    meta.set(key, MetaValue::u32(static_cast<uint32_t>(it->second)));
    return true;
  }
  const std::optional<ModelTokenId> given = model_token_id(dir, what + "_id");
  if (!given) return false;
  if (given->id < 0 || given->id >= static_cast<int64_t>(v.pieces.size())) {
    throw FormatError(given->file.string() + ": " + what + "_id " + std::to_string(given->id) +
                      " is not in the vocabulary of " + std::to_string(v.pieces.size()) + " tokens");
  }
  meta.set(key, MetaValue::u32(static_cast<uint32_t>(given->id)));
  return true;
}

void add_special_tokens(const Reader& cfg_reader, const json& cfg, const Template& post, const Vocabulary& v,
                        const std::filesystem::path& dir, Metadata& meta) {
  auto id_of = [&](const std::string& text, std::string_view what) -> uint32_t {
    const auto it = v.ids.find(text);
    if (it == v.ids.end()) cfg_reader.fail(std::string(what) + " '" + text + "' is not in the vocabulary");
    return static_cast<uint32_t>(it->second);
  };
  const auto bos = token_text(cfg_reader, cfg, "bos_token").value_or(post.before.value_or(""));
  const auto eos = token_text(cfg_reader, cfg, "eos_token").value_or(post.after.value_or(""));
  const bool has_bos = set_special_id(cfg_reader, dir, v, bos, "bos_token", meta);
  set_special_id(cfg_reader, dir, v, eos, "eos_token", meta);
  if (auto unk = token_text(cfg_reader, cfg, "unk_token")) {
    meta.set("tokenizer.ggml.unknown_token_id", MetaValue::u32(id_of(*unk, "unk_token")));
  }
  if (auto pad = token_text(cfg_reader, cfg, "pad_token")) {
    meta.set("tokenizer.ggml.padding_token_id", MetaValue::u32(id_of(*pad, "pad_token")));
  }
  // add_bos_token/add_eos_token when the config says so, else what the post-processor adds.
  const bool add_bos = cfg_reader.bool_member(cfg, "add_bos_token", post.before.has_value());
  const bool add_eos = cfg_reader.bool_member(cfg, "add_eos_token", post.after.has_value());
  if (add_bos && !has_bos) cfg_reader.fail("add_bos_token is true but there is no bos_token");
  if (add_eos && eos.empty()) cfg_reader.fail("add_eos_token is true but there is no eos_token");
  if (add_bos && post.before && *post.before != bos) cfg_reader.fail("bos_token differs from the post-processor's");
  meta.set("tokenizer.ggml.add_bos_token", MetaValue::boolean(add_bos));
  meta.set("tokenizer.ggml.add_eos_token", MetaValue::boolean(add_eos));
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(path.string() + ": cannot open");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void add_chat_templates(const Reader& r, const json& cfg, const std::filesystem::path& dir, Metadata& meta) {
  if (cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
    const json& t = cfg["chat_template"];
    if (t.is_string()) {
      meta.set("tokenizer.chat_template", MetaValue::string(t.get<std::string>()));
      return;
    }
    if (!t.is_array()) r.fail("chat_template is neither a string nor a list of {name, template}");
    for (const json& named : t) {  // llama.cpp's keys for named templates
      const std::string name = r.string_member(named, "name", "chat_template entry");
      const std::string text = r.string_member(named, "template", "chat_template entry");
      meta.set(name == "default" ? "tokenizer.chat_template" : "tokenizer.chat_template." + name, MetaValue::string(text));
    }
    return;
  }
  // Newer transformers save the template beside the config instead.
  const auto jinja = dir / "chat_template.jinja";
  if (std::filesystem::is_regular_file(jinja)) {
    if (std::filesystem::file_size(jinja) > kMaxConfigJson) throw FormatError(jinja.string() + ": file is too large");
    meta.set("tokenizer.chat_template", MetaValue::string(read_text_file(jinja)));
  }
}

void add_tokenizer_files(Metadata& meta, const std::filesystem::path& dir, int64_t model_vocab) {
  const auto tok_path = dir / "tokenizer.json";
  if (!std::filesystem::is_regular_file(tok_path)) {
    throw FormatError(dir.string() + ": no tokenizer.json (a Hugging Face checkpoint needs one)");
  }
  const Reader r(tok_path.string());
  const json tok = read_json_file(tok_path, kMaxTokenizerJson);
  if (!tok.is_object()) r.fail("is not a JSON object");
  const json& model = r.member(tok, "model", "tokenizer.json");
  const std::string type = model.value("type", "");
  if (type != "BPE") {
    r.fail("tokenizer model type '" + (type.empty() ? std::string("(none)") : type) +
           "' is not supported (supported: BPE, byte-level or SentencePiece-style)");
  }
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"] != 0) {
    r.fail("BPE dropout is not supported");
  }
  TextRules rules;
  read_normalizer(r, tok.contains("normalizer") ? tok["normalizer"] : json(), rules);
  read_pre_tokenizer(r, tok.contains("pre_tokenizer") ? tok["pre_tokenizer"] : json(), rules);

  const Vocabulary v = read_vocabulary(r, tok, model, !rules.byte_level, model_vocab);
  if (rules.byte_level) add_byte_level_model(r, model, rules, meta);
  else add_sentencepiece_model(r, model, rules, v, meta);
  if (rules.nfc) meta.set("tokenizer.peregrine.normalizer", MetaValue::string("nfc"));
  meta.set("tokenizer.ggml.tokens", MetaValue::string_array(v.pieces));
  meta.set("tokenizer.ggml.token_type", MetaValue::i32_array(v.types));
  meta.set("tokenizer.peregrine.exact_token_types", MetaValue::boolean(true));

  const Template post = post_template(r, tok.contains("post_processor") ? tok["post_processor"] : json());
  const auto cfg_path = dir / "tokenizer_config.json";
  const Reader cr(cfg_path.string());
  json cfg = json::object();
  if (std::filesystem::is_regular_file(cfg_path)) {
    cfg = read_json_file(cfg_path, kMaxConfigJson);
    if (!cfg.is_object()) cr.fail("is not a JSON object");
  }
  add_special_tokens(cr, cfg, post, v, dir, meta);
  add_chat_templates(cr, cfg, dir, meta);
}

}  // namespace

bool has_hf_tokenizer(const std::filesystem::path& dir) {
  return std::filesystem::is_regular_file(dir / "tokenizer.json");
}

void add_hf_tokenizer(Metadata& meta, const std::filesystem::path& dir, int64_t model_vocab) {
  try {
    add_tokenizer_files(meta, dir, model_vocab);
  } catch (const nlohmann::json::exception& e) {
    // A field of an unexpected JSON type that no check above caught: still one clear line.
    throw FormatError(dir.string() + ": tokenizer.json or tokenizer_config.json has an unexpected structure: " + e.what());
  }
}

}  // namespace peregrine
