#include "reference/reference_forward.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "util/error.h"

namespace peregrine {
namespace {

// Hyper-parameters, read here from the metadata on purpose (not via ModelConfig), so a mistake
// in the optimized path's config reading cannot hide in both.
struct Hyper {
  bool neox_rope = false;       // qwen2*, qwen3moe: pairs (i, i + rope_dim/2); llama: (2i, 2i+1)
  bool qk_norm = false;         // qwen3, qwen3moe: RMSNorm of every query and key head before RoPE
  bool phi3 = false;            // fused attn_qkv (q | k | v rows, if present) and ffn_up (gate | up rows)
  int64_t dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, ffn_dim = 0;
  int64_t rope_dim = 0, n_vocab = 0;
  double rms_eps = 1e-5, rope_base = 10000.0, rope_scale = 1.0;
  // Mixture of experts (n_experts > 0): llama.cpp's build_moe_ffn for llama / qwen2moe / qwen3moe.
  int64_t n_experts = 0, n_used = 0, expert_ffn = 0, shared_ffn = 0;
  int64_t gating = 1;           // 1: softmax over all experts, 2: sigmoid, 3: softmax over the k selected
  bool norm_weights = false;    // divide the k weights by their sum
  double weights_scale = 1.0;
  // Sliding windows and Gemma (llama.cpp's gemma2 / gemma3 graphs):
  int64_t window = 0;          // <arch>.attention.sliding_window; 0: none
  int64_t window_pattern = 0;  // 0: every layer slides; n: layer l slides iff l % n < n - 1
  bool gemma = false;          // scaled embeddings, GeGLU, post-norms
  double attn_softcap = 0.0, final_softcap = 0.0;
  double attn_scale = 0.0;     // 0: 1 / sqrt(head_dim)
  double rope_base_swa = 0.0;  // gemma3's sliding layers: base 10000, no scaling

