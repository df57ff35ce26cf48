// Robustness: truncated and corrupted GGUF / llama2.c files either load or throw FormatError.
// Any other exception fails the test; an out-of-bounds read or a crash fails it under the
// sanitizers test_format is built with (buffers are sized exactly to the "file", so reading one
// byte past the end is caught).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>

#include "common/test_paths.h"
#include "format/convert.h"
#include "format/gguf.h"
#include "format/llama2c.h"
#include "util/error.h"

namespace peregrine {
namespace {

std::vector<uint8_t> read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

struct Outcome {
  int loaded = 0, rejected = 0;
};

// Parses `bytes` (exactly the file) and checks the result: either FormatError, or every view
// lies inside the buffer and its size matches its shape.
void parse_one(std::span<const uint8_t> bytes, Outcome& out, const std::string& what) {
  try {
    ModelFile mf = read_gguf_bytes(std::as_bytes(bytes), "corrupt.gguf");
    const auto* lo = reinterpret_cast<const std::byte*>(bytes.data());
    const auto* hi = lo + bytes.size();
    for (const auto& t : mf.tensors) {
      ASSERT_GE(t.data.data(), lo) << what;
      ASSERT_LE(t.data.data() + t.data.size(), hi) << what;
      ASSERT_EQ(t.data.size(), tensor_bytes(t.type, t.n_elements())) << what;
      ASSERT_TRUE(t.shape.size() >= 1 && t.shape.size() <= 4) << what;
    }
    ++out.loaded;
  } catch (const FormatError& e) {
    ASSERT_NE(std::string(e.what()).find("corrupt.gguf"), std::string::npos) << e.what();
    ++out.rejected;
  } catch (const std::exception& e) {
    FAIL() << what << ": threw a non-FormatError: " << e.what();
  }
}

// Offset where tensor data begins (end of header + tensor infos + padding).
size_t header_region(std::span<const uint8_t> bytes) {
  ModelFile mf = read_gguf_bytes(std::as_bytes(bytes), "good");
  size_t first = bytes.size();
  for (const auto& t : mf.tensors)
    first = std::min(first, static_cast<size_t>(t.data.data() - reinterpret_cast<const std::byte*>(bytes.data())));
  return first;
}

struct Range {
  size_t begin, end;
};

// Cuts and overwrites: every byte of the `dense` ranges with several values (and every cut
// length there), positions `stride` apart elsewhere in [0, region) with one value each, and
// `samples_beyond` random positions anywhere (tensor data included).
void cut_and_flip(const std::vector<uint8_t>& good, size_t region, std::vector<Range> dense,
                  size_t stride, size_t samples_beyond) {
  std::mt19937 rng(99);
  Outcome o;
  auto is_dense = [&](size_t pos) {
    for (const auto& r : dense)
      if (pos >= r.begin && pos < r.end) return true;
    return false;
  };
  auto next = [&](size_t pos) { return is_dense(pos + 1) ? pos + 1 : pos + stride; };
  // Truncations: each one copied into a buffer of exactly that length.
  auto cut = [&](size_t len) {
    std::unique_ptr<uint8_t[]> buf(new uint8_t[len == 0 ? 1 : len]);
    std::memcpy(buf.get(), good.data(), len);
    parse_one(std::span<const uint8_t>(buf.get(), len), o, "cut at " + std::to_string(len));
  };
  for (size_t len = 0; len < region; len = next(len)) cut(len);
  for (size_t i = 0; i < samples_beyond; ++i) cut(region + rng() % (good.size() - region));
  cut(good.size() - 1);
  EXPECT_EQ(o.loaded, 0) << "a truncated file loaded";
  // Byte overwrites, in place in one exactly-sized buffer.
  std::vector<uint8_t> buf = good;
  auto flip = [&](size_t pos, uint8_t v) {
    const uint8_t saved = buf[pos];
    buf[pos] = v;
    parse_one(buf, o, "byte " + std::to_string(pos) + " := " + std::to_string(v));
    buf[pos] = saved;
  };
  size_t k = 0;
  for (size_t pos = 0; pos < region; pos = next(pos)) {
    const uint8_t values[] = {0x00, 0xFF, 0x7F, static_cast<uint8_t>(rng()),
                              static_cast<uint8_t>(good[pos] ^ 1), static_cast<uint8_t>(good[pos] + 1)};
    if (is_dense(pos) && pos < 200) {
      for (uint8_t v : values) flip(pos, v);
    } else if (is_dense(pos)) {  // three values per byte keep the run short
      for (int j = 0; j < 3; ++j) flip(pos, values[(k++ + 2 * j) % 6]);
    } else {
      flip(pos, values[k++ % 6]);
    }
  }
  for (size_t i = 0; i < samples_beyond; ++i) flip(rng() % good.size(), static_cast<uint8_t>(rng()));
  EXPECT_GT(o.rejected, 0);
  EXPECT_GT(o.loaded, 0);  // some overwrites (e.g. in string bytes) are harmless
}

size_t find_bytes(const std::vector<uint8_t>& hay, const std::string& needle) {
  auto it = std::search(hay.begin(), hay.end(), needle.begin(), needle.end());
  return static_cast<size_t>(it - hay.begin());
}

TEST(Corruption, GgufFromStories260K) {
  const auto dir = test::scratch_dir("corrupt_stories");
  ModelFile in = read_llama2c(test::shared_file("models/stories260K/stories260K.bin"),
                              test::shared_file("models/stories260K/tok512.bin"));
  write_gguf_from(in, dir / "q8.gguf", TensorType::Q8_0);  // mixes F32 and Q8_0 tensors
  const auto good = read_bytes(dir / "q8.gguf");
  const size_t region = header_region(good);
  ASSERT_GT(region, 4000u);
  // Dense: the fixed header and first keys, the start of the token arrays, and every tensor info.
  const size_t infos = find_bytes(good, "token_embd.weight") - 8;
  ASSERT_LT(infos, region);
  const size_t tokens = find_bytes(good, "tokenizer.ggml.tokens");
  cut_and_flip(good, region, {{0, 200}, {tokens - 8, tokens + 80}, {infos, region}}, 5, 100);
}

TEST(Corruption, GgufVocabFile) {
  // 32000 tokens of metadata: each parse costs more, so positions are sampled.
  const auto good = read_bytes(test::shared_file("tokenizers/ggml-vocab-llama-spm.gguf"));
  cut_and_flip(good, 2048, {{0, 48}}, 97, 24);
}

TEST(Corruption, Llama2cCheckpointAndTokenizer) {
  const auto dir = test::scratch_dir("corrupt_llama2c");
  const auto ckpt = read_bytes(test::shared_file("models/stories260K/stories260K.bin"));
  const auto tok = read_bytes(test::shared_file("models/stories260K/tok512.bin"));
  std::mt19937 rng(5);
  auto attempt = [&](const std::vector<uint8_t>& c, const std::vector<uint8_t>& t, const std::string& what) {
    {
      std::ofstream f(dir / "m.bin", std::ios::binary);
      f.write(reinterpret_cast<const char*>(c.data()), static_cast<std::streamsize>(c.size()));
      std::ofstream g(dir / "t.bin", std::ios::binary);
      g.write(reinterpret_cast<const char*>(t.data()), static_cast<std::streamsize>(t.size()));
    }
    try {
      ModelFile mf = open_model_file(dir / "m.bin", dir / "t.bin");
      for (const auto& v : mf.tensors) ASSERT_EQ(v.data.size(), tensor_bytes(v.type, v.n_elements()));
    } catch (const FormatError&) {
    } catch (const std::exception& e) {
      FAIL() << what << ": threw a non-FormatError: " << e.what();
    }
  };
  for (size_t len : {size_t{0}, size_t{3}, size_t{27}, size_t{28}, size_t{100}, ckpt.size() / 2, ckpt.size() - 4})
    attempt(std::vector<uint8_t>(ckpt.begin(), ckpt.begin() + len), tok, "checkpoint cut " + std::to_string(len));
  for (size_t pos = 0; pos < 28; ++pos) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0xFF}, uint8_t{0x7F}, uint8_t{0x80}, static_cast<uint8_t>(rng())}) {
      auto c = ckpt;
      c[pos] = v;
      attempt(c, tok, "checkpoint byte " + std::to_string(pos));
    }
  }
  // The tokenizer on its own (no 1 MB checkpoint rewrite per attempt).
  auto tok_attempt = [&](const std::vector<uint8_t>& t, const std::string& what) {
    {
      std::ofstream g(dir / "t.bin", std::ios::binary);
      g.write(reinterpret_cast<const char*>(t.data()), static_cast<std::streamsize>(t.size()));
    }
    Metadata m;
    try {
      add_llama2c_tokenizer(m, dir / "t.bin", 512);
    } catch (const FormatError&) {
    } catch (const std::exception& e) {
      FAIL() << what << ": threw a non-FormatError: " << e.what();
    }
  };
  for (size_t len = 0; len < tok.size(); len += (len < 64 ? 1 : 31))
    tok_attempt(std::vector<uint8_t>(tok.begin(), tok.begin() + len), "tokenizer cut " + std::to_string(len));
  for (int i = 0; i < 200; ++i) {
    auto t = tok;
    t[i < 40 ? i : rng() % t.size()] = static_cast<uint8_t>(i % 3 == 0 ? 0xFF : i % 3 == 1 ? 0x80 : rng());
    tok_attempt(t, "tokenizer flip " + std::to_string(i));
  }
}

}  // namespace
}  // namespace peregrine
