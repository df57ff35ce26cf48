#include "format/convert.h"

#include <cstring>
#include <vector>

#include "format/gguf.h"
#include "util/error.h"

namespace peregrine {

namespace {

// The type a tensor is written as. Plain types: a matrix whose rows do not split into whole
// blocks of the requested type (e.g. a 172-wide FFN row with a 256-element K-quant) stays F32
// rather than failing the conversion: it costs some size but loses nothing. Mixes follow
// llama.cpp (quant_scheme.h), its fallbacks included.
TensorType target_type(const TensorView& t, const std::optional<QuantScheme>& scheme, const QuantModelInfo& model) {
  if (!scheme) return t.type;
  if (t.shape.size() < 2) return TensorType::F32;
  if (scheme->mix != QuantMix::None) {
    if (!is_quantizable_weight(t.name, t.shape)) return t.type;
    return mix_tensor_type(*scheme, model, t.name, t.row_length());
  }
  if (t.row_length() % tensor_type_info(scheme->base).block_elems != 0) return TensorType::F32;
  return scheme->base;
}

QuantModelInfo model_info(const ModelFile& in) {
  return quant_model_info(in.meta, in.find("output.weight") != nullptr);
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

void write_gguf_from(const ModelFile& in, const std::filesystem::path& out, std::optional<QuantScheme> scheme,
                     const std::function<void(uint64_t, uint64_t)>& progress) {
  Metadata meta = in.meta;
  if (scheme) {
    meta.set("general.file_type", MetaValue::u32(llama_file_type(*scheme)));
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

  const QuantModelInfo model = model_info(in);
  GgufWriter writer(std::move(meta), in.alignment);
  for (const TensorView& t : in.tensors) {
    const TensorType to = target_type(t, scheme, model);
    if (to == t.type) {
      writer.add_tensor_bytes(t.name, t.type, t.shape, t.data);
      continue;
    }
    const TensorView* src = &t;
    writer.add_tensor(t.name, to, t.shape, [src, to](std::span<std::byte> dst) { convert_rows(*src, to, dst); });
  }
  writer.write(out, progress);
}

ModelFile retype_model(ModelFile in, QuantScheme scheme) {
  auto storage = std::make_shared<RetypedStorage>();
  storage->original = in.storage;
  const QuantModelInfo model = model_info(in);
  for (TensorView& t : in.tensors) {
    const TensorType to = target_type(t, scheme, model);
    if (to == t.type) continue;
    std::vector<std::byte>& buf = storage->buffers.emplace_back(tensor_bytes(to, t.n_elements()));
    convert_rows(t, to, buf);
    t.type = to;
    t.data = buf;
  }
  in.meta.set("general.file_type", MetaValue::u32(llama_file_type(scheme)));
  in.storage = std::move(storage);
  return in;
}

}  // namespace peregrine