  bool sliding(int64_t layer) const {
    return window > 0 && (window_pattern == 0 || layer % window_pattern < window_pattern - 1);
  }
};

// The window and Gemma's settings, with llama.cpp's defaults: gemma2 window 4096, caps 50 / 30;
// gemma3 neither cap, local RoPE base 10000; the 27B query scale 1 / sqrt(dim / n_heads).
void read_window_hyper(const Metadata& m, const std::string& arch, Hyper& h) {
  const std::string a = arch + ".";
  h.gemma = arch == "gemma2" || arch == "gemma3";
  if (!h.gemma && arch != "llama") return;  // llama.cpp runs phi3 without its window (config.cpp caps it)
  h.window = m.get_int_opt(a + "attention.sliding_window").value_or(arch == "gemma2" ? 4096 : 0);
  if (!h.gemma) return;
  h.window_pattern = arch == "gemma2" ? 2 : 6;
  if (arch == "gemma2") {
    h.attn_softcap = m.get_float_opt(a + "attn_logit_softcapping").value_or(50.0);
    h.final_softcap = m.get_float_opt(a + "final_logit_softcapping").value_or(30.0);
  } else {
    h.rope_base_swa = 10000.0;
  }
  if ((arch == "gemma2" && h.n_layers == 46) || (arch == "gemma3" && h.n_layers == 62)) {
    h.attn_scale = 1.0 / std::sqrt(static_cast<double>(h.dim / h.n_heads));
  }
}

// The MoE keys, with each architecture's defaults as llama.cpp applies them.
void read_moe_hyper(const Metadata& m, const std::string& arch, Hyper& h) {
  const std::string a = arch + ".";
  h.n_experts = m.get_int_opt(a + "expert_count").value_or(0);
  if (h.n_experts == 0) return;
  h.n_used = m.get_int(a + "expert_used_count");
  const bool qwen = arch != "llama";
  h.expert_ffn = m.get_int_opt(a + "expert_feed_forward_length").value_or(qwen ? h.ffn_dim / h.n_used : h.ffn_dim);
  if (arch == "qwen2moe") h.shared_ffn = m.get_int_opt(a + "expert_shared_feed_forward_length").value_or(h.ffn_dim);
  h.gating = m.get_int_opt(a + "expert_gating_func").value_or(1);
  h.norm_weights = m.get_bool_opt(a + "expert_weights_norm").value_or(arch != "qwen2moe");
  const double scale = m.get_float_opt(a + "expert_weights_scale").value_or(0.0);
  h.weights_scale = scale == 0.0 ? 1.0 : scale;
}

[[noreturn]] void bad(const ModelFile& f, const std::string& why) {
  throw FormatError(f.path + ": " + why);
}

Hyper read_hyper(const ModelFile& f) {
  const Metadata& m = f.meta;
  Hyper h;
  std::string arch;
  try {
    arch = m.get_string("general.architecture");
    if (arch != "llama" && arch != "qwen2" && arch != "qwen2moe" && arch != "qwen3moe" && arch != "qwen3" &&
        arch != "phi3" && arch != "gemma2" && arch != "gemma3") {
      bad(f, "reference_forward: unsupported architecture '" + arch + "'");
    }
    const std::string a = arch + ".";
    h.neox_rope = arch != "llama";
    h.qk_norm = arch == "qwen3moe" || arch == "qwen3" || arch == "gemma3";
    h.phi3 = arch == "phi3";
    h.dim = m.get_int(a + "embedding_length");
    h.n_layers = m.get_int(a + "block_count");
    h.n_heads = m.get_int(a + "attention.head_count");
    h.n_kv_heads = m.get_int_opt(a + "attention.head_count_kv").value_or(h.n_heads);
    h.ffn_dim = m.get_int(a + "feed_forward_length");
    if (h.n_heads <= 0 || h.n_kv_heads <= 0 || h.n_heads % h.n_kv_heads != 0) bad(f, "bad head counts");
    h.head_dim = m.get_int_opt(a + "attention.key_length").value_or(h.dim / h.n_heads);
    if (m.get_int_opt(a + "attention.value_length").value_or(h.head_dim) != h.head_dim) {
      bad(f, "reference_forward: key_length != value_length is not supported");
    }
    h.rope_dim = m.get_int_opt(a + "rope.dimension_count").value_or(h.head_dim);
    h.rms_eps = m.get_float_opt(a + "attention.layer_norm_rms_epsilon").value_or(1e-5);
    h.rope_base = m.get_float_opt(a + "rope.freq_base").value_or(10000.0);
    auto scaling = m.get_string_opt(a + "rope.scaling.type");
    auto factor = m.get_float_opt(a + "rope.scaling.factor");
    if (scaling && *scaling == "linear" && factor && *factor > 0) h.rope_scale = 1.0 / *factor;
    read_moe_hyper(m, arch, h);
    read_window_hyper(m, arch, h);
  } catch (const FormatError& e) {
    std::string what = e.what();
    if (what.rfind(f.path + ":", 0) == 0) throw;
    bad(f, what);
  }
  if (h.dim <= 0 || h.n_layers <= 0 || h.head_dim <= 0 || h.ffn_dim <= 0 || h.rope_dim <= 0 ||
      h.rope_dim > h.head_dim || h.rope_dim % 2 != 0) {
    bad(f, "inconsistent hyper-parameters");
  }
  if (h.n_experts != 0 && (h.n_experts < 0 || h.n_used < 1 || h.n_used > h.n_experts || h.expert_ffn <= 0 ||
                           h.gating < 1 || h.gating > 3)) {
    bad(f, "reference_forward: inconsistent expert hyper-parameters");
  }
  h.n_vocab = f.require("token_embd.weight").shape.size() == 2 ? f.require("token_embd.weight").shape[1] : 0;
  return h;
}

// A weight dequantized to float: `rows` rows of `cols` elements (GGUF shape {cols, rows}).
struct Dense {
  int64_t cols = 0, rows = 0;
  std::vector<float> w;  // [rows][cols]
  float at(int64_t r, int64_t c) const { return w[static_cast<size_t>(r * cols + c)]; }
};

Dense load(const ModelFile& f, const std::string& name, int64_t cols, int64_t rows) {
  const TensorView& t = f.require(name);
  const int64_t t_rows = t.shape.size() >= 2 ? t.shape[1] : 1;
  if (t.row_length() != cols || t_rows != rows || t.n_elements() != cols * rows) {
    bad(f, "tensor '" + name + "' has shape [" + std::to_string(t.row_length()) + ", " +
               std::to_string(t_rows) + "], expected [" + std::to_string(cols) + ", " + std::to_string(rows) + "]");
  }
  Dense d{cols, rows, std::vector<float>(static_cast<size_t>(cols * rows))};
  for (int64_t r = 0; r < rows; ++r) {
    t.dequantize_row_to(r, std::span<float>(d.w).subspan(static_cast<size_t>(r * cols), static_cast<size_t>(cols)));
  }
  return d;
}

// Rows [first, first + n) of W, as their own matrix (a fused weight's parts).
Dense row_range(const Dense& W, int64_t first, int64_t n) {
  const auto begin = W.w.begin() + static_cast<std::ptrdiff_t>(first * W.cols);
  return {W.cols, n, std::vector<float>(begin, begin + static_cast<std::ptrdiff_t>(n * W.cols))};
}

std::vector<double> load_vector(const ModelFile& f, const std::string& name, int64_t n) {
  Dense d = load(f, name, n, 1);
  return std::vector<double>(d.w.begin(), d.w.end());
}

// y[r] = sum_c W[r][c] x[c]   (W: rows x cols, x: [cols], y: [rows])
std::vector<double> matvec(const Dense& W, const std::vector<double>& x) {
  std::vector<double> y(static_cast<size_t>(W.rows), 0.0);
  for (int64_t r = 0; r < W.rows; ++r) {
    double acc = 0.0;
    for (int64_t c = 0; c < W.cols; ++c) acc += static_cast<double>(W.at(r, c)) * x[static_cast<size_t>(c)];
    y[static_cast<size_t>(r)] = acc;
  }
  return y;
}

// x / sqrt(mean(x^2) + eps) * gain   (x, gain: [dim])
std::vector<double> rmsnorm(const std::vector<double>& x, const std::vector<double>& gain, double eps) {
  double ss = 0.0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * gain[i];
  return y;
}

// RMSNorm of every head of x ([n_heads * head_dim]) with one gain vector of head_dim.
void norm_heads(std::vector<double>& x, const std::vector<double>& gain, double eps) {
  const size_t hd = gain.size();
  for (size_t off = 0; off < x.size(); off += hd) {
    const std::vector<double> head(x.begin() + static_cast<std::ptrdiff_t>(off),
                                   x.begin() + static_cast<std::ptrdiff_t>(off + hd));
    const std::vector<double> normed = rmsnorm(head, gain, eps);
    std::copy(normed.begin(), normed.end(), x.begin() + static_cast<std::ptrdiff_t>(off));
  }
}

// Rotates one head (v: [head_dim]) in place for position `pos`. Only the first rope_dim
// elements rotate; theta_i = pos * scale * base^(-2i/rope_dim) / factor_i.
// A sliding layer of gemma3 passes local = true: base rope_base_swa, no scaling.
void rope(std::span<double> v, int64_t pos, const Hyper& h, const std::vector<double>& factors, bool local) {
  const int64_t half = h.rope_dim / 2;
  const double base = local ? h.rope_base_swa : h.rope_base, scale = local ? 1.0 : h.rope_scale;
  for (int64_t i = 0; i < half; ++i) {
    double theta = static_cast<double>(pos) * scale *
                   std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(h.rope_dim));
    if (!factors.empty()) theta /= factors[static_cast<size_t>(i)];
    const size_t a = static_cast<size_t>(h.neox_rope ? i : 2 * i);
    const size_t b = static_cast<size_t>(h.neox_rope ? i + half : 2 * i + 1);
    const double x0 = v[a], x1 = v[b];
    v[a] = x0 * std::cos(theta) - x1 * std::sin(theta);
    v[b] = x0 * std::sin(theta) + x1 * std::cos(theta);
  }
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }

// gelu in its tanh form (ggml_gelu).
double gelu(double x) {
  const double pi = std::acos(-1.0);
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}

// One layer's queries, keys and values for the whole sequence, RoPE applied: q [T][q_dim],
// k and v [T][kv_dim].
struct Qkv {
  std::vector<std::vector<double>> q, k, v;
};

Qkv project_qkv(const ModelFile& f, const Hyper& h, int64_t layer, const std::vector<std::vector<double>>& xn,
                const std::vector<double>& rope_factors) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const int64_t q_dim = h.n_heads * h.head_dim, kv_dim = h.n_kv_heads * h.head_dim;
  const bool fused = h.phi3 && f.find(p + "attn_qkv.weight") != nullptr;
  const Dense wqkv = fused ? load(f, p + "attn_qkv.weight", h.dim, q_dim + 2 * kv_dim) : Dense{};
  const Dense wq = fused ? row_range(wqkv, 0, q_dim) : load(f, p + "attn_q.weight", h.dim, q_dim);
  const Dense wk = fused ? row_range(wqkv, q_dim, kv_dim) : load(f, p + "attn_k.weight", h.dim, kv_dim);
  const Dense wv = fused ? row_range(wqkv, q_dim + kv_dim, kv_dim) : load(f, p + "attn_v.weight", h.dim, kv_dim);
  auto bias = [&](const char* which, int64_t n) {
    std::string name = p + "attn_" + which + ".bias";
    return f.find(name) ? load_vector(f, name, n) : std::vector<double>(static_cast<size_t>(n), 0.0);
  };
  const std::vector<double> bq = bias("q", q_dim), bk = bias("k", kv_dim), bv = bias("v", kv_dim);
  std::vector<double> qn, kn;  // [head_dim] per-head norm gains (qwen3moe)
  if (h.qk_norm) {
    qn = load_vector(f, p + "attn_q_norm.weight", h.head_dim);
    kn = load_vector(f, p + "attn_k_norm.weight", h.head_dim);
  }

