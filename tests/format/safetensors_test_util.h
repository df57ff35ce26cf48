#pragma once
// Writes safetensors bytes for tests: a header built from entries (or given verbatim) and data.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace peregrine::test {

struct StEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

// Header length (u64 LE), header text, data. `header` is used verbatim.
inline std::vector<uint8_t> safetensors_bytes(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(8);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// A valid file from entries laid out back to back; the header is padded to 8 bytes.
inline std::vector<uint8_t> safetensors_bytes(const std::vector<StEntry>& entries) {
  nlohmann::json h = nlohmann::json::object();
  std::vector<uint8_t> data;
  for (const auto& e : entries) {
    h[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {data.size(), data.size() + e.data.size()}}};
    data.insert(data.end(), e.data.begin(), e.data.end());
  }
  h["__metadata__"] = {{"format", "pt"}};
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return safetensors_bytes(text, data);
}

inline std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

inline void write_file(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
}

}  // namespace peregrine::test
