// The safetensors reader: valid files are viewed in place, and every way a header can lie
// (sizes, offsets, overlaps, holes, truncation, types, JSON) is one FormatError naming the file.
// test_format is built with ASan/UBSan, so a read outside the buffer fails the test too.
#include <gtest/gtest.h>

#include <random>

#include "common/test_paths.h"
#include "format/safetensors.h"
#include "safetensors_test_util.h"
#include "util/error.h"

namespace peregrine {
namespace {

using test::StEntry;

std::vector<SafetensorsTensor> parse(const std::vector<uint8_t>& bytes) {
  return parse_safetensors(std::as_bytes(std::span(bytes)), "t.safetensors");
}

// The FormatError message for `bytes`, or "" if they parse.
std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    parse(bytes);
    return "";
  } catch (const FormatError& e) {
    return e.what();
  }
}

std::vector<uint8_t> valid_file() {
  return test::safetensors_bytes({{"a", "F32", {2, 3}, test::f32_bytes({1, 2, 3, 4, 5, 6})},
                                  {"b", "BF16", {4}, std::vector<uint8_t>(8, 0x3f)},
                                  {"c", "F16", {1, 1, 2}, std::vector<uint8_t>(4, 0x3c)}});
}

TEST(Safetensors, ParsesAndViewsInPlace) {
  const auto bytes = valid_file();
  const auto tensors = parse(bytes);
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[0].name, "a");
  EXPECT_EQ(tensors[0].type, TensorType::F32);
  EXPECT_EQ(tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(tensors[1].type, TensorType::BF16);
  EXPECT_EQ(tensors[2].type, TensorType::F16);
  EXPECT_EQ(tensors[2].n_elements(), 2);
  // Zero-copy: the view points into the caller's bytes, at the right place.
  const auto* data = reinterpret_cast<const std::byte*>(bytes.data());
  EXPECT_GE(tensors[0].data.data(), data);
  float first;
  std::memcpy(&first, tensors[0].data.data(), 4);
  EXPECT_EQ(first, 1.0f);
  EXPECT_EQ(tensors[0].data.size(), 24u);
}

TEST(Safetensors, ReadsAFileThroughAMapping) {
  const auto dir = test::scratch_dir("safetensors_file");
  test::write_file(dir / "m.safetensors", valid_file());
  const SafetensorsFile f = read_safetensors(dir / "m.safetensors");
  ASSERT_EQ(f.tensors.size(), 3u);
  const auto mapped = f.mapping->bytes();
  EXPECT_GE(f.tensors[0].data.data(), mapped.data());
  EXPECT_LE(f.tensors[2].data.data() + f.tensors[2].data.size(), mapped.data() + mapped.size());
}

TEST(Safetensors, HeaderLies) {
  const std::vector<uint8_t> data = test::f32_bytes({1, 2, 3, 4});
  struct Case {
    std::string header, expect;
  };
  const std::vector<Case> cases = {
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", "needs 12"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,32]}})", "needs 16"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", "overlaps"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", "unused bytes before"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "bytes after the last tensor"},
      {R"({"a":{"dtype":"F32","shape":[6],"data_offsets":[0,24]}})", "past the end of the data"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", "end before they begin"},
      {R"({"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", "dtype I64 is not supported"},
      {R"({"a":{"dtype":"Q4","shape":[4],"data_offsets":[0,16]}})", "unknown dtype 'Q4'"},
      {R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", "non-negative integer"},
      {R"({"a":{"dtype":"F32","shape":[4.0],"data_offsets":[0,16]}})", "non-negative integer"},
      {R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,16]}})", "too large"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", "two non-negative integers"},
      {R"({"a":{"dtype":"F32","shape":[4]}})", "missing array field 'data_offsets'"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"extra":1}})", "unexpected field 'extra'"},
      {R"({"a":[1,2]})", "entry is not an object"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "repeats the key 'a'"},
      {R"({"__metadata__":{"x":1},"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "is not a string"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})", "not valid JSON"},
      {R"([1,2,3])", "does not start with '{'"},
      {R"({"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":{"i":{}}}}}}}}}})", "nests deeper"},
  };
  for (const Case& c : cases) {
    const std::string msg = error_of(test::safetensors_bytes(c.header, data));
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.header << " -> '" << msg << "'";
    EXPECT_TRUE(msg.starts_with("t.safetensors: ")) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(Safetensors, LengthFieldAndTruncation) {
  EXPECT_NE(error_of({1, 2, 3}).find("too small"), std::string::npos);
  std::vector<uint8_t> huge = {0, 0, 0, 0, 0, 0, 0, 0x10};
  EXPECT_NE(error_of(huge).find("over the 100000000-byte limit"), std::string::npos);
  std::vector<uint8_t> past = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  EXPECT_NE(error_of(past).find("runs past the end"), std::string::npos);
  // A truncated shard: every cut of a valid file is rejected (none is a smaller valid file).
  const auto bytes = valid_file();
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_NE(error_of(cut), "") << "cut at " << n;
  }
}