  const size_t T = xn.size();
  std::vector<std::vector<double>> q(T), k(T), v(T);  // [T][q_dim], [T][kv_dim], [T][kv_dim]
  for (size_t t = 0; t < T; ++t) {
    q[t] = matvec(wq, xn[t]);
    k[t] = matvec(wk, xn[t]);
    v[t] = matvec(wv, xn[t]);
    for (int64_t i = 0; i < q_dim; ++i) q[t][static_cast<size_t>(i)] += bq[static_cast<size_t>(i)];
    for (int64_t i = 0; i < kv_dim; ++i) {
      k[t][static_cast<size_t>(i)] += bk[static_cast<size_t>(i)];
      v[t][static_cast<size_t>(i)] += bv[static_cast<size_t>(i)];
    }
    const auto hd = static_cast<size_t>(h.head_dim);
    if (h.qk_norm) {
      norm_heads(q[t], qn, h.rms_eps);
      norm_heads(k[t], kn, h.rms_eps);
    }
    const bool local = h.sliding(layer) && h.rope_base_swa > 0.0;
    for (int64_t hh = 0; hh < h.n_heads; ++hh)
      rope(std::span(q[t]).subspan(static_cast<size_t>(hh) * hd, hd), static_cast<int64_t>(t), h, rope_factors, local);
    for (int64_t hh = 0; hh < h.n_kv_heads; ++hh)
      rope(std::span(k[t]).subspan(static_cast<size_t>(hh) * hd, hd), static_cast<int64_t>(t), h, rope_factors, local);
  }
  return {std::move(q), std::move(k), std::move(v)};
}

