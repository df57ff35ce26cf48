// llama2.c checkpoint and tokenizer.bin -> ModelFile with llama.cpp `llama` metadata.
// The checkpoint is mapped and every tensor is a view into the mapping: llama2.c stores each
// weight kind for all layers contiguously, so one layer's matrix is a contiguous slice.
#include "format/llama2c.h"

#include <cctype>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "format/mapped_file.h"
#include "util/error.h"

namespace peregrine {

namespace {

constexpr size_t kHeaderBytes = 7 * sizeof(int32_t);

struct Header {
  int64_t dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len;
  bool shared_classifier;
};

// Generous limits (far above any llama2.c model) that keep every size product below 2^62.
constexpr int64_t kMaxDim = 1 << 16, kMaxHidden = 1 << 18, kMaxLayers = 1 << 10,
                  kMaxVocab = 1 << 22, kMaxSeq = 1 << 22;

Header parse_header(std::span<const std::byte> bytes, const std::string& name) {
  if (bytes.size() < kHeaderBytes)
    throw FormatError(name + ": file of " + std::to_string(bytes.size()) +
                      " bytes is too small for a llama2.c checkpoint header (28 bytes)");
  int32_t h[7];
  std::memcpy(h, bytes.data(), kHeaderBytes);
  Header hd{h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[5] > 0};
  if (hd.vocab < 0) hd.vocab = -hd.vocab;  // int64: INT32_MIN negates safely
  auto check = [&](bool ok, const std::string& what) {
    if (!ok)
      throw FormatError(name + ": not a valid llama2.c checkpoint: " + what + " (header: dim=" +
                        std::to_string(h[0]) + " hidden_dim=" + std::to_string(h[1]) +
                        " n_layers=" + std::to_string(h[2]) + " n_heads=" + std::to_string(h[3]) +
                        " n_kv_heads=" + std::to_string(h[4]) + " vocab_size=" + std::to_string(h[5]) +
                        " seq_len=" + std::to_string(h[6]) + ")");
  };
  check(hd.dim > 0 && hd.dim <= kMaxDim, "dim out of range");
  check(hd.hidden > 0 && hd.hidden <= kMaxHidden, "hidden_dim out of range");
  check(hd.n_layers > 0 && hd.n_layers <= kMaxLayers, "n_layers out of range");
  check(hd.n_heads > 0 && hd.n_heads <= hd.dim && hd.dim % hd.n_heads == 0,
        "n_heads must divide dim");
  check(hd.n_kv_heads > 0 && hd.n_kv_heads <= hd.n_heads && hd.n_heads % hd.n_kv_heads == 0,
        "n_kv_heads must divide n_heads");
  check((hd.dim / hd.n_heads) % 2 == 0, "head size must be even for RoPE");
  check(hd.vocab > 0 && hd.vocab <= kMaxVocab, "vocab_size out of range");
  check(hd.seq_len > 0 && hd.seq_len <= kMaxSeq, "seq_len out of range");
  return hd;
}

}  // namespace

bool is_gguf_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  return f.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

ModelFile read_llama2c(const std::filesystem::path& checkpoint,
                       const std::optional<std::filesystem::path>& tokenizer) {
  auto mapping = std::make_shared<MappedFile>(checkpoint);
  const std::string name = checkpoint.string();
  const std::span<const std::byte> bytes = mapping->bytes();
  const Header h = parse_header(bytes, name);
  const int64_t head_size = h.dim / h.n_heads;
  const int64_t kv_dim = h.n_kv_heads * head_size;
  const int64_t L = h.n_layers;

  // Float counts of each section, in file order.
  const int64_t n_embed = h.vocab * h.dim;
  const int64_t per_layer_floats = 2 * h.dim + 2 * h.dim * h.dim + 2 * kv_dim * h.dim + 3 * h.hidden * h.dim;
  const int64_t n_rope = 2 * h.seq_len * (head_size / 2);
  const int64_t expected_floats =
      n_embed + L * per_layer_floats + h.dim + n_rope + (h.shared_classifier ? 0 : n_embed);
  const uint64_t expected = kHeaderBytes + 4 * static_cast<uint64_t>(expected_floats);
  if (bytes.size() != expected)
    throw FormatError(name + ": llama2.c checkpoint is " + std::to_string(bytes.size()) +
                      " bytes but its header (dim=" + std::to_string(h.dim) + ", hidden_dim=" +
                      std::to_string(h.hidden) + ", n_layers=" + std::to_string(L) +
                      ", vocab_size=" + std::to_string(h.vocab) +
                      (h.shared_classifier ? ", shared classifier" : ", separate classifier") +
                      ") needs exactly " + std::to_string(expected));

  ModelFile mf;
  mf.path = name;
  mf.gguf_version = 0;
  mf.alignment = 32;
  Metadata& m = mf.meta;
  m.set("general.architecture", MetaValue::string("llama"));
  m.set("general.name", MetaValue::string(checkpoint.stem().string()));
  m.set("general.file_type", MetaValue::u32(0));  // LLAMA_FTYPE_ALL_F32
  m.set("general.alignment", MetaValue::u32(32));
  m.set("llama.context_length", MetaValue::u32(static_cast<uint32_t>(h.seq_len)));
  m.set("llama.embedding_length", MetaValue::u32(static_cast<uint32_t>(h.dim)));
  m.set("llama.feed_forward_length", MetaValue::u32(static_cast<uint32_t>(h.hidden)));
  m.set("llama.block_count", MetaValue::u32(static_cast<uint32_t>(L)));
  m.set("llama.attention.head_count", MetaValue::u32(static_cast<uint32_t>(h.n_heads)));
  m.set("llama.attention.head_count_kv", MetaValue::u32(static_cast<uint32_t>(h.n_kv_heads)));
  m.set("llama.attention.layer_norm_rms_epsilon", MetaValue::f32(1e-5f));
  m.set("llama.rope.freq_base", MetaValue::f32(10000.f));
  m.set("llama.rope.dimension_count", MetaValue::u32(static_cast<uint32_t>(head_size)));
  m.set("llama.vocab_size", MetaValue::u32(static_cast<uint32_t>(h.vocab)));

  // Walks the float sections in file order, handing out views.
  size_t cursor = kHeaderBytes;
  auto take = [&](int64_t n_floats) {
    auto s = bytes.subspan(cursor, static_cast<size_t>(n_floats) * 4);
    cursor += s.size();
    return s;
  };
  auto add = [&](std::string tname, std::vector<int64_t> shape, std::span<const std::byte> data) {
    mf.tensors.push_back({std::move(tname), TensorType::F32, std::move(shape), data});
  };
  auto per_layer = [&](int64_t floats_per_layer) {  // one section: [L][floats_per_layer]
    std::vector<std::span<const std::byte>> v;
    auto all = take(L * floats_per_layer);
    for (int64_t l = 0; l < L; ++l)
      v.push_back(all.subspan(static_cast<size_t>(l * floats_per_layer) * 4, static_cast<size_t>(floats_per_layer) * 4));
    return v;
  };
  const auto token_embd = take(n_embed);
  const auto rms_att = per_layer(h.dim);
  const auto wq = per_layer(h.dim * h.dim);
  const auto wk = per_layer(kv_dim * h.dim);
  const auto wv = per_layer(kv_dim * h.dim);
  const auto wo = per_layer(h.dim * h.dim);
  const auto rms_ffn = per_layer(h.dim);
  const auto w1 = per_layer(h.hidden * h.dim);
  const auto w2 = per_layer(h.dim * h.hidden);
  const auto w3 = per_layer(h.hidden * h.dim);
  const auto rms_final = take(h.dim);
  take(n_rope);  // legacy freq_cis_real/imag: RoPE is recomputed, these are never used
  add("token_embd.weight", {h.dim, h.vocab}, token_embd);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {h.dim}, rms_att[l]);
    add(p + "attn_q.weight", {h.dim, h.dim}, wq[l]);          // y[dim] = Wq x[dim]
    add(p + "attn_k.weight", {h.dim, kv_dim}, wk[l]);         // y[kv_dim] = Wk x[dim]
    add(p + "attn_v.weight", {h.dim, kv_dim}, wv[l]);
    add(p + "attn_output.weight", {h.dim, h.dim}, wo[l]);
    add(p + "ffn_norm.weight", {h.dim}, rms_ffn[l]);
    add(p + "ffn_gate.weight", {h.dim, h.hidden}, w1[l]);     // w1: hidden rows of dim
    add(p + "ffn_down.weight", {h.hidden, h.dim}, w2[l]);     // w2: dim rows of hidden
    add(p + "ffn_up.weight", {h.dim, h.hidden}, w3[l]);       // w3: hidden rows of dim
  }
  add("output_norm.weight", {h.dim}, rms_final);
  if (!h.shared_classifier) add("output.weight", {h.dim, h.vocab}, take(n_embed));
  mf.storage = std::move(mapping);

  if (tokenizer) add_llama2c_tokenizer(mf.meta, *tokenizer, h.vocab);
  return mf;
}

