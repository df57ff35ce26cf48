#include "kv/host_kv_storage.h"

#include <cstring>
#include <string>
#include <utility>

#include "format/tensor_type.h"
#include "kv/kv_fp8.h"
#include "kv/kv_q4.h"
#include "kv/kv_q8.h"
#include "util/error.h"

namespace peregrine {
namespace {

constexpr size_t kAlign = 64;

size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Bytes per element of a float type's arrays; 0 for a quantized type (kv_value_byte).
size_t float_size(KvType t) {
  switch (t) {
    case KvType::F32:
      return sizeof(float);
    case KvType::F16:
    case KvType::BF16:
      return sizeof(uint16_t);
    default:
      return 0;
  }
}

size_t elements(const KvStorageSpec& s) {
  return static_cast<size_t>(s.n_blocks) * static_cast<size_t>(s.block_size) *
         static_cast<size_t>(s.shape.n_kv_heads * s.shape.head_dim);
}

// Bytes of the element offset `off` into a values array.
size_t value_bytes(KvType t, size_t off) {
  return kv_type_is_quantized(t) ? kv_value_byte(t, off) : off * float_size(t);
}

// Bytes of one layer's arrays: K and V values, then K and V scales, each aligned.
struct LayerBytes {
  size_t values = 0, scales = 0;
  size_t total() const { return 2 * aligned(values) + 2 * aligned(scales); }
};

LayerBytes layer_bytes(const KvStorageSpec& s) {
  LayerBytes b;
  b.values = value_bytes(s.type, elements(s));
  if (kv_type_is_quantized(s.type)) {
    b.scales = elements(s) / static_cast<size_t>(kv_scale_group(s.type, s.shape.head_dim)) * sizeof(uint16_t);
  }
  return b;
}

// Copies one block's runs (HostKvStorage::Runs) of `base` to / from the byte cursor `at` (advanced).
template <class Runs>
void put(const std::byte* base, const Runs& r, std::byte*& at) {
  for (size_t s = 0; s < r.slots; ++s) {
    std::memcpy(at, base + r.first + s * r.stride, r.len);
    at += r.len;
  }
}
template <class Runs>
void take(std::byte* base, const Runs& r, const std::byte*& at) {
  for (size_t s = 0; s < r.slots; ++s) {
    std::memcpy(base + r.first + s * r.stride, at, r.len);
    at += r.len;
  }
}

}  // namespace

size_t HostKvStorage::buffer_bytes(const KvStorageSpec& spec) {
  check_kv_spec(spec);
  return static_cast<size_t>(spec.shape.n_layers) * layer_bytes(spec).total();
}

HostKvStorage::HostKvStorage(const KvStorageSpec& spec, Buffer memory)
    : KvStorage(spec),
      memory_(std::move(memory)),
      value_size_(float_size(spec.type)),
      row_elems_(spec.shape.n_kv_heads * spec.shape.head_dim),
      scale_group_(kv_scale_group(spec.type, spec.shape.head_dim)) {
  if (memory_.bytes() < buffer_bytes(spec)) {
    throw UsageError("KV storage: " + std::to_string(memory_.bytes()) + " bytes of memory for a cache of " +
                     std::to_string(buffer_bytes(spec)));
  }
  const LayerBytes lb = layer_bytes(spec);
  std::byte* at = memory_.as<std::byte>().data();
  layers_.resize(static_cast<size_t>(n_layers()));
  for (Layer& l : layers_) {
    l.k = at;
    l.v = at + aligned(lb.values);
    // Q4_0: nibbles of 8 are zeros; every other type's zero is all zero bits.
    const int fill = type() == KvType::Q4_0 ? 0x88 : 0;
    std::memset(l.k, fill, lb.values);
    std::memset(l.v, fill, lb.values);
    at += 2 * aligned(lb.values);
    if (lb.scales > 0) {
      l.ks = reinterpret_cast<uint16_t*>(at);
      l.vs = reinterpret_cast<uint16_t*>(at + aligned(lb.scales));
      std::memset(l.ks, 0, lb.scales);
      std::memset(l.vs, 0, lb.scales);
      at += 2 * aligned(lb.scales);
    }
  }
}

// Values of heads [h0, h1) in every slot of `block`, as byte runs of a values array.
HostKvStorage::Runs HostKvStorage::value_runs(BlockId block, int64_t h0, int64_t h1) const {
  if (block < 0 || block >= n_blocks() || h0 < 0 || h1 > n_kv_heads() || h0 >= h1) {
    throw UsageError("kv cache: heads [" + std::to_string(h0) + ", " + std::to_string(h1) + ") of block " +
                     std::to_string(block) + " (the cache has " + std::to_string(n_blocks()) + " blocks of " +
                     std::to_string(n_kv_heads()) + " KV heads)");
  }
  const auto row = static_cast<size_t>(row_elems_), hd = static_cast<size_t>(head_dim());
  const size_t first =
      static_cast<size_t>(block) * static_cast<size_t>(block_size()) * row + static_cast<size_t>(h0) * hd;
  const size_t len = static_cast<size_t>(h1 - h0) * hd;
  return {value_bytes(type(), first), static_cast<size_t>(block_size()), value_bytes(type(), row),
          value_bytes(type(), len)};
}

// The same runs of a quantized type's scales arrays.
HostKvStorage::Runs HostKvStorage::scale_runs(BlockId block, int64_t h0, int64_t h1) const {
  const auto row = static_cast<size_t>(row_elems_), hd = static_cast<size_t>(head_dim());
  const auto g = static_cast<size_t>(scale_group_);
  const size_t first =
      static_cast<size_t>(block) * static_cast<size_t>(block_size()) * row + static_cast<size_t>(h0) * hd;
  const size_t len = static_cast<size_t>(h1 - h0) * hd;
  const size_t s = sizeof(uint16_t);
  return {first / g * s, static_cast<size_t>(block_size()), row / g * s, len / g * s};
}

void HostKvStorage::export_heads(BlockId block, int64_t h0, int64_t h1, std::span<std::byte> out) const {
  const Runs values = value_runs(block, h0, h1);
  if (out.size() != heads_bytes(h0, h1)) {
    throw UsageError("kv cache: export of block " + std::to_string(block) + " into " + std::to_string(out.size()) +
                     " bytes");
  }
  const bool quantized = kv_type_is_quantized(type());
  const Runs scales = quantized ? scale_runs(block, h0, h1) : Runs{};
  std::byte* at = out.data();
  for (const Layer& l : layers_) {
    put(l.k, values, at), put(l.v, values, at);
    if (quantized) {
      put(reinterpret_cast<const std::byte*>(l.ks), scales, at);
      put(reinterpret_cast<const std::byte*>(l.vs), scales, at);
    }
  }
}

void HostKvStorage::import_heads(BlockId block, int64_t h0, int64_t h1, std::span<const std::byte> in) {
  const Runs values = value_runs(block, h0, h1);
  if (in.size() != heads_bytes(h0, h1)) {
    throw UsageError("kv cache: import of " + std::to_string(in.size()) + " bytes into block " + std::to_string(block) +
                     " (its heads hold " + std::to_string(heads_bytes(h0, h1)) + ")");
  }
  const bool quantized = kv_type_is_quantized(type());
  const Runs scales = quantized ? scale_runs(block, h0, h1) : Runs{};
  const std::byte* at = in.data();
  for (Layer& l : layers_) {
    take(l.k, values, at), take(l.v, values, at);
    if (quantized) {
      take(reinterpret_cast<std::byte*>(l.ks), scales, at);
      take(reinterpret_cast<std::byte*>(l.vs), scales, at);
    }
  }
}

void HostKvStorage::copy_block(BlockId from, BlockId to) {
  if (from < 0 || from >= n_blocks() || to < 0 || to >= n_blocks()) {
    throw UsageError("kv cache: copy of block " + std::to_string(from) + " into block " + std::to_string(to) +
                     " (the cache has " + std::to_string(n_blocks()) + " blocks)");
  }
  // A whole block is one run: its slots are consecutive.
  const size_t n = static_cast<size_t>(block_size()) * static_cast<size_t>(row_elems_);
  const size_t src = static_cast<size_t>(from) * n, dst = static_cast<size_t>(to) * n;
  const size_t nb = value_bytes(type(), n), bsrc = value_bytes(type(), src), bdst = value_bytes(type(), dst);
  for (Layer& l : layers_) {
    std::memmove(l.k + bdst, l.k + bsrc, nb);
    std::memmove(l.v + bdst, l.v + bsrc, nb);
    if (kv_type_is_quantized(type())) {
      const auto g = static_cast<size_t>(scale_group_);
      std::memmove(l.ks + dst / g, l.ks + src / g, n / g * sizeof(uint16_t));
      std::memmove(l.vs + dst / g, l.vs + src / g, n / g * sizeof(uint16_t));
    }
  }
}

void HostKvStorage::check_row(int64_t layer, int64_t row, size_t k_size, size_t v_size, const char* what) const {
  if (layer < 0 || layer >= n_layers() || row < 0 || row >= n_blocks() * block_size() ||
      static_cast<int64_t>(k_size) != row_elems_ || static_cast<int64_t>(v_size) != row_elems_) {
    throw UsageError(std::string("KV cache: ") + what + " arguments out of range");
  }
}

void HostKvStorage::write_row(int64_t layer, int64_t row, std::span<const float> k, std::span<const float> v) {
  check_row(layer, row, k.size(), v.size(), "write_row");
  const Layer& l = layers_[static_cast<size_t>(layer)];
  const size_t base = static_cast<size_t>(row * row_elems_);
  const int64_t hd = head_dim();
  switch (type()) {
    case KvType::F32:
      std::memcpy(reinterpret_cast<float*>(l.k) + base, k.data(), k.size_bytes());
      std::memcpy(reinterpret_cast<float*>(l.v) + base, v.data(), v.size_bytes());
      break;
    case KvType::F16:
    case KvType::BF16: {
      uint16_t* dk = reinterpret_cast<uint16_t*>(l.k) + base;
      uint16_t* dv = reinterpret_cast<uint16_t*>(l.v) + base;
      const bool f16 = type() == KvType::F16;
      for (int64_t i = 0; i < row_elems_; ++i) {
        dk[i] = f16 ? fp32_to_fp16(k[i]) : fp32_to_bf16(k[i]);
        dv[i] = f16 ? fp32_to_fp16(v[i]) : fp32_to_bf16(v[i]);
      }
      break;
    }
    case KvType::Q8_0:
    case KvType::FP8_E4M3:
    case KvType::Q4_0:
      // One head's row at a time; rows start on a scale group's boundary.
      for (int64_t h = 0; h < n_kv_heads(); ++h) {
        const size_t off = base + static_cast<size_t>(h * hd);
        const size_t byte = kv_value_byte(type(), off), scale = off / static_cast<size_t>(scale_group_);
        const float* src[2] = {k.data() + h * hd, v.data() + h * hd};
        uint8_t* dst[2] = {reinterpret_cast<uint8_t*>(l.k) + byte, reinterpret_cast<uint8_t*>(l.v) + byte};
        uint16_t* scales[2] = {l.ks + scale, l.vs + scale};
        for (int kv = 0; kv < 2; ++kv) {
          switch (type()) {
            case KvType::Q8_0:
              quantize_kv_q8_row(src[kv], reinterpret_cast<int8_t*>(dst[kv]), scales[kv], hd, scale_group_);
              break;
            case KvType::FP8_E4M3:
              quantize_kv_fp8_row(src[kv], dst[kv], scales[kv], hd);
              break;
            default:
              quantize_kv_q4_row(src[kv], dst[kv], scales[kv], hd, scale_group_);
              break;
          }
        }
      }
      break;
  }
}

void HostKvStorage::read_row(int64_t layer, int64_t row, std::span<float> k, std::span<float> v) const {
  check_row(layer, row, k.size(), v.size(), "read_row");
  const Layer& l = layers_[static_cast<size_t>(layer)];
  const size_t base = static_cast<size_t>(row * row_elems_);
  const int64_t hd = head_dim();
  switch (type()) {
    case KvType::F32:
      std::memcpy(k.data(), reinterpret_cast<const float*>(l.k) + base, k.size_bytes());
      std::memcpy(v.data(), reinterpret_cast<const float*>(l.v) + base, v.size_bytes());
      break;
    case KvType::F16:
    case KvType::BF16: {
      const uint16_t* sk = reinterpret_cast<const uint16_t*>(l.k) + base;
      const uint16_t* sv = reinterpret_cast<const uint16_t*>(l.v) + base;
      const bool f16 = type() == KvType::F16;
      for (int64_t i = 0; i < row_elems_; ++i) {
        k[i] = f16 ? fp16_to_fp32(sk[i]) : bf16_to_fp32(sk[i]);
        v[i] = f16 ? fp16_to_fp32(sv[i]) : bf16_to_fp32(sv[i]);
      }
      break;
    }
    case KvType::Q8_0:
    case KvType::FP8_E4M3:
    case KvType::Q4_0:
      for (int64_t h = 0; h < n_kv_heads(); ++h) {
        const size_t off = base + static_cast<size_t>(h * hd);
        const size_t byte = kv_value_byte(type(), off), scale = off / static_cast<size_t>(scale_group_);
        const uint8_t* src[2] = {reinterpret_cast<const uint8_t*>(l.k) + byte,
                                 reinterpret_cast<const uint8_t*>(l.v) + byte};
        const uint16_t* scales[2] = {l.ks + scale, l.vs + scale};
        float* dst[2] = {k.data() + h * hd, v.data() + h * hd};
        for (int kv = 0; kv < 2; ++kv) {
          switch (type()) {
            case KvType::Q8_0:
              dequantize_kv_q8_row(reinterpret_cast<const int8_t*>(src[kv]), scales[kv], dst[kv], hd, scale_group_);
              break;
            case KvType::FP8_E4M3:
              dequantize_kv_fp8_row(src[kv], *scales[kv], dst[kv], hd);
              break;
            default:
              dequantize_kv_q4_row(src[kv], scales[kv], dst[kv], hd, scale_group_);
              break;
          }
        }
      }
      break;
  }
}

KvLayerView HostKvStorage::layer_view(int64_t layer) const {
  if (layer < 0 || layer >= n_layers()) throw UsageError("KV cache: layer " + std::to_string(layer) + " out of range");
  const Layer& l = layers_[static_cast<size_t>(layer)];
  KvLayerView view;
  view.type = type();
  switch (type()) {
    case KvType::F32:
      view.k_f32 = reinterpret_cast<const float*>(l.k);
      view.v_f32 = reinterpret_cast<const float*>(l.v);
      break;
    case KvType::F16:
    case KvType::BF16:
      view.k_u16 = reinterpret_cast<const uint16_t*>(l.k);
      view.v_u16 = reinterpret_cast<const uint16_t*>(l.v);
      break;
    case KvType::Q8_0:
    case KvType::FP8_E4M3:
    case KvType::Q4_0:
      view.k_bytes = reinterpret_cast<const uint8_t*>(l.k);
      view.v_bytes = reinterpret_cast<const uint8_t*>(l.v);
      view.k_scales = l.ks;
      view.v_scales = l.vs;
      view.scale_group = scale_group_;
      break;
  }
  view.block_size = block_size();
  view.n_kv_heads = n_kv_heads();
  view.head_dim = head_dim();
  return view;
}

}  // namespace peregrine
