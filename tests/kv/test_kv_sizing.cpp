// --kv-cache-memory as a share of available memory, and planning for the 8-bit KV type.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

#include "model/config.h"
#include "kv/kv_sizing.h"
#include "util/error.h"

namespace peregrine {
namespace {

// A meminfo-format file in /tmp, unique per process (ctest runs tests in parallel).
struct FakeMeminfo {
  explicit FakeMeminfo(const std::string& text)
      : path("/tmp/peregrine_test_meminfo_" + std::to_string(::getpid()) + "_" + std::to_string(counter++)) {
    std::ofstream(path) << text;
  }
  ~FakeMeminfo() { std::remove(path.c_str()); }
  std::string path;
  static inline int counter = 0;
};

constexpr const char* kMeminfo =
    "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    8000000 kB\nBuffers: 1 kB\n";

TEST(KvSizingFraction, ParsesFractionsAndPercentages) {
  EXPECT_DOUBLE_EQ(*parse_memory_fraction("0.9"), 0.9);
  EXPECT_DOUBLE_EQ(*parse_memory_fraction("90%"), 0.9);
  EXPECT_DOUBLE_EQ(*parse_memory_fraction("12.5%"), 0.125);
  EXPECT_DOUBLE_EQ(*parse_memory_fraction("1"), 1.0);
  EXPECT_DOUBLE_EQ(*parse_memory_fraction("1.0"), 1.0);
  EXPECT_DOUBLE_EQ(*parse_memory_fraction("100%"), 1.0);
  EXPECT_DOUBLE_EQ(*parse_memory_fraction(".5"), 0.5);
  // Absolute sizes are not fractions (parse_memory_size takes them, errors included).
  for (const char* size : {"2GiB", "512mib", "4096", "1.5G", "64K", "", "GiB", "-1GiB"}) {
    EXPECT_FALSE(parse_memory_fraction(size).has_value()) << size;
  }
}

TEST(KvSizingFraction, RejectsSharesOutsideZeroToOne) {
  for (const char* bad : {"0", "0.0", "0%", "1.5", "2.0", "101%", "-0.5", "-50%", "%", "abc%", "1..5", "0.5.5", "5 %"}) {
    EXPECT_THROW(parse_memory_fraction(bad), UsageError) << bad;
  }
  try {
    parse_memory_fraction("1.5");
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("(0, 1]"), std::string::npos) << e.what();
  }
}

TEST(KvSizingFraction, ResolvesAgainstMemAvailable) {
  FakeMeminfo mi(kMeminfo);
  EXPECT_EQ(read_mem_available(mi.path), int64_t{8000000} * 1024);
  const MemoryBudget half = resolve_memory_budget("50%", mi.path);
  EXPECT_EQ(half.bytes, int64_t{4000000} * 1024);
  EXPECT_EQ(half.available, int64_t{8000000} * 1024);
  ASSERT_TRUE(half.fraction.has_value());
  EXPECT_NE(half.describe().find("50% of 7.63 GiB available"), std::string::npos) << half.describe();
  EXPECT_NE(half.describe().find("= 3.81 GiB"), std::string::npos) << half.describe();
  EXPECT_EQ(resolve_memory_budget("0.25", mi.path).bytes, int64_t{2000000} * 1024);
  // Absolute sizes keep working and never read the file.
  const MemoryBudget abs = resolve_memory_budget("2GiB", "/nonexistent/meminfo");
  EXPECT_EQ(abs.bytes, int64_t{2} << 30);
  EXPECT_FALSE(abs.fraction.has_value());
  EXPECT_EQ(abs.describe(), "2.00 GiB");
  EXPECT_THROW(resolve_memory_budget("2parsecs", mi.path), UsageError);
}

TEST(KvSizingFraction, ClearErrorWhenMemAvailableCannotBeRead) {
  EXPECT_THROW(resolve_memory_budget("0.9", "/nonexistent/meminfo"), UsageError);
  try {
    read_mem_available("/nonexistent/meminfo");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("2GiB"), std::string::npos) << "suggests an absolute size: " << e.what();
  }
  for (const char* text : {"MemTotal: 100 kB\n", "MemAvailable: lots kB\n", "MemAvailable: 100\n",
                           "MemAvailable: -5 kB\n", "MemAvailable: 0 kB\n", ""}) {
    FakeMeminfo mi(text);
    EXPECT_THROW(read_mem_available(mi.path), UsageError) << text;
  }
}

TEST(KvSizingFraction, TheRealMeminfoIsReadable) {
  // Linux only (the engine's target); MemAvailable exists since kernel 3.14.
  const int64_t avail = read_mem_available();
  EXPECT_GT(avail, int64_t{1} << 20);
  EXPECT_GT(resolve_memory_budget("10%").bytes, 0);
}

TEST(KvSizingQ8, PlansAboutTwiceTheBlocksOfF16) {
  ModelConfig c;
  c.n_layers = 4;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.head_dim = 64;
  c.context_length = 256;
  const KvSizing f16 = size_kv_cache(c.kv_shape(), c.context_length, KvType::F16, int64_t{64} << 20);
  const KvSizing q8 = size_kv_cache(c.kv_shape(), c.context_length, KvType::Q8_0, int64_t{64} << 20);
  EXPECT_EQ(q8.bytes_per_token, 2 * 4 * 4 * 68);  // 68 bytes per 64-value row
  EXPECT_EQ(f16.bytes_per_token, 2 * 4 * 4 * 128);
  EXPECT_GE(q8.n_blocks, f16.n_blocks * 188 / 100);  // 2 / 1.0625 = 1.88x
  EXPECT_NE(describe_kv_sizing(q8, KvType::Q8_0, 256).find("q8_0"), std::string::npos);
  c.head_dim = 7;
  try {
    size_kv_cache(c.kv_shape(), c.context_length, KvType::Q4_0, int64_t{64} << 20);
    FAIL() << "head_dim 7 accepted for q4_0";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("is 7"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace peregrine
