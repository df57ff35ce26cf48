// GGUF writer -> reader round trips and targeted malformed-file checks.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>

#include "common/test_paths.h"
#include "format/gguf.h"
#include "util/error.h"

namespace peregrine {
namespace {


Metadata every_type_metadata() {
  Metadata m;
  m.set("general.architecture", MetaValue::string("llama"));
  m.set("t.u8", {MetaType::U8, uint64_t{200}});
  m.set("t.i8", {MetaType::I8, int64_t{-100}});
  m.set("t.u16", {MetaType::U16, uint64_t{60000}});
  m.set("t.i16", {MetaType::I16, int64_t{-30000}});
  m.set("t.u32", MetaValue::u32(4000000000u));
  m.set("t.i32", MetaValue::i32(-2000000000));
  m.set("t.f32", MetaValue::f32(0.1f));
  m.set("t.bool", MetaValue::boolean(true));
  m.set("t.string", MetaValue::string("h\xc3\xa9llo\n\0x"));
  m.set("t.u64", MetaValue::u64(0xFFFFFFFFFFFFFFFFull));
  m.set("t.i64", {MetaType::I64, int64_t{-1234567890123LL}});
  m.set("t.f64", {MetaType::F64, 0.1});
  const float fs[] = {1.5f, -2.f};
  m.set("t.f32_array", MetaValue::f32_array(fs));
  const std::string ss[] = {"a", "", "ccc"};
  m.set("t.string_array", MetaValue::string_array(ss));
  const int32_t is[] = {1, -1, 7};
  std::vector<MetaValue> nested = {MetaValue::i32_array(is), MetaValue::array(MetaType::I32, {}),
                                   MetaValue::i32_array(std::span(is, 1))};
  m.set("t.nested", MetaValue::array(MetaType::ARRAY, nested));
  m.set("t.empty", MetaValue::array(MetaType::STRING, {}));
  return m;
}

void expect_same_value(const MetaValue& a, const MetaValue& b, const std::string& key) {
  ASSERT_EQ(a.type, b.type) << key;
  if (a.type == MetaType::ARRAY) {
    const auto& x = a.as_array();
    const auto& y = b.as_array();
    ASSERT_EQ(x.elem_type, y.elem_type) << key;
    ASSERT_EQ(x.items.size(), y.items.size()) << key;
    for (size_t i = 0; i < x.items.size(); ++i) expect_same_value(x.items[i], y.items[i], key);
    return;
  }
  if (a.type == MetaType::F32) {
    EXPECT_EQ(static_cast<float>(a.as_float()), static_cast<float>(b.as_float())) << key;
    return;
  }
  EXPECT_TRUE(a.value == b.value) << key;
}

struct TestTensor {
  std::string name;
  TensorType type;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};

std::vector<TestTensor> random_tensors() {
  std::mt19937 rng(7);
  std::vector<TestTensor> ts;
  auto add = [&](std::string name, TensorType t, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> x(n);
    std::normal_distribution<float> dist(0.f, 1.f);
    for (auto& v : x) v = dist(rng);
    std::vector<std::byte> b(tensor_bytes(t, n));
    quantize_row(t, x.data(), b.data(), n);
    ts.push_back({std::move(name), t, std::move(shape), std::move(b)});
  };
  add("a.f32", TensorType::F32, {5});
  add("b.f16", TensorType::F16, {3, 7});
  add("c.bf16", TensorType::BF16, {9, 2, 1});
  add("d.q8_0", TensorType::Q8_0, {64, 3});
  add("e.q4_0", TensorType::Q4_0, {32, 5, 1, 2});
  add("f.q4_k", TensorType::Q4_K, {256, 2});
  add("g.q6_k", TensorType::Q6_K, {512, 1});
  return ts;
}

TEST(Gguf, WriterReaderRoundTrip) {
  const auto dir = test::scratch_dir("gguf_roundtrip");
  const auto tensors = random_tensors();
  for (size_t alignment : {size_t{32}, size_t{64}, size_t{1}, size_t{4096}}) {
    Metadata meta = every_type_metadata();
    GgufWriter w(meta, alignment);
    for (const auto& t : tensors) w.add_tensor_bytes(t.name, t.type, t.shape, t.bytes);
    std::vector<std::pair<uint64_t, uint64_t>> progress;
    const auto path = dir / ("a" + std::to_string(alignment) + ".gguf");
    w.write(path, [&](uint64_t d, uint64_t t) { progress.emplace_back(d, t); });
    ASSERT_EQ(progress.size(), tensors.size());
    EXPECT_EQ(progress.back().first, progress.back().second);

    ModelFile mf = read_gguf(path);
    EXPECT_EQ(mf.gguf_version, 3u);
    EXPECT_EQ(mf.alignment, alignment);
    const size_t extra = alignment != 32 ? 1 : 0;  // general.alignment was added
    ASSERT_EQ(mf.meta.size(), meta.size() + extra);
    for (const auto& [k, v] : meta.entries()) {
      const MetaValue* got = mf.meta.find(k);
      ASSERT_NE(got, nullptr) << k;
      expect_same_value(v, *got, k);
    }
    EXPECT_EQ(mf.meta.get_string("t.string"), std::string("h\xc3\xa9llo\n\0x"));
    EXPECT_EQ(mf.meta.get_int("t.i8"), -100);
    EXPECT_THROW(mf.meta.get_int("t.u64"), FormatError);  // out of int64 range
    EXPECT_EQ(mf.meta.find("t.nested")->as_array().items[0].as_array().items[1].as_int(), -1);
    ASSERT_EQ(mf.tensors.size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& v = mf.tensors[i];
      EXPECT_EQ(v.name, tensors[i].name);
      EXPECT_EQ(v.type, tensors[i].type);
      EXPECT_EQ(v.shape, tensors[i].shape);
      ASSERT_EQ(v.data.size(), tensors[i].bytes.size());
      EXPECT_EQ(std::memcmp(v.data.data(), tensors[i].bytes.data(), v.data.size()), 0) << v.name;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data.data()) % std::min<size_t>(alignment, 4096), 0u);
    }
    // Rows dequantize through the view.
    const TensorView& q = mf.require("d.q8_0");
    std::vector<float> row(64), ref(64);
    q.dequantize_row_to(2, row);
    dequantize_row(TensorType::Q8_0, tensors[3].bytes.data() + 2 * 68, ref.data(), 64);
    EXPECT_EQ(row, ref);
    EXPECT_THROW(mf.require("nope"), FormatError);

