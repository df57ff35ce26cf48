// Figure 10.7: one real attention row of the loaded model (layer, head, position), its query, keys
// and values from the plain reference forward (reference/reference_forward.h). Three results:
// the full softmax in double (every score at once), the online softmax taken tile by tile as the
// figure draws it (running maximum, rescaling, running sum), and the engine's own attention
// kernel (kernels/attention.h) on an f32 cache holding those keys and values.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/attention.h"
#include "kv/kv_cache.h"
#include "reference/reference_forward.h"
#include "server/api_error.h"
#include "server/lab_run.h"

namespace peregrine::server::lab {
namespace {

using nlohmann::json;

// The reference forward is plain scalar code: (position + 1) x (layer + 1) x a layer's weights
// multiply-adds at most this many (a few seconds on one thread).
constexpr double kMaxReferenceWork = 2e9;

struct Row {
  std::vector<TokenId> tokens;
  int64_t layer = 0, head = 0, tile = kAttentionTile;
};

double score_of(const ReferenceAttentionRow& r, size_t p) {
  double dot = 0;
  for (size_t i = 0; i < r.q.size(); ++i) dot += r.q[i] * r.k[p][i];
  double s = dot * r.scale;
  if (r.softcap > 0) s = r.softcap * std::tanh(s / r.softcap);
  return s;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

// The engine's kernel on a one-layer, one-KV-head f32 cache holding the row's keys and values.
std::vector<double> kernel_row(const ReferenceAttentionRow& r) {
  const auto n = static_cast<int64_t>(r.k.size());
  const int64_t hd = r.head_dim;
  KvCache kv(KvShape{1, 1, hd}, KvType::F32, (n + 15) / 16, 16);
  kv.reserve(0, n);
  std::vector<float> k(static_cast<size_t>(hd)), v(static_cast<size_t>(hd));
  for (int64_t p = 0; p < n; ++p) {
    std::copy(r.k[static_cast<size_t>(p)].begin(), r.k[static_cast<size_t>(p)].end(), k.begin());
    std::copy(r.v[static_cast<size_t>(p)].begin(), r.v[static_cast<size_t>(p)].end(), v.begin());
    kv.write_row(0, kv.row_of(0, p), k, v);
  }
  std::vector<float> q(r.q.begin(), r.q.end()), out(static_cast<size_t>(hd));
  std::vector<float> scratch(static_cast<size_t>(attention_scratch_floats(1, hd)));
  const BlockTable& table = *kv.block_table(0);
  attention(q, 1, kv.layer_view(0), table.blocks(), n,
            AttentionParams(static_cast<float>(r.scale), r.window, static_cast<float>(r.softcap)), out, scratch);
  return {out.begin(), out.end()};
}

json attention_run(const Context& c, const Row& row) {
  const ReferenceAttentionRow r = reference_attention_row(c.model.model().file(), row.tokens, row.layer, row.head);
  const size_t n = r.k.size(), hd = static_cast<size_t>(r.head_dim), first = static_cast<size_t>(r.first);
  std::vector<double> scores(n, -std::numeric_limits<double>::infinity());
  for (size_t p = first; p < n; ++p) scores[p] = score_of(r, p);

  // Full softmax: the largest score first, then every weight.
  const double mx = *std::max_element(scores.begin() + static_cast<std::ptrdiff_t>(first), scores.end());
  double sum = 0;
  std::vector<double> weights(n, 0.0), full(hd, 0.0);
  for (size_t p = first; p < n; ++p) sum += (weights[p] = std::exp(scores[p] - mx));
  for (size_t p = first; p < n; ++p) {
    weights[p] /= sum;
    for (size_t i = 0; i < hd; ++i) full[i] += weights[p] * r.v[p][i];
  }

  // Online softmax, tile by tile: no score row longer than a tile, the running maximum raised
  // once per tile, what was summed so far rescaled by exp(old max - new max).
  json tiles = json::array();
  double m = -std::numeric_limits<double>::infinity(), l = 0;
  std::vector<double> acc(hd, 0.0);
  const auto tile = static_cast<size_t>(row.tile);
  for (size_t start = first - first % tile; start < n; start += tile) {
    const size_t begin = std::max(start, first), end = std::min(start + tile, n);
    const double tile_max = *std::max_element(scores.begin() + static_cast<std::ptrdiff_t>(begin),
                                              scores.begin() + static_cast<std::ptrdiff_t>(end));
    const double new_m = std::max(m, tile_max);
    const double rescale = std::isinf(m) ? 0.0 : std::exp(m - new_m);
    l *= rescale;
    for (double& a : acc) a *= rescale;
    for (size_t p = begin; p < end; ++p) {
      const double e = std::exp(scores[p] - new_m);
      l += e;
      for (size_t i = 0; i < hd; ++i) acc[i] += e * r.v[p][i];
    }
    tiles.push_back({{"start", begin},
                     {"end", end},
                     {"tile_max", tile_max},
                     {"running_max_before", std::isinf(m) ? json(nullptr) : json(m)},
                     {"running_max", new_m},
                     {"rescale", std::isinf(m) ? json(nullptr) : json(rescale)},
                     {"running_sum", l}});
    m = new_m;
  }
  std::vector<double> online(hd);
  for (size_t i = 0; i < hd; ++i) online[i] = acc[i] / l;
  const std::vector<double> kernel = kernel_row(r);

  json finite_scores = json::array();
  for (size_t p = 0; p < n; ++p) finite_scores.push_back(p < first ? json(nullptr) : json(scores[p]));
  return {{"layer", row.layer},
          {"head", row.head},
          {"kv_head", r.kv_head},
          {"position", n - 1},
          {"head_dim", hd},
          {"tile", row.tile},
          {"kernel_tile", kAttentionTile},
          {"first", first},
          {"scores", finite_scores},
          {"weights", weights},
          {"tiles", tiles},
          {"full", full},
          {"online", online},
          {"kernel", kernel},
          {"max_abs_diff_online", max_abs_diff(online, full)},
          {"max_abs_diff_kernel", max_abs_diff(kernel, full)},
          {"tolerance", 1e-4}};
}

}  // namespace

LabJob attention(const Context& c, const nlohmann::json& body) {
  const ModelConfig& cfg = c.model.model().config();
  Row row;
  row.layer = int_field(body, "layer", 0, cfg.n_layers - 1, 0);
  row.head = int_field(body, "head", 0, cfg.n_heads - 1, 0);
  row.tile = int_field(body, "tile", 1, 256, kAttentionTile);
  const int64_t most = std::min<int64_t>(511, cfg.context_length - 1);
  const int64_t position = int_field(body, "position", 0, most, std::min<int64_t>(most, 80));
  const double layer_weights =
      4.0 * static_cast<double>(cfg.dim * cfg.dim) + 3.0 * static_cast<double>(cfg.dim * cfg.ffn_dim);
  if (static_cast<double>(position + 1) * static_cast<double>(row.layer + 1) * layer_weights > kMaxReferenceWork) {
    throw invalid_request(
        "this layer and position would take the plain reference too long; choose an earlier layer "
        "or position",
        "position");
  }
  row.tokens = prompt_of_length(prompt_field(c.model, body, position + 1), position + 1);
  return [c, row] { return attention_run(c, row); };
}

}  // namespace peregrine::server::lab