double attention_scale(const Hyper& h) {
  return h.attn_scale > 0.0 ? h.attn_scale : 1.0 / std::sqrt(static_cast<double>(h.head_dim));
}

// One attention block for the whole sequence. xn: [T][dim] normalized inputs; returns the
// attention output after attn_output, [T][dim].
std::vector<std::vector<double>> attention(const ModelFile& f, const Hyper& h, int64_t layer,
                                           const std::vector<std::vector<double>>& xn,
                                           const std::vector<double>& rope_factors) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const int64_t q_dim = h.n_heads * h.head_dim;
  const Dense wo = load(f, p + "attn_output.weight", q_dim, h.dim);
  const auto [q, k, v] = project_qkv(f, h, layer, xn, rope_factors);
  const size_t T = xn.size();
  const int64_t group = h.n_heads / h.n_kv_heads;  // query heads sharing one KV head
  const double scale = attention_scale(h);
  const auto window = static_cast<size_t>(h.sliding(layer) ? h.window : 0);
  std::vector<std::vector<double>> out(T);
  for (size_t t = 0; t < T; ++t) {
    std::vector<double> heads(static_cast<size_t>(q_dim), 0.0);  // concatenated head outputs
    // Causal: position t attends to positions 0..t; a sliding layer only to t - window + 1..t.
    const size_t first = window > 0 && t + 1 > window ? t + 1 - window : 0;
    for (int64_t hh = 0; hh < h.n_heads; ++hh) {
      const int64_t q_off = hh * h.head_dim, kv_off = (hh / group) * h.head_dim;
      std::vector<double> score(t + 1 - first);
      for (size_t s = first; s <= t; ++s) {
        double dot = 0.0;
        for (int64_t i = 0; i < h.head_dim; ++i) dot += q[t][static_cast<size_t>(q_off + i)] * k[s][static_cast<size_t>(kv_off + i)];
        score[s - first] = dot * scale;
        if (h.attn_softcap > 0.0) score[s - first] = h.attn_softcap * std::tanh(score[s - first] / h.attn_softcap);
      }
      const double mx = *std::max_element(score.begin(), score.end());
      double sum = 0.0;
      for (double& sc : score) sum += (sc = std::exp(sc - mx));
      for (size_t s = first; s <= t; ++s) {
        const double w = score[s - first] / sum;
        for (int64_t i = 0; i < h.head_dim; ++i) heads[static_cast<size_t>(q_off + i)] += w * v[s][static_cast<size_t>(kv_off + i)];
      }
    }
    out[t] = matvec(wo, heads);
  }
  return out;
}

