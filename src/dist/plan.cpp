#include "dist/plan.h"

#include <algorithm>
#include <cmath>

#include "model/model_slice.h"

namespace peregrine::dist {
namespace {

struct NamedDevice {
  const char* name;
  double memory_gb, bandwidth_tbs, tflops;
};
// Vendor datasheet figures: HBM capacity, HBM bandwidth, dense FP16/BF16 tensor throughput.
constexpr NamedDevice kDevices[] = {
    {"h100", 80, 3.35, 989},    // H100 SXM5
    {"h200", 141, 4.8, 989},    // H200 SXM
    {"a100", 80, 2.039, 312},   // A100 SXM 80GB
    {"mi300x", 192, 5.3, 1307},  // MI300X
};

struct NamedLink {
  const char* name;
  double gb_per_s, latency_us;
};
// Per direction per device.
constexpr NamedLink kLinks[] = {
    {"nvlink", 450, 3},  // NVLink 4 (H100): 900 GB/s both directions
    {"pcie", 64, 10},    // PCIe 5.0 x16
    {"ib", 50, 5},       // InfiniBand NDR 400 Gb/s
};

template <class T>
std::string names(const T& list) {
  std::string s;
  for (const auto& e : list) s += (s.empty() ? "" : ", ") + std::string(e.name);
  return s;
}

PlanModel shape(const char* name, int64_t layers, int64_t dim, int64_t heads, int64_t kv_heads, int64_t ffn,
                int64_t vocab, int64_t context, int64_t experts = 0, int64_t top_k = 0) {
  PlanModel m;
  m.name = name;
  m.layers = layers;
  m.dim = dim;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.head_dim = dim / heads;
  m.vocab = vocab;
  m.context = context;
  m.experts = experts;
  m.experts_per_token = top_k;
  fill_params_from_shape(m, ffn);
  return m;
}

}  // namespace

std::optional<PlanDevice> plan_device(const std::string& name) {
  for (const auto& d : kDevices) {
    if (name == d.name) return PlanDevice{d.name, d.memory_gb * 1e9, d.bandwidth_tbs * 1e12, d.tflops * 1e12};
  }
  return std::nullopt;
}

std::optional<PlanLink> plan_link(const std::string& name) {
  for (const auto& l : kLinks) {
    if (name == l.name) return PlanLink{l.name, l.gb_per_s * 1e9, l.latency_us * 1e-6};
  }
  return std::nullopt;
}

std::string plan_device_names() { return names(kDevices); }
std::string plan_link_names() { return names(kLinks); }

void fill_params_from_shape(PlanModel& m, int64_t ffn) {
  const double d = static_cast<double>(m.dim), q = static_cast<double>(m.heads * m.head_dim),
               kv = static_cast<double>(m.kv_heads * m.head_dim), f = static_cast<double>(ffn);
  const double attention = d * q * 2 + d * kv * 2;
  const double expert = 3 * d * f;
  const double experts = static_cast<double>(std::max<int64_t>(1, m.experts));
  const double active = static_cast<double>(m.experts > 0 ? m.experts_per_token : 1);
  const double norms = 2 * d;
  const double layers = static_cast<double>(m.layers);
  m.ffn = ffn;
  m.embedding_params = static_cast<double>(m.vocab) * d;
  const double head = static_cast<double>(m.vocab) * d;  // untied output matrix
  m.params = m.embedding_params + head + d + layers * (attention + expert * experts + norms + (m.experts ? d * experts : 0));
  m.active_params = m.embedding_params + head + d + layers * (attention + expert * active + norms);
}

std::optional<PlanModel> plan_model_preset(const std::string& name) {
  if (name == "llama-3-8b") return shape("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, 8192);
  if (name == "llama-3-70b") return shape("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, 8192);
  if (name == "llama-3-405b") return shape("llama-3-405b", 126, 16384, 128, 8, 53248, 128256, 8192);
  if (name == "mixtral-8x7b") return shape("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 32768, 8, 2);
  if (name == "tinyllama-1.1b") return shape("tinyllama-1.1b", 22, 2048, 32, 4, 5632, 32000, 2048);
  return std::nullopt;
}

std::string plan_model_names() { return "llama-3-8b, llama-3-70b, llama-3-405b, mixtral-8x7b, tinyllama-1.1b"; }

std::vector<PlanLayout> candidate_layouts(const PlanModel& m, int max_devices) {
  std::vector<PlanLayout> out;
  for (int tp = 1; tp <= max_devices; tp *= 2) {
    for (int pp = 1; tp * pp <= max_devices; pp *= 2) {
      PlanLayout l{tp, pp, m.experts > 0 ? std::min<int>(tp, static_cast<int>(m.experts)) : 1};
      out.push_back(l);
    }
  }
  return out;
}

PlanFigures plan_layout(const PlanModel& m, const PlanDevice& dev, const PlanLink& link, const PlanLayout& layout,
                        const PlanOptions& o) {
  PlanFigures f;
  f.layout = layout;
  const double tp = layout.tp, pp = layout.pp;
  // The engine's own split rules (model_slice.h), on what the planned shape says (0: unknown).
  const SplitDims dims{m.layers, m.heads, m.kv_heads, m.head_dim, m.ffn, m.vocab, m.experts};
  f.refusal = split_refusal(dims, {layout.tp, layout.pp, layout.ep > 1 ? layout.ep : 0});
  // Weights: every device holds 1/(T*P) of them (the largest stage rounded up by one layer).
  const double stage_share = m.layers > 0 ? std::ceil(static_cast<double>(m.layers) / pp) / static_cast<double>(m.layers)
                                          : 1.0 / pp;
  f.weight_bytes = m.params * m.bytes_per_param * stage_share / tp;
  f.usable_bytes = dev.memory_bytes * o.memory_utilization;
  // K/V per token on one device: its stage's layers and its KV heads (replicated when fewer than T).
  if (m.knows_shape()) {
    const double kv_heads = std::max(1.0, static_cast<double>(m.kv_heads) / tp);
    const double layers = std::ceil(static_cast<double>(m.layers) / pp);
    f.kv_bytes_per_token = 2 * layers * kv_heads * static_cast<double>(m.head_dim) * o.kv_bytes_per_value;
  }
  const int64_t seq = o.seq_len > 0 ? o.seq_len : m.context;
  const double room = f.usable_bytes - f.weight_bytes;
  if (f.kv_bytes_per_token > 0 && seq > 0) {
    f.max_batch = room > 0 ? static_cast<int64_t>(room / (f.kv_bytes_per_token * static_cast<double>(seq))) : 0;
    f.fits = !f.refusal && f.max_batch >= 1;
  } else {
    f.fits = !f.refusal && room > 0;
  }
  // Decode at batch 1: a token passes the stages in turn, each reading its share on T devices at
  // once; the embedding is one row per token, not the whole table.
  const double read_params = (m.active_params > 0 ? m.active_params : m.params) - m.embedding_params;
  f.decode_memory_s = read_params * m.bytes_per_param / (tp * dev.bandwidth);
  // Tensor parallelism: a ring all-reduce of dim values twice per layer (2(T-1)/T of them sent per
  // device, 2(T-1) latency steps), once when the feed-forward is expert-parallel; pipeline: one
  // hidden state per stage boundary; experts (model/model_moe.cpp's exchange, E ranks): each
  // token's outputs of remote experts (k (E-1)/E of them) to the rank adding it up, then the sum to
  // every rank, per device (E-1)/E (k/E + 1) hidden states.
  const double hidden = static_cast<double>(m.dim) * o.act_bytes, layers = static_cast<double>(m.layers);
  const bool expert_parallel = m.experts > 0 && layout.ep > 1;
  double comm_bytes = 0, comm_s = 0;
  if (layout.tp > 1) {
    const double per_reduce = (o.gather_all_reduce ? tp - 1 : 2 * (tp - 1) / tp) * hidden;
    const double steps = o.gather_all_reduce ? tp - 1 : 2 * (tp - 1), reduces = expert_parallel ? 1 : 2;
    comm_bytes += reduces * layers / pp * per_reduce;  // per device: its stage's layers
    comm_s += reduces * layers * (per_reduce / link.bandwidth + steps * link.latency);
  }
  if (layout.pp > 1) {
    comm_bytes += hidden;
    comm_s += (pp - 1) * (hidden / link.bandwidth + link.latency);
  }
  if (expert_parallel) {
    const double e = layout.ep, k = static_cast<double>(m.experts_per_token);
    const double per_layer = (e - 1) / e * (k / e + 1) * hidden;
    comm_bytes += layers / pp * per_layer;
    comm_s += layers * (per_layer / link.bandwidth + 2 * link.latency);
  }
  if (layout.devices() > 1) {
    // The driver (the device that samples: peregrine's world rank 0) sends every device the step
    // (one latency; a few bytes per token) and gets the last stage's logits rows back (vocab / T
    // values from each of its devices, one latency) before it can sample the next token.
    const double logits = static_cast<double>(m.vocab) / tp * o.act_bytes;
    comm_bytes += logits;
    comm_s += 2 * link.latency + logits / link.bandwidth;
  }
  f.comm_bytes_per_token = comm_bytes;
  f.decode_comm_s = comm_s;
  f.decode_tokens_per_s = 1.0 / (f.decode_memory_s + f.decode_comm_s);
  const double active = m.active_params > 0 ? m.active_params : m.params;
  f.prefill_tokens_per_s = tp * pp * dev.flops / (2 * active);
  if (f.kv_bytes_per_token > 0) {
    // The decode pool receives every layer's K/V of the prompt: T*P devices' shares in parallel.
    f.kv_transfer_s = f.kv_bytes_per_token * static_cast<double>(o.prompt_len) / link.bandwidth + link.latency;
  }
  return f;
}

}  // namespace peregrine::dist
