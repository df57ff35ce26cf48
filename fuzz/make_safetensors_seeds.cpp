// Writes a few small valid safetensors files into the directory given as argv[1]: the fuzzer's
// seeds (every supported dtype, metadata, several tensors, an empty tensor, no tensors).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

struct Entry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  size_t bytes;
};

void write(const std::filesystem::path& path, const std::vector<Entry>& entries, bool metadata) {
  nlohmann::json h = nlohmann::json::object();
  size_t offset = 0;
  for (const Entry& e : entries) {
    h[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes}}};
    offset += e.bytes;
  }
  if (metadata) h["__metadata__"] = {{"format", "pt"}, {"note", "seed"}};
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>(n >> (8 * i)));
  f << text;
  for (size_t i = 0; i < offset; ++i) f.put(static_cast<char>(i * 37 + 11));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_safetensors_seeds DIR\n";
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  write(dir / "three.safetensors",
        {{"model.embed_tokens.weight", "F32", {4, 2}, 32}, {"model.norm.weight", "BF16", {2}, 4},
         {"lm_head.weight", "F16", {4, 2}, 16}},
        true);
  write(dir / "scalar-and-empty.safetensors", {{"s", "F32", {}, 4}, {"e", "F16", {0, 3}, 0}}, false);
  write(dir / "none.safetensors", {}, true);
  write(dir / "nd.safetensors", {{"x", "BF16", {2, 1, 3, 1}, 12}}, false);
  return 0;
}