// llama2.c's exporter wrote SentencePiece pieces with "▁" turned into spaces and BOS/EOS as
// "\n<s>\n" / "\n</s>\n". They are turned back into SentencePiece form so the vocabulary looks
// exactly like a llama GGUF vocabulary to the tokenizer.
void add_llama2c_tokenizer(Metadata& meta, const std::filesystem::path& tokenizer, int64_t vocab_size) {
  const std::string name = tokenizer.string();
  MappedFile file(tokenizer);
  const std::span<const std::byte> bytes = file.bytes();
  if (vocab_size <= 0 || vocab_size > kMaxVocab)
    throw FormatError(name + ": invalid vocabulary size " + std::to_string(vocab_size));
  size_t pos = 0;
  auto fail = [&](const std::string& what) {
    throw FormatError(name + ": " + what + " (llama2.c tokenizer.bin)");
  };
  auto read_i32 = [&](const char* what) {
    if (bytes.size() - pos < 4)
      fail(std::string("truncated: ") + what + " at offset " + std::to_string(pos));
    int32_t v;
    std::memcpy(&v, bytes.data() + pos, 4);
    pos += 4;
    return v;
  };
  const int32_t max_len = read_i32("max_token_length");
  if (max_len <= 0 || max_len > (1 << 16)) fail("max_token_length " + std::to_string(max_len) + " is invalid");

  std::vector<MetaValue> tokens, scores, types;
  tokens.reserve(static_cast<size_t>(vocab_size));
  scores.reserve(static_cast<size_t>(vocab_size));
  types.reserve(static_cast<size_t>(vocab_size));
  for (int64_t id = 0; id < vocab_size; ++id) {
    if (bytes.size() - pos < 8)
      fail("holds " + std::to_string(id) + " tokens, the model's vocabulary has " + std::to_string(vocab_size));
    float score;
    std::memcpy(&score, bytes.data() + pos, 4);
    pos += 4;
    const int32_t len = read_i32("token length");
    if (len < 0 || len > max_len)
      fail("token " + std::to_string(id) + " has length " + std::to_string(len) +
           " (max_token_length " + std::to_string(max_len) + ")");
    if (static_cast<size_t>(len) > bytes.size() - pos)
      fail("token " + std::to_string(id) + " of length " + std::to_string(len) + " runs past end of file");
    std::string raw(reinterpret_cast<const char*>(bytes.data() + pos), static_cast<size_t>(len));
    pos += static_cast<size_t>(len);

    std::string text;
    if (raw == "\n<s>\n") text = "<s>";
    else if (raw == "\n</s>\n") text = "</s>";
    else
      for (char c : raw) text += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
    int32_t type = 1;  // normal
    if (text == "<unk>") type = 2;
    else if (text == "<s>" || text == "</s>") type = 3;
    else if (text.size() == 6 && text.starts_with("<0x") && text[5] == '>' &&
             std::isxdigit(static_cast<unsigned char>(text[3])) && std::isxdigit(static_cast<unsigned char>(text[4])))
      type = 6;  // byte fallback token
    tokens.push_back(MetaValue::string(std::move(text)));
    scores.push_back(MetaValue::f32(score));
    types.push_back(MetaValue::i32(type));
  }
  meta.set("tokenizer.ggml.model", MetaValue::string("llama"));
  meta.set("tokenizer.ggml.tokens", MetaValue::array(MetaType::STRING, std::move(tokens)));
  meta.set("tokenizer.ggml.scores", MetaValue::array(MetaType::F32, std::move(scores)));
  meta.set("tokenizer.ggml.token_type", MetaValue::array(MetaType::I32, std::move(types)));
  meta.set("tokenizer.ggml.bos_token_id", MetaValue::u32(1));
  meta.set("tokenizer.ggml.eos_token_id", MetaValue::u32(2));
  meta.set("tokenizer.ggml.unknown_token_id", MetaValue::u32(0));
  meta.set("tokenizer.ggml.add_bos_token", MetaValue::boolean(true));
  meta.set("tokenizer.ggml.add_eos_token", MetaValue::boolean(false));
}

}  // namespace peregrine