// SwiGLU feed-forward: down(silu(gate(x)) * up(x)). xn: [T][dim]; returns [T][dim].
struct SwiGlu {
  Dense gate, up, down;
  bool gelu_gate = false;  // GeGLU (gemma): gelu instead of silu

  // down(silu(gate x) * up x)
  std::vector<double> operator()(const std::vector<double>& x) const {
    std::vector<double> g = matvec(gate, x);
    const std::vector<double> u = matvec(up, x);
    for (size_t i = 0; i < g.size(); ++i) g[i] = (gelu_gate ? gelu(g[i]) : silu(g[i])) * u[i];
    return matvec(down, g);
  }
};

std::vector<std::vector<double>> feed_forward(const ModelFile& f, const Hyper& h, int64_t layer,
                                              const std::vector<std::vector<double>>& xn) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  SwiGlu ffn;
  if (h.phi3) {  // one ffn_up of 2 ffn_dim rows: gate first, then up
    const Dense gate_up = load(f, p + "ffn_up.weight", h.dim, 2 * h.ffn_dim);
    ffn = {row_range(gate_up, 0, h.ffn_dim), row_range(gate_up, h.ffn_dim, h.ffn_dim),
           load(f, p + "ffn_down.weight", h.ffn_dim, h.dim)};
  } else {
    ffn = {load(f, p + "ffn_gate.weight", h.dim, h.ffn_dim), load(f, p + "ffn_up.weight", h.dim, h.ffn_dim),
           load(f, p + "ffn_down.weight", h.ffn_dim, h.dim), h.gemma};
  }
  std::vector<std::vector<double>> out(xn.size());
  for (size_t t = 0; t < xn.size(); ++t) out[t] = ffn(xn[t]);
  return out;
}