    // Re-writing what was read gives the same bytes.
    GgufWriter w2(mf.meta, mf.alignment);
    for (const auto& t : mf.tensors) w2.add_tensor_bytes(t.name, t.type, t.shape, t.data);
    const auto path2 = dir / ("b" + std::to_string(alignment) + ".gguf");
    w2.write(path2);
    EXPECT_EQ(test::file_bytes(path), test::file_bytes(path2)) << "alignment " << alignment;
    // And from memory.
    const auto bytes = test::file_bytes(path);
    ModelFile mem = read_gguf_bytes(bytes, "mem");
    EXPECT_EQ(mem.tensors.size(), tensors.size());
  }
}

TEST(Gguf, WriterRejectsBadInput) {
  GgufWriter w(Metadata{});
  EXPECT_THROW(w.add_tensor("x", TensorType::Q8_0, {33}, [](std::span<std::byte>) {}), UsageError);
  EXPECT_THROW(w.add_tensor("x", TensorType::F32, {}, [](std::span<std::byte>) {}), UsageError);
  EXPECT_THROW(w.add_tensor("x", TensorType::F32, {1, 0}, [](std::span<std::byte>) {}), UsageError);
  std::vector<std::byte> b(8);
  EXPECT_THROW(w.add_tensor_bytes("x", TensorType::F32, {3}, b), UsageError);
  w.add_tensor_bytes("x", TensorType::F32, {2}, b);
  EXPECT_THROW(w.add_tensor_bytes("x", TensorType::F32, {2}, b), UsageError);
  EXPECT_THROW(GgufWriter(Metadata{}, 24), UsageError);
}

// A small valid file, built by hand, for targeted corruption.
struct Builder {
  std::vector<uint8_t> b;
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
};

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    read_gguf_bytes(std::as_bytes(std::span(bytes)), "bad.gguf");
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

std::vector<uint8_t> one_tensor_file(uint32_t version, uint32_t n_dims, std::vector<uint64_t> dims,
                                     uint32_t type, uint64_t offset, size_t data_bytes) {
  Builder f;
  f.put<uint32_t>(0x46554747);
  f.put<uint32_t>(version);
  f.put<uint64_t>(1);
  f.put<uint64_t>(1);
  f.str("general.name");
  f.put<uint32_t>(8);
  f.str("x");
  f.str("blk.0.attn_q.weight");
  f.put<uint32_t>(n_dims);
  for (auto d : dims) f.put<uint64_t>(d);
  f.put<uint32_t>(type);
  f.put<uint64_t>(offset);
  while (f.b.size() % 32) f.b.push_back(0);
  f.b.resize(f.b.size() + data_bytes, 0x11);
  return f.b;
}

