#include "tokenizer/bpe.h"

#include <algorithm>
#include <array>
#include <map>
#include <queue>

#include "tokenizer/symbol_merge.h"
#include "tokenizer/utf8.h"
#include "util/error.h"
#include "util/utf8_encode.h"

namespace peregrine::tokenizer {
namespace {

// bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order.
struct ByteTables {
  std::array<std::string, 256> byte_to_utf8;
  std::map<uint32_t, uint8_t> code_point_to_byte;
  ByteTables() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const uint32_t cp = printable ? b : next++;
      append_utf8(byte_to_utf8[b], cp);
      code_point_to_byte[cp] = static_cast<uint8_t>(b);
    }
  }
};
const ByteTables& byte_tables() {
  static const ByteTables tables;
  return tables;
}

// The regexes llama.cpp uses (its "adapted" forms: (?i:...) spelled out as character classes).
constexpr const char* kLlama3Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

struct NamedSpec {
  std::vector<std::string_view> names;
  PreTokenizerSpec spec;
};

const std::vector<NamedSpec>& pre_tokenizer_table() {
  static const std::vector<NamedSpec> table = {
      {{"default"},
       {{"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2Regex, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
       {{kLlama3Regex}, true, true}},
      {{"dbrx", "smaug-bpe"}, {{kLlama3Regex}, false, false}},
      {{"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan", "kormo"},
       {{kQwen2Regex}, false, false}},
      {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "mpt",
        "olmo", "jais", "trillion", "exaone4", "mellum", "roberta-bpe", "jina-v1-en", "jina-v2-code"},
       {{kGpt2Regex}, false, false}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
       {{"\\p{N}", kGpt2Regex}, false, false}},
      {{"falcon"},
       {{"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2Regex, "[0-9][0-9][0-9]"}, false, false}},
  };
  return table;
}

struct Bigram {
  int left;
  int right;
  int rank;
  size_t size;
};

// Lowest rank first; on ties the leftmost pair.
struct BigramAfter {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

std::string byte_level_encode(std::string_view raw) {
  const auto& t = byte_tables().byte_to_utf8;
  std::string out;
  out.reserve(raw.size() * 2);
  for (char c : raw) out += t[static_cast<unsigned char>(c)];
  return out;
}

std::string byte_level_decode(std::string_view encoded) {
  const auto& map = byte_tables().code_point_to_byte;
  std::string out;
  out.reserve(encoded.size());
  size_t i = 0;
  while (i < encoded.size()) {
    const utf8::SeqCheck c = utf8::check_sequence(encoded.substr(i));
    if (c.status == utf8::SeqStatus::Valid) {
      uint32_t cp = 0;
      const auto* p = reinterpret_cast<const unsigned char*>(encoded.data() + i);
      switch (c.length) {
        case 1: cp = p[0]; break;
        case 2: cp = ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu); break;
        case 3: cp = ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu); break;
        default:
          cp = ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
      }
      if (auto it = map.find(cp); it != map.end()) {
        out += static_cast<char>(it->second);
        i += c.length;
        continue;
      }
    }
    out.append(encoded.substr(i, c.length));
    i += c.length;
  }
  return out;
}

const PreTokenizerSpec* find_pre_tokenizer(std::string_view name) {
  for (const auto& entry : pre_tokenizer_table()) {
    if (std::find(entry.names.begin(), entry.names.end(), name) != entry.names.end()) return &entry.spec;
  }
  return nullptr;
}

std::string supported_pre_tokenizers() {
  std::string out;
  for (const auto& entry : pre_tokenizer_table()) {
    for (std::string_view n : entry.names) {
      if (!out.empty()) out += ", ";
      out += n;
    }
  }
  return out;
}

namespace {
uint64_t pair_key(Id left, Id right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}
}  // namespace

BpeModel::BpeModel(const Vocab& vocab, const MetaArray& merges, const PreTokenizerSpec& spec)
    : splitter_(spec.regexes), ignore_merges_(spec.ignore_merges) {
  id_ranks_.reserve(merges.items.size());
  for (size_t i = 0; i < merges.items.size(); ++i) {
    const std::string_view merge = merges.items[i].as_string();
    // llama.cpp splits at the first space after the first character; keep the first rank seen.
    const size_t pos = merge.find(' ', 1);
    if (pos == std::string_view::npos) continue;  // cannot name a pair, so can never apply
    const int rank = static_cast<int>(std::min<size_t>(i, INT32_MAX));
    const Id left = vocab.find(merge.substr(0, pos)), right = vocab.find(merge.substr(pos + 1));
    if (left >= 0 && right >= 0) {
      id_ranks_.emplace(pair_key(left, right), rank);
    } else {
      string_ranks_.emplace(std::string(merge), rank);
    }
  }
}

int BpeModel::rank(const Vocab& vocab, std::string_view left, std::string_view right,
                   std::string& scratch) const {
  const Id l = vocab.find(left), r = vocab.find(right);
  if (l >= 0 && r >= 0) {
    const auto it = id_ranks_.find(pair_key(l, r));
    return it == id_ranks_.end() ? -1 : it->second;
  }
  if (string_ranks_.empty()) return -1;
  scratch.assign(left);
  scratch += ' ';
  scratch += right;
  const auto it = string_ranks_.find(std::string_view(scratch));
  return it == string_ranks_.end() ? -1 : it->second;
}

void BpeModel::encode(const Vocab& vocab, std::string_view text, std::vector<Id>& out) const {
  for (std::string_view piece : splitter_.split(text)) {
    encode_word(vocab, byte_level_encode(piece), out);
  }
}

void BpeModel::encode_word(const Vocab& vocab, std::string_view word, std::vector<Id>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const Id id = vocab.find(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  for (size_t offs = 0; offs < word.size();) {
    const size_t len = std::min(utf8::lead_length(static_cast<unsigned char>(word[offs])), word.size() - offs);
    const int index = static_cast<int>(symbols.size());
    offs += len;
    symbols.push_back({index - 1, offs == word.size() ? -1 : index + 1, offs - len, len});
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramAfter> queue;
  std::string scratch;
  auto add_bigram = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    const int found = rank(vocab, word.substr(l.offset, l.size), word.substr(r.offset, r.size), scratch);
    if (found >= 0) queue.push({left, right, found, l.size + r.size});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) add_bigram(i - 1, i);

  merge_best_pairs(symbols, queue, add_bigram);

  for (int i = 0; i != -1; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    const std::string_view piece = word.substr(s.offset, s.size);
    if (const Id id = vocab.find(piece); id >= 0) {
      out.push_back(id);
      continue;
    }
    // Not a token: llama.cpp falls back to the single bytes of the encoded piece that happen to
    // be tokens (and silently drops the rest).
    for (char c : piece) {
      if (const Id id = vocab.find(std::string_view(&c, 1)); id >= 0) out.push_back(id);
    }
  }
}

}  // namespace peregrine::tokenizer