// Expert e of a stacked {cols, rows, n_experts} tensor.
Dense load_expert(const ModelFile& f, const std::string& name, int64_t cols, int64_t rows, int64_t n_experts,
                  int64_t e) {
  const TensorView& t = f.require(name);
  if (t.shape != std::vector<int64_t>{cols, rows, n_experts}) bad(f, "tensor '" + name + "' has the wrong shape");
  Dense d{cols, rows, std::vector<float>(static_cast<size_t>(cols * rows))};
  for (int64_t r = 0; r < rows; ++r) {
    t.dequantize_row_to(e * rows + r,
                        std::span<float>(d.w).subspan(static_cast<size_t>(r * cols), static_cast<size_t>(cols)));
  }
  return d;
}

// The k experts of one token and their weights: probabilities by the gating function, the k
// largest (ties: lowest index), then softmax over them (gating 3), normalization and scale.
std::vector<std::pair<int64_t, double>> route(const Hyper& h, const std::vector<double>& logits) {
  std::vector<double> p = logits;
  if (h.gating == 1) {
    const double mx = *std::max_element(p.begin(), p.end());
    double sum = 0.0;
    for (double& v : p) sum += (v = std::exp(v - mx));
    for (double& v : p) v /= sum;
  } else if (h.gating == 2) {
    for (double& v : p) v = 1.0 / (1.0 + std::exp(-v));
  }
  std::vector<int64_t> order(p.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)]; });
  std::vector<std::pair<int64_t, double>> sel;
  for (int64_t i = 0; i < h.n_used; ++i) sel.emplace_back(order[static_cast<size_t>(i)], p[static_cast<size_t>(order[static_cast<size_t>(i)])]);
  if (h.gating == 3) {
    double mx = sel[0].second, sum = 0.0;
    for (auto& [e, w] : sel) mx = std::max(mx, w);
    for (auto& [e, w] : sel) sum += (w = std::exp(w - mx));
    for (auto& [e, w] : sel) w /= sum;
  }
  double sum = 0.0;
  for (const auto& [e, w] : sel) sum += w;
  for (auto& [e, w] : sel) w = (h.norm_weights ? w / std::max(sum, 6.103515625e-5) : w) * h.weights_scale;
  return sel;
}

