// `peregrine plan`: what a model costs on a layout of accelerators (dist/plan.h): per device the
// weight and KV memory, the largest batch, the decode bound per token (bandwidth x TP / bytes,
// plus the layout's communication), the prefill bound, and the layouts that fit.
#include <cmath>
#include <cstdio>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "dist/layout.h"
#include "dist/plan.h"
#include "format/model_file.h"
#include "format/tensor_type.h"
#include "kv/kv_type.h"
#include "model/config.h"
#include "util/error.h"

namespace peregrine::cli {
namespace {

struct PlanArgs {
  std::optional<std::string> model, preset, params, device, link, disaggregate;
  std::string all_reduce = "ring";
  std::string dtype, kv_type = "f16";
  int64_t layers = 0, dim = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0, context = 0;
  int64_t experts = 0, experts_per_token = 0, tp = 1, pp = 1, ep = 1, max_devices = 8;
  double memory_gb = 0, bandwidth_gbs = 0, tflops = 0, link_gbs = 0, link_us = -1;
  dist::PlanOptions opt;
  bool json = false;
};

// "8e9", "8B", "70b", "1.1B", "560M": a parameter count.
double parse_count(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  const double scale = unit.empty() ? 1 : unit == "B" || unit == "b" ? 1e9 : unit == "M" || unit == "m" ? 1e6 : 0;
  if (used == 0 || scale == 0 || !(v > 0) || v * scale > 1e15) {
    throw UsageError("--params '" + text + "' is not a parameter count (8e9, 8B, 560M)");
  }
  return v * scale;
}

double bytes_per_param(const std::string& dtype) {
  const auto t = parse_tensor_type(dtype);
  if (!t) throw UsageError("--dtype '" + dtype + "': expected f32, f16, bf16, q8_0, q4_0, q4_k or q6_k");
  const TensorTypeInfo& info = tensor_type_info(*t);
  return static_cast<double>(info.block_bytes) / static_cast<double>(info.block_elems);
}

dist::PlanModel model_from_file(const std::string& path) {
  const ModelFile f = open_model_file(resolve_model_path(path));
  const ModelConfig c = ModelConfig::from_model_file(f);
  dist::PlanModel m;
  m.name = path;
  m.layers = c.n_layers;
  m.dim = c.dim;
  m.heads = c.n_heads;
  m.kv_heads = c.n_kv_heads;
  m.head_dim = c.head_dim;
  m.ffn = c.ffn_dim;
  m.vocab = c.n_vocab;
  m.context = c.context_length;
  double bytes = 0;
  for (const TensorView& t : f.tensors) {
    m.params += static_cast<double>(t.n_elements());
    bytes += static_cast<double>(t.data.size());
    if (t.name == "token_embd.weight" && !c.tied_output) m.embedding_params = static_cast<double>(t.n_elements());
  }
  m.active_params = m.params;
  m.bytes_per_param = bytes / m.params;
  return m;
}

dist::PlanModel resolve_model(const PlanArgs& a) {
  dist::PlanModel m;
  if (a.model) {
    m = model_from_file(*a.model);
  } else if (a.preset) {
    const auto p = dist::plan_model_preset(*a.preset);
    if (!p) throw UsageError("unknown --preset '" + *a.preset + "' (choose " + dist::plan_model_names() + ")");
    m = *p;
  } else if (!a.params) {
    throw UsageError("give a model: a GGUF file, --preset NAME, or --params N (with --layers, --kv-heads, ...)");
  }
  auto set = [](int64_t v, int64_t& field) {
    if (v > 0) field = v;
  };
  set(a.layers, m.layers);
  set(a.dim, m.dim);
  set(a.heads, m.heads);
  set(a.kv_heads, m.kv_heads);
  set(a.vocab, m.vocab);
  set(a.ffn, m.ffn);
  set(a.context, m.context);
  set(a.experts, m.experts);
  set(a.experts_per_token, m.experts_per_token);
  if (a.head_dim > 0) m.head_dim = a.head_dim;
  else if (m.head_dim == 0 && m.dim > 0 && m.heads > 0) m.head_dim = m.dim / m.heads;
  if (a.params) {
    m.params = m.active_params = parse_count(*a.params);
    m.embedding_params = 0;
    if (m.name.empty()) m.name = *a.params + " parameters";
  } else if (!a.model && a.ffn > 0) {
    dist::fill_params_from_shape(m, a.ffn);
  }
  if (!a.dtype.empty()) m.bytes_per_param = bytes_per_param(a.dtype);
  return m;
}

dist::PlanDevice resolve_device(const PlanArgs& a) {
  dist::PlanDevice d;
  if (a.device) {
    const auto named = dist::plan_device(*a.device);
    if (!named) throw UsageError("unknown --device '" + *a.device + "' (choose " + dist::plan_device_names() + ")");
    d = *named;
  } else {
    d.name = "custom";
  }
  if (a.memory_gb > 0) d.memory_bytes = a.memory_gb * 1e9;
  if (a.bandwidth_gbs > 0) d.bandwidth = a.bandwidth_gbs * 1e9;
  if (a.tflops > 0) d.flops = a.tflops * 1e12;
  if (d.memory_bytes <= 0 || d.bandwidth <= 0 || d.flops <= 0) {
    throw UsageError("give a device: --device " + dist::plan_device_names() + ", or --memory, --bandwidth and --tflops");
  }
  return d;
}

dist::PlanLink resolve_link(const PlanArgs& a) {
  dist::PlanLink l = *dist::plan_link("nvlink");
  if (a.link) {
    const auto named = dist::plan_link(*a.link);
    if (!named) throw UsageError("unknown --link '" + *a.link + "' (choose " + dist::plan_link_names() + ")");
    l = *named;
  }
  if (a.link_gbs > 0) l.bandwidth = a.link_gbs * 1e9, l.name = a.link ? l.name : "custom";
  if (a.link_us >= 0) l.latency = a.link_us * 1e-6;
  return l;
}

std::string gb(double bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GB", bytes / 1e9);
  return s;
}

nlohmann::json figures_json(const dist::PlanFigures& f) {
  nlohmann::json j = {{"tp", f.layout.tp},
                      {"pp", f.layout.pp},
                      {"ep", f.layout.ep},
                      {"devices", f.layout.devices()},
                      {"weight_bytes_per_device", f.weight_bytes},
                      {"kv_bytes_per_token_per_device", f.kv_bytes_per_token},
                      {"usable_bytes_per_device", f.usable_bytes},
                      {"fits", f.fits},
                      {"max_batch", f.max_batch},
                      {"decode_memory_ms", f.decode_memory_s * 1e3},
                      {"decode_comm_ms", f.decode_comm_s * 1e3},
                      {"decode_tokens_per_s", f.decode_tokens_per_s},
                      {"comm_bytes_per_token", f.comm_bytes_per_token},
                      {"prefill_tokens_per_s", f.prefill_tokens_per_s},
                      {"kv_transfer_ms", f.kv_transfer_s * 1e3}};
  if (f.refusal) j["refusal"] = *f.refusal;
  return j;
}

void print_figures(const std::string& title, const dist::PlanFigures& f, const PlanArgs& a, int64_t seq) {
  std::printf("%s (%d device%s: --tp %d --pp %d%s):\n", title.c_str(), f.layout.devices(),
              f.layout.devices() == 1 ? "" : "s", f.layout.tp, f.layout.pp,
              f.layout.ep > 1 ? (" --ep " + std::to_string(f.layout.ep)).c_str() : "");
  if (f.refusal) {
    std::printf("  cannot be cut this way: %s\n", f.refusal->c_str());
    return;
  }
  std::printf("  weights per device      %s of %s usable%s\n", gb(f.weight_bytes).c_str(), gb(f.usable_bytes).c_str(),
              f.fits ? "" : "  -> DOES NOT FIT");
  if (f.kv_bytes_per_token > 0) {
    std::printf("  KV per token per device %.1f KiB (%s)\n", f.kv_bytes_per_token / 1024, a.kv_type.c_str());
    std::printf("  largest batch           %lld sequences of %lld tokens\n", static_cast<long long>(f.max_batch),
                static_cast<long long>(seq));
  } else {
    std::printf("  KV cache                unknown without the shape (--layers, --kv-heads, --head-dim)\n");
  }
  std::printf("  decode bound, batch 1   %.3f ms memory + %.3f ms communication = %.1f tokens/s\n",
              f.decode_memory_s * 1e3, f.decode_comm_s * 1e3, f.decode_tokens_per_s);
  std::printf("  communication per token %.1f KiB sent per device (activations of %.0f bytes)\n",
              f.comm_bytes_per_token / 1024, a.opt.act_bytes);
  std::printf("  prefill bound           %.0f tokens/s (every device at its peak FLOP/s)\n", f.prefill_tokens_per_s);
}

// The fitting layout with the fastest decode (the fewest devices among those within 1%).
std::optional<nlohmann::json> recommended(const nlohmann::json& fitting) {
  std::optional<nlohmann::json> best;
  for (const auto& f : fitting) {
    if (!best) {
      best = f;
      continue;
    }
    const double tps = f["decode_tokens_per_s"], best_tps = (*best)["decode_tokens_per_s"];
    const bool faster = tps > best_tps * 1.01;
    const bool as_fast_on_fewer = tps > best_tps * 0.99 && f["devices"].get<int>() < (*best)["devices"].get<int>();
    if (faster || as_fast_on_fewer) best = f;
  }
  return best;
}

// How to launch a layout on real hosts: one rank per host from a hostfile, over TCP on the hosts'
// network (docs/architecture.md, "Several processes", says what each host needs).
std::string mpirun_line(const nlohmann::json& layout, const PlanArgs& a) {
  const int tp = layout["tp"], pp = layout["pp"], ep = layout["ep"];
  std::string line = "mpirun -np " + std::to_string(tp * pp) +
                     " --hostfile hosts --map-by node --mca btl tcp,self --mca btl_tcp_if_include 10.0.0.0/24 "
                     "peregrine serve " +
                     (a.model ? *a.model : std::string("MODEL"));
  if (tp > 1) line += " --tp " + std::to_string(tp);
  if (pp > 1) line += " --pp " + std::to_string(pp);
  if (ep > 1) line += " --ep";
  return line;
}

bool parse_plan_args(const Args& args, PlanArgs& a) {
  ArgParser p("plan", "What a model costs on a layout of accelerators: per device the weight and KV memory,\n"
                      "the largest batch, the decode bound per token (bandwidth x TP / bytes, plus the layout's\n"
                      "communication), the prefill bound, and the layouts that fit.");
  p.positional("MODEL", &a.model, "GGUF file or model name (or give --preset, or --params with the shape flags)");
  p.option("--preset", &a.preset, "NAME", "a known shape: " + dist::plan_model_names());
  p.option("--params", &a.params, "N", "parameters: 8e9, 8B, 560M (overrides the file's or preset's)");
  p.option("--layers", &a.layers, "N", "transformer layers", 0, 1 << 20);
  p.option("--dim", &a.dim, "N", "hidden size", 0, 1 << 24);
  p.option("--heads", &a.heads, "N", "attention heads", 0, 1 << 20);
  p.option("--kv-heads", &a.kv_heads, "N", "KV heads (GQA/MQA)", 0, 1 << 20);
  p.option("--head-dim", &a.head_dim, "N", "head dimension (default dim / heads)", 0, 1 << 20);
  p.option("--ffn", &a.ffn, "N", "feed-forward width (with the shape: the parameter count)", 0, 1 << 24);
  p.option("--vocab", &a.vocab, "N", "vocabulary", 0, 1 << 30);
  p.option("--context", &a.context, "N", "context length", 0, 1 << 30);
  p.option("--experts", &a.experts, "N", "routed experts per MoE layer", 0, 1 << 16);
  p.option("--experts-per-token", &a.experts_per_token, "K", "experts each token uses", 0, 1 << 16);
  p.option("--dtype", &a.dtype, "TYPE", "weight type: f32, f16, bf16, q8_0, q4_0, q4_k, q6_k (default: the file's, else f16)");
  p.option("--kv-type", &a.kv_type, "TYPE", "KV cache type: f32, f16, bf16, q8_0");
  p.option("--device", &a.device, "NAME", "accelerator: " + dist::plan_device_names());
  p.option("--memory", &a.memory_gb, "GB", "device memory (overrides --device's)", 0, 1e9);
  p.option("--bandwidth", &a.bandwidth_gbs, "GB/S", "device memory bandwidth", 0, 1e9);
  p.option("--tflops", &a.tflops, "T", "device dense 16-bit TFLOP/s", 0, 1e9);
  p.option("--link", &a.link, "NAME", "interconnect: " + dist::plan_link_names() + " (default nvlink)");
  p.option("--link-bandwidth", &a.link_gbs, "GB/S", "link bandwidth per direction", 0, 1e9);
  p.option("--link-latency", &a.link_us, "US", "link latency per message", 0, 1e9);
  p.option("--tp", &a.tp, "T", "tensor-parallel devices", 1, 4096);
  p.option("--pp", &a.pp, "P", "pipeline stages", 1, 4096);
  p.option("--ep", &a.ep, "E", "expert-parallel devices (MoE)", 1, 4096);
  p.option("--disaggregate", &a.disaggregate, "PREFILL:DECODE", "devices in the prefill and decode pools");
  p.option("--seq-len", &a.opt.seq_len, "N", "tokens per sequence for the batch figure (default: context)", 0, 1 << 30);
  p.option("--prompt-len", &a.opt.prompt_len, "N", "prompt tokens moved per request when disaggregated", 1, 1 << 30);
  p.option("--all-reduce", &a.all_reduce, "ring|gather",
           "how tensor-parallel sums move: ring (NCCL; default) or gather (peregrine's CPU ranks over MPI)");
  p.option("--act-bytes", &a.opt.act_bytes, "B", "bytes per activation sent (2: f16; peregrine's CPU ranks: 4)", 0.5, 8);
  p.option("--mem-util", &a.opt.memory_utilization, "F", "share of device memory usable", 0.05, 1);
  p.option("--max-devices", &a.max_devices, "N", "largest layout listed (8: one node)", 1, 1 << 16);
  p.flag("--json", &a.json, "print one JSON object");
  if (!p.parse(args)) return false;
  const auto kv = parse_kv_type(a.kv_type);
  if (!kv) throw UsageError("unknown --kv-type '" + a.kv_type + "' (choose " + std::string(kv_type_choices()) + ")");
  a.opt.kv_bytes_per_value = kv_bytes_per_value(*kv);
  if (a.all_reduce != "ring" && a.all_reduce != "gather") {
    throw UsageError("unknown --all-reduce '" + a.all_reduce + "' (choose ring or gather)");
  }
  a.opt.gather_all_reduce = a.all_reduce == "gather";
  return true;
}

}  // namespace

int plan_command(const Args& args) {
  PlanArgs a;
  if (!parse_plan_args(args, a)) return 0;
  const dist::PlanModel m = resolve_model(a);
  const dist::PlanDevice dev = resolve_device(a);
  const dist::PlanLink link = resolve_link(a);
  const int64_t seq = a.opt.seq_len > 0 ? a.opt.seq_len : m.context;
  nlohmann::json out;
  out["model"] = {{"name", m.name},     {"params", m.params},   {"active_params", m.active_params},
                  {"bytes_per_param", m.bytes_per_param},     {"weight_bytes", m.params * m.bytes_per_param},
                  {"layers", m.layers}, {"kv_heads", m.kv_heads}, {"head_dim", m.head_dim}, {"context", m.context}};
  out["device"] = {{"name", dev.name}, {"memory_bytes", dev.memory_bytes}, {"bandwidth", dev.bandwidth},
                   {"flops", dev.flops}};
  out["link"] = {{"name", link.name}, {"bandwidth", link.bandwidth}, {"latency", link.latency}};
  if (!a.json) {
    std::printf("model   %s: %.2f B parameters (%.2f B active per token), %.4g bytes each = %s\n", m.name.c_str(),
                m.params / 1e9, m.active_params / 1e9, m.bytes_per_param, gb(m.params * m.bytes_per_param).c_str());
    std::printf("device  %s: %s, %.2f TB/s, %.0f TFLOP/s; link %s: %.0f GB/s, %.1f us\n\n", dev.name.c_str(),
                gb(dev.memory_bytes).c_str(), dev.bandwidth / 1e12, dev.flops / 1e12, link.name.c_str(),
                link.bandwidth / 1e9, link.latency * 1e6);
  }
  if (a.disaggregate) {
    dist::Layout pools;
    dist::parse_disaggregate(*a.disaggregate, pools);
    const auto prefill = dist::plan_layout(m, dev, link, {pools.prefill_ranks, 1, 1}, a.opt);
    const auto decode = dist::plan_layout(m, dev, link, {pools.decode_ranks, 1, 1}, a.opt);
    out["prefill_pool"] = figures_json(prefill);
    out["decode_pool"] = figures_json(decode);
    if (!a.json) {
      print_figures("prefill pool", prefill, a, seq);
      print_figures("decode pool", decode, a, seq);
      std::printf("K/V of a %lld-token prompt to the decode pool: %.1f MiB per device, %.3f ms over %s\n\n",
                  static_cast<long long>(a.opt.prompt_len),
                  prefill.kv_bytes_per_token * static_cast<double>(a.opt.prompt_len) / (1 << 20),
                  prefill.kv_transfer_s * 1e3, link.name.c_str());
    }
  } else {
    const auto f = dist::plan_layout(m, dev, link, {static_cast<int>(a.tp), static_cast<int>(a.pp), static_cast<int>(a.ep)}, a.opt);
    out["layout"] = figures_json(f);
    if (!a.json) {
      print_figures("layout", f, a, seq);
      std::printf("\n");
    }
  }
  nlohmann::json fitting = nlohmann::json::array();
  if (!a.json) {
    std::printf("layouts that fit (up to %lld devices):\n    TP  PP  devices  weights/device  largest batch  decode tok/s (b=1)  prefill tok/s\n",
                static_cast<long long>(a.max_devices));
  }
  for (const dist::PlanLayout& l : dist::candidate_layouts(m, static_cast<int>(a.max_devices))) {
    const auto f = dist::plan_layout(m, dev, link, l, a.opt);
    if (!f.fits) continue;
    fitting.push_back(figures_json(f));
    if (!a.json) {
      const std::string batch = f.kv_bytes_per_token > 0 ? std::to_string(f.max_batch) : "-";
      std::printf("  %4d %3d %8d  %14s  %13s  %18.1f  %13.0f\n", l.tp, l.pp, l.devices(), gb(f.weight_bytes).c_str(),
                  batch.c_str(), f.decode_tokens_per_s, f.prefill_tokens_per_s);
    }
  }
  if (!a.json && fitting.empty()) std::printf("  none: give more devices (--max-devices) or a smaller type (--dtype)\n");
  out["layouts_that_fit"] = fitting;
  if (const auto best = recommended(fitting)) {
    const std::string line = mpirun_line(*best, a);
    out["recommended"] = {{"tp", (*best)["tp"]}, {"pp", (*best)["pp"]}, {"ep", (*best)["ep"]}, {"mpirun", line}};
    if (!a.json) {
      std::printf("\nrecommended: --tp %d --pp %d (the fastest decode that fits; fewest devices on a tie); one rank "
                  "per host:\n  %s\n",
                  (*best)["tp"].get<int>(), (*best)["pp"].get<int>(), line.c_str());
    }
  }
  if (a.json) std::puts(out.dump().c_str());
  return 0;
}

}  // namespace peregrine::cli
