#pragma once
// Planning past this machine (`peregrine plan`): what a layout of a model costs on accelerators
// we do not have, from first principles. Decode is memory-bound (every weight byte a device holds
// is read once per step), prefill compute-bound (2 FLOPs per active parameter per token), and the
// layout adds communication: tensor parallelism two all-reduces of the hidden state per layer,
// pipeline parallelism one hidden state per stage boundary, expert parallelism two all-to-alls
// per MoE layer, disaggregation the prompt's K/V from the prefill pool to the decode pool.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace peregrine::dist {

// The model's shape. params counts every weight; active_params those one token uses (a MoE
// model's routed experts count top-k of n).
struct PlanModel {
  std::string name;
  double params = 0, active_params = 0;
  double embedding_params = 0;  // read one row per token, not whole (0 when unknown)
  int64_t layers = 0, dim = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, context = 0;
  int64_t ffn = 0;                              // feed-forward rows per layer (one expert's; 0: unknown)
  int64_t experts = 0, experts_per_token = 0;  // 0: dense
  double bytes_per_param = 2;                   // the weights' type (f16: 2, q8_0: 1.0625, q4_0: 0.5625)
  bool knows_shape() const { return layers > 0 && kv_heads > 0 && head_dim > 0 && dim > 0; }
};

struct PlanDevice {
  std::string name;
  double memory_bytes = 0, bandwidth = 0, flops = 0;  // bytes, bytes/s, FLOP/s (dense 16-bit)
};

struct PlanLink {
  std::string name;
  double bandwidth = 0;  // bytes/s per direction per device
  double latency = 0;    // seconds per message
};

struct PlanLayout {
  int tp = 1, pp = 1, ep = 1;  // ep > 1: a mixture's experts spread over ep of a stage's tp devices
  int devices() const { return tp * pp; }
};

struct PlanOptions {
  double kv_bytes_per_value = 2;  // the KV cache's type
  double act_bytes = 2;           // bytes per activation value on the wire (f16; peregrine's CPU ranks send f32: 4)
  double memory_utilization = 0.9;
  int64_t seq_len = 0;            // positions per sequence for the batch and KV figures (0: the model's context)
  int64_t prompt_len = 1024;      // prompt tokens moved per request when disaggregated
  // How a tensor-parallel all-reduce moves: a ring (NCCL on accelerators: 2(T-1) steps, 2(T-1)/T
  // of the values sent per device) or peregrine's gather (every rank's partial sums to every other
  // rank, added in rank order: T-1 steps, (T-1) x the values sent per device).
  bool gather_all_reduce = false;
};

struct PlanFigures {
  PlanLayout layout;
  std::optional<std::string> refusal;  // why the model cannot be cut this way
  double weight_bytes = 0;             // per device (the largest stage)
  double kv_bytes_per_token = 0;       // per device
  double usable_bytes = 0;             // memory x utilization
  bool fits = false;                   // weights fit with room for at least one sequence's KV
  int64_t max_batch = 0;               // sequences of seq_len the KV room holds
  double decode_memory_s = 0;          // per token at batch 1: the bytes a device reads / bandwidth, stages in turn
  double decode_comm_s = 0;            // per token at batch 1
  double decode_tokens_per_s = 0;      // 1 / (memory + communication)
  double comm_bytes_per_token = 0;     // sent per device per token (the busiest device)
  double prefill_tokens_per_s = 0;     // compute bound over every device
  double kv_transfer_s = 0;            // disaggregated: one prompt's K/V over the link
};

// The built-in devices and links ("h100", "h200", "a100", "mi300x"; "nvlink", "pcie", "ib"),
// nullopt for an unknown name.
std::optional<PlanDevice> plan_device(const std::string& name);
std::optional<PlanLink> plan_link(const std::string& name);
std::string plan_device_names();
std::string plan_link_names();
// Known model shapes ("llama-3-8b", "llama-3-70b", "mixtral-8x7b", ...), nullopt if unknown.
std::optional<PlanModel> plan_model_preset(const std::string& name);
std::string plan_model_names();
// Parameters a shape implies (embeddings, attention, feed-forward, norms), for --params left out.
void fill_params_from_shape(PlanModel& m, int64_t ffn);

PlanFigures plan_layout(const PlanModel& m, const PlanDevice& d, const PlanLink& link, const PlanLayout& layout,
                        const PlanOptions& o);
// Every layout of up to max_devices devices (T, P powers of two; the experts of a mixture spread
// over min(T, experts) of a stage's devices), the cuts the model cannot take included (refused).
std::vector<PlanLayout> candidate_layouts(const PlanModel& m, int max_devices);

}  // namespace peregrine::dist
