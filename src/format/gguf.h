#pragma once
// GGUF v2/v3: reader (mmap, zero-copy tensor views, fully bounds-checked) and streaming writer.
// Spec: magic "GGUF", u32 version, u64 tensor_count, u64 kv_count, kv pairs, tensor infos
// (name, n_dims, dims[], type, offset), padding to general.alignment (default 32), tensor data.
// v1 (u32 counts) is rejected with a clear message.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "format/metadata.h"
#include "format/model_file.h"
#include "format/tensor_type.h"

namespace peregrine {

// Reads a GGUF file. Every count, length, offset and shape is validated against the file size
// and sane limits before anything is allocated or read: a malformed file gives FormatError
// "PATH: <problem>" and never an out-of-bounds read or a huge allocation.
ModelFile read_gguf(const std::filesystem::path& path);
// Same, from bytes already in memory (used by the fuzzer and tests); `name` is used in messages.
// The returned ModelFile's views point into `bytes`, which must outlive it.
ModelFile read_gguf_bytes(std::span<const std::byte> bytes, const std::string& name);

// Writes GGUF v3. Tensors are produced lazily, in order, when write() runs, so a multi-GB model
// can be written (synthesized or converted) without holding it in memory.
class GgufWriter {
 public:
  // Fills `dst` (exactly tensor_bytes(type, elements) bytes) with the tensor's data.
  using Producer = std::function<void(std::span<std::byte> dst)>;

  explicit GgufWriter(Metadata meta, size_t alignment = 32);
  void add_tensor(std::string name, TensorType type, std::vector<int64_t> shape, Producer produce);
  // Convenience: a tensor whose bytes are already in memory (copied at write time).
  void add_tensor_bytes(std::string name, TensorType type, std::vector<int64_t> shape,
                        std::span<const std::byte> bytes);
  // Writes the file; `progress(done_bytes, total_bytes)` is called after each tensor.
  void write(const std::filesystem::path& path,
             const std::function<void(uint64_t, uint64_t)>& progress = {}) const;
  // Writes the metadata and the tensor table only; the data region is left as a hole of its
  // full size (a sparse file: it reads as zeros and takes almost no disk). For models too large
  // to generate here whose shape still has to load (`peregrine info`, `kv-calc`).
  void write_header_only(const std::filesystem::path& path) const;

 private:
  struct Pending {
    std::string name;
    TensorType type;
    std::vector<int64_t> shape;
    Producer produce;
  };
  void write_file(const std::filesystem::path& path, const std::function<void(uint64_t, uint64_t)>& progress,
                  bool with_data) const;

  Metadata meta_;
  size_t alignment_;
  std::vector<Pending> tensors_;
};

}  // namespace peregrine