TEST(Safetensors, RandomCorruptionNeverCrashes) {
  const auto good = valid_file();
  std::mt19937 rng(7);
  int rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    auto bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    try {
      for (const auto& t : parse(bytes)) ASSERT_EQ(t.data.size() % 2, 0u);
    } catch (const FormatError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 1000);
}

TEST(Safetensors, ShardedIndex) {
  const auto dir = test::scratch_dir("safetensors_index");
  test::write_file(dir / "s1.safetensors", test::safetensors_bytes({{"a", "F32", {1}, test::f32_bytes({1})}}));
  test::write_file(dir / "s2.safetensors", test::safetensors_bytes({{"b", "F32", {1}, test::f32_bytes({2})}}));
  auto index = [&](const std::string& map) {
    test::write_text(dir / "index.json", R"({"metadata":{},"weight_map":)" + map + "}");
    return dir / "index.json";
  };
  const auto shards = read_safetensors_index(index(R"({"a":"s1.safetensors","b":"s2.safetensors"})"));
  ASSERT_EQ(shards.size(), 2u);
  EXPECT_EQ(shards[0].tensors[0].name, "a");
  EXPECT_EQ(shards[1].tensors[0].name, "b");

  auto error = [&](const std::string& map) -> std::string {
    try {
      read_safetensors_index(index(map));
      return "";
    } catch (const FormatError& e) {
      return e.what();
    }
  };
  EXPECT_NE(error(R"({"a":"s1.safetensors","b":"missing.safetensors"})").find("shard 'missing.safetensors' (holding 'b') does not exist"), std::string::npos);
  EXPECT_NE(error(R"({"a":"s2.safetensors","b":"s2.safetensors"})").find("tensor 'a' is not in shard 's2.safetensors'"), std::string::npos);
  EXPECT_NE(error(R"({"a":"../s1.safetensors"})").find("not a file beside the index"), std::string::npos);
  EXPECT_NE(error(R"({"a":"/etc/passwd"})").find("not a file beside the index"), std::string::npos);
  EXPECT_NE(error(R"({})").find("weight_map is empty"), std::string::npos);
  EXPECT_EQ(error(R"({"a":"s1.safetensors"})"), "");  // s2 unused by the index: fine
  test::write_text(dir / "index.json", "{not json");
  try {
    read_safetensors_index(dir / "index.json");
    ADD_FAILURE() << "bad JSON accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("index.json: not valid JSON"), std::string::npos) << e.what();
  }
  // A shard holding a tensor the index does not list is refused (the index is the whole truth).
  test::write_file(dir / "s3.safetensors", test::safetensors_bytes({{"c", "F32", {1}, test::f32_bytes({3})},
                                                                     {"d", "F32", {1}, test::f32_bytes({4})}}));
  EXPECT_NE(error(R"({"c":"s3.safetensors"})").find("tensor 'd' is not listed"), std::string::npos);
}

}  // namespace
}  // namespace peregrine