// Mixture of experts: sum over the token's k experts of weight * expert(x), plus qwen2moe's shared
// expert times sigmoid(w_gate_shexp . x).
std::vector<std::vector<double>> moe_feed_forward(const ModelFile& f, const Hyper& h, int64_t layer,
                                                  const std::vector<std::vector<double>>& xn) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const Dense router = load(f, p + "ffn_gate_inp.weight", h.dim, h.n_experts);
  std::vector<SwiGlu> experts;
  for (int64_t e = 0; e < h.n_experts; ++e) {
    experts.push_back({load_expert(f, p + "ffn_gate_exps.weight", h.dim, h.expert_ffn, h.n_experts, e),
                       load_expert(f, p + "ffn_up_exps.weight", h.dim, h.expert_ffn, h.n_experts, e),
                       load_expert(f, p + "ffn_down_exps.weight", h.expert_ffn, h.dim, h.n_experts, e)});
  }
  std::optional<SwiGlu> shared;
  std::vector<double> shared_gate;
  if (h.shared_ffn > 0) {
    shared = SwiGlu{load(f, p + "ffn_gate_shexp.weight", h.dim, h.shared_ffn),
                    load(f, p + "ffn_up_shexp.weight", h.dim, h.shared_ffn),
                    load(f, p + "ffn_down_shexp.weight", h.shared_ffn, h.dim)};
    shared_gate = load_vector(f, p + "ffn_gate_inp_shexp.weight", h.dim);
  }
  std::vector<std::vector<double>> out(xn.size());
  for (size_t t = 0; t < xn.size(); ++t) {
    out[t].assign(static_cast<size_t>(h.dim), 0.0);
    for (const auto& [e, w] : route(h, matvec(router, xn[t]))) {
      const std::vector<double> y = experts[static_cast<size_t>(e)](xn[t]);
      for (size_t i = 0; i < y.size(); ++i) out[t][i] += w * y[i];
    }
    if (!shared) continue;
    double g = 0.0;
    for (size_t i = 0; i < xn[t].size(); ++i) g += shared_gate[i] * xn[t][i];
    const std::vector<double> y = (*shared)(xn[t]);
    for (size_t i = 0; i < y.size(); ++i) out[t][i] += y[i] / (1.0 + std::exp(-g));
  }
  return out;
}

}  // namespace

namespace {

using Rows = std::vector<std::vector<double>>;

Rows normalized(const ModelFile& f, const Hyper& h, const Rows& x, const std::string& norm_name) {
  const std::vector<double> gain = load_vector(f, norm_name, h.dim);
  Rows xn(x.size());
  for (size_t t = 0; t < x.size(); ++t) xn[t] = rmsnorm(x[t], gain, h.rms_eps);
  return xn;
}

// The residual stream [T][dim] after the embedding and layers [0, n_layers).
Rows residual_stream(const ModelFile& f, const Hyper& h, std::span<const int32_t> tokens, int64_t n_layers,
                     const std::vector<double>& rope_factors) {
  if (tokens.empty()) throw UsageError("reference_forward: no tokens");
  if (h.n_vocab <= 0) bad(f, "token_embd.weight must be 2-D");
  for (int32_t tok : tokens) {
    if (tok < 0 || tok >= h.n_vocab) {
      throw UsageError("reference_forward: token id " + std::to_string(tok) + " outside vocabulary of " +
                       std::to_string(h.n_vocab));
    }
  }
  const size_t T = tokens.size();
  Rows x(T);
  {
    const TensorView& embd = f.require("token_embd.weight");
    if (embd.row_length() != h.dim) bad(f, "token_embd.weight rows are not embedding_length long");
    std::vector<float> row(static_cast<size_t>(h.dim));
    for (size_t t = 0; t < T; ++t) {
      embd.dequantize_row_to(tokens[t], row);
      x[t].assign(row.begin(), row.end());
      if (h.gemma) {  // llama.cpp scales by sqrtf(n_embd), a float
        for (double& v : x[t]) v *= static_cast<double>(std::sqrt(static_cast<float>(h.dim)));
      }
    }
  }
  auto add_into_residual = [&](const Rows& delta) {
    for (size_t t = 0; t < T; ++t)
      for (size_t i = 0; i < x[t].size(); ++i) x[t][i] += delta[t][i];
  };
  // Gemma normalizes each sub-block's output before it joins the residual stream.
  auto post_norm = [&](Rows y, const std::string& norm_name) {
    if (!h.gemma) return y;
    const std::vector<double> gain = load_vector(f, norm_name, h.dim);
    for (auto& row : y) row = rmsnorm(row, gain, h.rms_eps);
    return y;
  };
  for (int64_t l = 0; l < n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add_into_residual(post_norm(attention(f, h, l, normalized(f, h, x, p + "attn_norm.weight"), rope_factors),
                                p + "post_attention_norm.weight"));
    const Rows xn = normalized(f, h, x, p + "ffn_norm.weight");
    add_into_residual(post_norm(h.n_experts > 0 ? moe_feed_forward(f, h, l, xn) : feed_forward(f, h, l, xn),
                                p + "post_ffw_norm.weight"));
  }
  return x;
}

std::vector<double> rope_factors_of(const ModelFile& f, const Hyper& h) {
  return f.find("rope_freqs.weight") ? load_vector(f, "rope_freqs.weight", h.rope_dim / 2) : std::vector<double>{};
}

}  // namespace

