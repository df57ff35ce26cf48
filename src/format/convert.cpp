#include "format/convert.h"

#include <cstring>
#include <vector>

#include "format/gguf.h"
#include "util/error.h"

namespace peregrine {

uint32_t llama_file_type(TensorType weight_type) {
  switch (weight_type) {
    case TensorType::F32: return 0;   // ALL_F32
    case TensorType::F16: return 1;   // MOSTLY_F16
    case TensorType::Q4_0: return 2;  // MOSTLY_Q4_0
    case TensorType::Q8_0: return 7;  // MOSTLY_Q8_0
    case TensorType::Q4_K: return 15; // MOSTLY_Q4_K_M
    case TensorType::Q6_K: return 18; // MOSTLY_Q6_K
    case TensorType::Q4_1: return 3;  // MOSTLY_Q4_1
    case TensorType::Q5_0: return 8;  // MOSTLY_Q5_0
    case TensorType::Q5_1: return 9;  // MOSTLY_Q5_1
    case TensorType::Q2_K: return 10; // MOSTLY_Q2_K
    case TensorType::Q3_K: return 11; // MOSTLY_Q3_K_S (every matrix Q3_K)
    case TensorType::Q5_K: return 16; // MOSTLY_Q5_K_S (every matrix Q5_K)
    case TensorType::IQ4_NL: return 25; // MOSTLY_IQ4_NL
    case TensorType::IQ4_XS: return 30; // MOSTLY_IQ4_XS
    case TensorType::BF16: return 32; // MOSTLY_BF16
  }
  throw UsageError("no llama.cpp file type for tensor type " +
                   std::to_string(static_cast<uint32_t>(weight_type)));
}

namespace {

// The type a tensor is written as. A matrix whose rows do not split into whole blocks of the
// requested type (e.g. a 172-wide FFN row with a 256-element K-quant) stays F32 rather than
// failing the conversion: it costs some size but loses nothing.
TensorType target_type(const TensorView& t, std::optional<TensorType> weight_type) {
  if (!weight_type) return t.type;
  if (t.shape.size() < 2) return TensorType::F32;
  if (t.row_length() % tensor_type_info(*weight_type).block_elems != 0) return TensorType::F32;
  return *weight_type;
}

// Dequantizes each row of `src` and quantizes it as `to` into `dst`.
void convert_rows(const TensorView& src, TensorType to, std::span<std::byte> dst) {
  const int64_t n = src.row_length();
  const size_t out_row = tensor_bytes(to, n);
  std::vector<float> row(static_cast<size_t>(n));  // [n] one dequantized row
  for (int64_t r = 0; r < src.n_rows(); ++r) {
    src.dequantize_row_to(r, row);
    quantize_row(to, row.data(), dst.data() + static_cast<size_t>(r) * out_row, n);
  }
}

struct RetypedStorage {
  std::shared_ptr<const void> original;
  std::vector<std::vector<std::byte>> buffers;  // moving a vector keeps its heap block in place
};

}  // namespace

void write_gguf_from(const ModelFile& in, const std::filesystem::path& out,
                     std::optional<TensorType> weight_type,
                     const std::function<void(uint64_t, uint64_t)>& progress) {
  Metadata meta = in.meta;
  if (weight_type) {
    meta.set("general.file_type", MetaValue::u32(llama_file_type(*weight_type)));
  } else if (!meta.contains("general.file_type")) {
    // Infer from the matrices when they all share one type; otherwise leave it unset.
    std::optional<TensorType> common;
    bool mixed = false;
    for (const auto& t : in.tensors) {
      if (t.shape.size() < 2) continue;
      if (common && *common != t.type) mixed = true;
      common = t.type;
    }
    if (common && !mixed) meta.set("general.file_type", MetaValue::u32(llama_file_type(*common)));
  }

  GgufWriter writer(std::move(meta), in.alignment);
  for (const TensorView& t : in.tensors) {
    const TensorType to = target_type(t, weight_type);
    if (to == t.type) {
      writer.add_tensor_bytes(t.name, t.type, t.shape, t.data);
      continue;
    }
    const TensorView* src = &t;
    writer.add_tensor(t.name, to, t.shape, [src, to](std::span<std::byte> dst) { convert_rows(*src, to, dst); });
  }
  writer.write(out, progress);
}

ModelFile retype_model(ModelFile in, TensorType weight_type) {
  auto storage = std::make_shared<RetypedStorage>();
  storage->original = in.storage;
  for (TensorView& t : in.tensors) {
    const TensorType to = target_type(t, weight_type);
    if (to == t.type) continue;
    std::vector<std::byte>& buf = storage->buffers.emplace_back(tensor_bytes(to, t.n_elements()));
    convert_rows(t, to, buf);
    t.type = to;
    t.data = buf;
  }
  in.meta.set("general.file_type", MetaValue::u32(llama_file_type(weight_type)));
  in.storage = std::move(storage);
  return in;
}

}  // namespace peregrine