TEST(Gguf, RejectsMalformedHeadersWithClearMessages) {
  EXPECT_EQ(error_of(one_tensor_file(3, 2, {4, 2}, 0, 0, 32)), "");
  EXPECT_EQ(error_of(one_tensor_file(2, 2, {4, 2}, 0, 0, 32)), "");
  EXPECT_NE(error_of(one_tensor_file(1, 2, {4, 2}, 0, 0, 32)).find("v1 is not supported"), std::string::npos);
  EXPECT_NE(error_of(one_tensor_file(4, 2, {4, 2}, 0, 0, 32)).find("unsupported GGUF version 4"), std::string::npos);
  EXPECT_NE(error_of(one_tensor_file(3, 2, {4, 2}, 0, 0, 31)).find(
                "bad.gguf: tensor 'blk.0.attn_q.weight' data (offset "), std::string::npos);
  EXPECT_NE(error_of(one_tensor_file(3, 2, {4, 2}, 0, 0, 31)).find("32 bytes) ends past end of file"), std::string::npos);
  EXPECT_NE(error_of(one_tensor_file(3, 2, {4, 2}, 16, 0, 32)).find("unsupported tensor type id 16"), std::string::npos);
  EXPECT_NE(error_of(one_tensor_file(3, 5, {1, 1, 1, 1, 1}, 0, 0, 32)).find("5 dimensions"), std::string::npos);
  EXPECT_NE(error_of(one_tensor_file(3, 2, {4, 0}, 0, 0, 32)).find("zero dimension"), std::string::npos);
  EXPECT_NE(error_of(one_tensor_file(3, 2, {4, 2}, 0, 16, 64)).find("not a multiple of the alignment"), std::string::npos);
  EXPECT_NE(error_of(one_tensor_file(3, 2, {1ull << 40, 1ull << 40}, 0, 0, 32)).find("overflows"), std::string::npos);
  EXPECT_NE(error_of(one_tensor_file(3, 2, {1ull << 31, 1ull << 31}, 0, 0, 32)).find("too large"), std::string::npos);
  EXPECT_NE(error_of(one_tensor_file(3, 1, {33}, 8, 0, 64)).find("block size"), std::string::npos);
  EXPECT_NE(error_of({'G', 'G', 'U', 'X'}).find("bad magic"), std::string::npos);
  EXPECT_NE(error_of({'G', 'G'}).find("truncated"), std::string::npos);
  EXPECT_NE(error_of({}).find("truncated"), std::string::npos);

  // A string length larger than the file.
  auto f = one_tensor_file(3, 2, {4, 2}, 0, 0, 32);
  f[24] = 0xFF;  // low byte of the first key's length
  EXPECT_NE(error_of(f).find("more than the"), std::string::npos);
  // A huge kv count.
  f = one_tensor_file(3, 2, {4, 2}, 0, 0, 32);
  f[23] = 0x7F;
  EXPECT_NE(error_of(f).find("metadata count"), std::string::npos);
}

TEST(Gguf, RejectsDuplicatesAndOverlaps) {
  auto make = [](const std::string& n2, uint64_t off2, const std::string& k2) {
    Builder f;
    f.put<uint32_t>(0x46554747);
    f.put<uint32_t>(3);
    f.put<uint64_t>(2);
    f.put<uint64_t>(2);
    f.str("k1");
    f.put<uint32_t>(4);
    f.put<uint32_t>(1);
    f.str(k2);
    f.put<uint32_t>(9);  // array of u8, 3 entries
    f.put<uint32_t>(0);
    f.put<uint64_t>(3);
    f.b.insert(f.b.end(), {1, 2, 3});
    for (auto [n, off] : {std::pair<std::string, uint64_t>{"t1", 0}, {n2, off2}}) {
      f.str(n);
      f.put<uint32_t>(1);
      f.put<uint64_t>(16);
      f.put<uint32_t>(0);
      f.put<uint64_t>(off);
    }
    while (f.b.size() % 32) f.b.push_back(0);
    f.b.resize(f.b.size() + 128, 0);
    return f.b;
  };
  EXPECT_EQ(error_of(make("t2", 64, "k2")), "");
  EXPECT_NE(error_of(make("t1", 64, "k2")).find("duplicate tensor name 't1'"), std::string::npos);
  EXPECT_NE(error_of(make("t2", 32, "k2")).find("overlaps"), std::string::npos);
  EXPECT_NE(error_of(make("t2", 64, "k1")).find("duplicate metadata key 'k1'"), std::string::npos);
  const auto good = make("t2", 64, "k2");
  ModelFile ok = read_gguf_bytes(std::as_bytes(std::span(good)), "x");
  EXPECT_EQ(ok.meta.get_array_opt("k2")->items.size(), 3u);
}

TEST(Gguf, ReadsRealVocabFile) {
  ModelFile mf = read_gguf(test::shared_file("tokenizers/ggml-vocab-llama-spm.gguf"));
  EXPECT_EQ(mf.gguf_version, 3u);
  EXPECT_EQ(mf.tensors.size(), 0u);
  EXPECT_EQ(mf.meta.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(mf.meta.get_array_opt("tokenizer.ggml.tokens")->items.size(), 32000u);
  EXPECT_EQ(mf.meta.get_array_opt("tokenizer.ggml.tokens")->items[1].as_string(), "<s>");
}

TEST(Gguf, OpenMissingFileIsFormatError) {
  EXPECT_THROW(read_gguf("/nonexistent/x.gguf"), FormatError);
}

}  // namespace
}  // namespace peregrine
