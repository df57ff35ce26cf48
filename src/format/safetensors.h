#pragma once
// safetensors (Hugging Face's weight files): a u64 little-endian header length N, N bytes of
// JSON header, then raw little-endian tensor bytes. The header maps each tensor name to
// {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]} (offsets relative to the
// first byte after the header) plus an optional "__metadata__" object of strings. Files are
// mapped and tensors viewed in place: F32, F16 and BF16 need no copy.
//
// The reader trusts nothing: header length, JSON, every field, every offset (in range, exactly
// dtype size x element count, no overlaps, no holes, as the format requires) are checked and a
// problem is one FormatError "PATH: <problem>".
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "format/mapped_file.h"
#include "format/tensor_type.h"

namespace peregrine {

struct SafetensorsTensor {
  std::string name;
  TensorType type = TensorType::F32;  // F32, F16 or BF16
  std::vector<int64_t> shape;         // as stored (PyTorch order: shape[0] is the outermost)
  std::span<const std::byte> data;    // exactly element count x element size bytes

  int64_t n_elements() const;
};

struct SafetensorsFile {
  std::string path;                          // for error messages
  std::vector<SafetensorsTensor> tensors;    // in data-offset order
  std::shared_ptr<const MappedFile> mapping; // keeps the views alive
};

// Largest header accepted (the reference implementation's limit): a bigger length field is a
// corrupt or hostile file, never a real checkpoint.
constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

// Parses bytes already in memory (used by the fuzzer and tests); views point into `bytes`.
std::vector<SafetensorsTensor> parse_safetensors(std::span<const std::byte> bytes, const std::string& name);

// Maps and parses one file.
SafetensorsFile read_safetensors(const std::filesystem::path& path);

// A sharded checkpoint's index (model.safetensors.index.json: {"weight_map": {tensor: shard}}):
// opens every shard it names (relative to the index's folder, never outside it) and checks that
// each tensor sits in the shard the index says and that the shards hold no tensor it does not name.
std::vector<SafetensorsFile> read_safetensors_index(const std::filesystem::path& index_json);

}  // namespace peregrine
