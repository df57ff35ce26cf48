#include "dist/plan_json.h"

#include "model/config.h"

namespace peregrine::dist {

PlanModel plan_model_of(const ModelFile& f, const std::string& name) {
  const ModelConfig c = ModelConfig::from_model_file(f);
  PlanModel m;
  m.name = name;
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

nlohmann::json plan_figures_json(const PlanFigures& f) {
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

}  // namespace peregrine::dist
