// `peregrine kv-calc`: how much memory the KV cache needs, for the model's own attention layout
// and for the MHA / GQA / MQA alternatives, as in a capacity plan.
//   bytes = 2 (K and V) * layers * kv_heads * head_dim * bytes_per_element * context * batch
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "kv/kv_type.h"
#include "model/config.h"
#include "util/error.h"

namespace peregrine::cli {
namespace {

struct KvElement {
  KvType type;
  std::string name;
  double bytes;  // per element of a head_dim row, including the format's scales
  const char* note;
};

// The engine's own cache types (kv/kv_type.h); "int4" is an older name of q4_0.
KvElement kv_element(const std::string& s, int64_t head_dim) {
  const std::optional<KvType> t = s == "int4" ? std::optional(KvType::Q4_0) : parse_kv_type(s);
  if (!t) throw UsageError("unknown --kv-type '" + s + "' (choose " + std::string(kv_type_choices()) + ")");
  const char* note = "";
  switch (*t) {
    case KvType::F32: note = "4 B"; break;
    case KvType::F16:
    case KvType::BF16: note = "2 B"; break;
    case KvType::Q8_0: note = "34 B per 32 (int8 + f16 scale)"; break;
    case KvType::FP8_E4M3: note = "1 B (e4m3) + one f16 scale per head's row"; break;
    case KvType::Q4_0: note = "18 B per 32 (4-bit + f16 scale)"; break;
  }
  return {*t, std::string(kv_type_name(*t)), kv_bytes_per_value(*t, head_dim), note};
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", b, units[u]);
  return buf;
}

}  // namespace

int kv_calc_command(const Args& args) {
  std::optional<std::string> model, tokenizer;
  int64_t layers = 0, heads = 0, kv_heads = 0, head_dim = 0, context = 0, batch = 1;
  std::string kv_type = "f16";
  ArgParser p("kv-calc",
              "KV cache size for MHA, GQA and MQA side by side: 2 * layers * kv_heads * head_dim *\n"
              "bytes per element, per token, per sequence of --context tokens, and for --batch of them.\n"
              "Give a MODEL, or its shape with --layers --heads --kv-heads --head-dim.");
  p.positional("MODEL", &model, "model file or name (see run --help) to take the shape from");
  p.option("--tokenizer", &tokenizer, "FILE", "llama2.c tokenizer.bin (for a llama2.c model)");
  p.option("--layers", &layers, "L", "transformer layers", 1, 100000);
  p.option("--heads", &heads, "H", "query heads", 1, 100000);
  p.option("--kv-heads", &kv_heads, "K", "KV heads (default: --heads)", 1, 100000);
  p.option("--head-dim", &head_dim, "D", "dimension of one head", 1, 100000);
  p.option("--context", &context, "N", "tokens per sequence (default: the model's context length)", 1, int64_t(1) << 40);
  p.option("--batch", &batch, "B", "sequences held at once", 1, int64_t(1) << 30);
  p.option("--kv-type", &kv_type, "TYPE", "element type: " + std::string(kv_type_choices()));
  if (!p.parse(args)) return 0;
  kv_element(kv_type, 128);  // an unknown type is refused before a model is opened

  std::string source;
  if (model) {
    if (layers || heads || kv_heads || head_dim)
      throw UsageError("give either MODEL or --layers/--heads/--kv-heads/--head-dim, not both");
    ModelFile mf = open_model_arg(model, tokenizer);
    ModelConfig c = ModelConfig::from_model_file(mf);
    layers = c.n_layers;
    heads = c.n_heads;
    kv_heads = c.n_kv_heads;
    head_dim = c.head_dim;
    if (context == 0) context = c.context_length;
    source = mf.path;
  } else {
    if (!layers || !heads || !head_dim)
      throw UsageError("without MODEL, --layers, --heads and --head-dim are required");
    if (!kv_heads) kv_heads = heads;
    if (context == 0) throw UsageError("--context is required without a MODEL");
    source = "given shape";
  }
  if (kv_heads > heads || heads % kv_heads != 0)
    throw UsageError("--kv-heads must divide --heads (got " + std::to_string(kv_heads) + " and " +
                     std::to_string(heads) + ")");

  // The three layouts compared: every head its own K/V (MHA), this model's groups (GQA, or a
  // typical 8 heads per group when the model itself is MHA or MQA), and one shared K/V (MQA).
  int64_t gqa = (kv_heads > 1 && kv_heads < heads) ? kv_heads : std::max<int64_t>(1, heads / 8);
  struct Column {
    const char* name;
    int64_t kv_heads;
  } cols[] = {{"MHA", heads}, {"GQA", gqa}, {"MQA", 1}};

  const KvElement elem = kv_element(kv_type, head_dim);
  std::printf("KV cache size for %s: %lld layers, %lld query heads, head dim %lld, %s elements (%s)\n",
              source.c_str(), static_cast<long long>(layers), static_cast<long long>(heads),
              static_cast<long long>(head_dim), elem.name.c_str(), elem.note);
  if (!kv_type_supports_head_dim(elem.type, head_dim)) {
    std::printf("note: the engine's %s cache needs an even head dim; %lld is not\n", elem.name.c_str(),
                static_cast<long long>(head_dim));
  }
  std::printf("context %lld tokens, batch %lld sequences\n\n", static_cast<long long>(context),
              static_cast<long long>(batch));
  std::printf("%-22s", "");
  for (const auto& col : cols) {
    char head[64];
    std::snprintf(head, sizeof head, "%s (%lld KV heads)%s", col.name, static_cast<long long>(col.kv_heads),
                  col.kv_heads == kv_heads ? "*" : "");
    std::printf("%24s", head);
  }
  std::printf("\n");
  auto row = [&](const char* label, double scale) {
    std::printf("%-22s", label);
    for (const auto& col : cols) {
      double per_token = 2.0 * static_cast<double>(layers * col.kv_heads * head_dim) * elem.bytes;
      std::printf("%24s", human_bytes(per_token * scale).c_str());
    }
    std::printf("\n");
  };
  row("per token", 1);
  row("per sequence", static_cast<double>(context));
  row("whole batch", static_cast<double>(context) * static_cast<double>(batch));
  std::printf("\n* this model's layout. GQA and MQA shrink the cache by heads / kv_heads, which is "
              "what lets more sequences (or longer ones) fit in the same memory.\n");
  return 0;
}

}  // namespace peregrine::cli