std::vector<std::vector<double>> reference_forward(const ModelFile& f, std::span<const int32_t> tokens) {
  const Hyper h = read_hyper(f);
  const Rows x = residual_stream(f, h, tokens, h.n_layers, rope_factors_of(f, h));
  const Rows xn = normalized(f, h, x, "output_norm.weight");
  const Dense head = load(f, f.find("output.weight") ? "output.weight" : "token_embd.weight", h.dim, h.n_vocab);
  Rows logits(tokens.size());
  for (size_t t = 0; t < tokens.size(); ++t) {
    logits[t] = matvec(head, xn[t]);
    if (h.final_softcap > 0.0) {
      for (double& v : logits[t]) v = h.final_softcap * std::tanh(v / h.final_softcap);
    }
  }
  return logits;
}

ReferenceAttentionRow reference_attention_row(const ModelFile& f, std::span<const int32_t> tokens, int64_t layer,
                                              int64_t head) {
  const Hyper h = read_hyper(f);
  if (layer < 0 || layer >= h.n_layers) throw UsageError("reference_attention_row: no layer " + std::to_string(layer));
  if (head < 0 || head >= h.n_heads) throw UsageError("reference_attention_row: no head " + std::to_string(head));
  const std::vector<double> rope_factors = rope_factors_of(f, h);
  const Rows x = residual_stream(f, h, tokens, layer, rope_factors);
  const std::string p = "blk." + std::to_string(layer) + ".";
  const Qkv qkv = project_qkv(f, h, layer, normalized(f, h, x, p + "attn_norm.weight"), rope_factors);
  ReferenceAttentionRow row;
  const auto t = static_cast<int64_t>(tokens.size()) - 1;
  row.kv_head = head / (h.n_heads / h.n_kv_heads);
  row.head_dim = h.head_dim;
  row.scale = attention_scale(h);
  row.softcap = h.attn_softcap;
  row.window = h.sliding(layer) ? h.window : 0;
  row.first = row.window > 0 && t + 1 > row.window ? t + 1 - row.window : 0;
  const auto hd = static_cast<size_t>(h.head_dim);
  const auto q0 = qkv.q[static_cast<size_t>(t)].begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(head) * hd);
  row.q.assign(q0, q0 + static_cast<std::ptrdiff_t>(hd));
  for (int64_t s = 0; s <= t; ++s) {
    const auto off = static_cast<std::ptrdiff_t>(static_cast<size_t>(row.kv_head) * hd);
    const auto& ks = qkv.k[static_cast<size_t>(s)];
    const auto& vs = qkv.v[static_cast<size_t>(s)];
    row.k.emplace_back(ks.begin() + off, ks.begin() + off + static_cast<std::ptrdiff_t>(hd));
    row.v.emplace_back(vs.begin() + off, vs.begin() + off + static_cast<std::ptrdiff_t>(hd));
  }
  return row;
}

std::vector<int32_t> reference_greedy(const ModelFile& file, std::span<const int32_t> prompt, int n_new) {
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  std::vector<int32_t> out;
  for (int i = 0; i < n_new; ++i) {
    const std::vector<double> last = reference_forward(file, seq).back();
    const auto best = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    out.push_back(best);
    seq.push_back(best);
  }
  return out;
}

}  // namespace peregrine
