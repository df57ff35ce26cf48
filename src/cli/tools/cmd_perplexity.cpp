// `peregrine perplexity`: how well a model predicts a text, with llama.cpp's llama-perplexity rules
// (perplexity_windows.h), and what a choice of weight type, KV cache type or activation arithmetic
// costs against a saved base run (--save-logits, then --kl-divergence). docs/perplexity.md.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/backend_flags.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "cli/progress.h"
#include "cli/tools/logits_file.h"
#include "cli/tools/perplexity_stats.h"
#include "cli/tools/perplexity_windows.h"
#include "kv/kv_type.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace peregrine::cli {
namespace {

constexpr int64_t kDefaultCtx = 512;

struct PerplexityOptions {
  std::optional<std::string> model, tokenizer, weight_type, text, save_logits, base_logits;
  std::string kv_type = "f16";
  int64_t ctx = 0, batch = 512, chunks = 0, top_k = 0;
  bool json = false;
  BackendFlags backend;
};

std::string kv_help() {
  return "KV cache element type: " + std::string(kv_type_choices());
}

// Returns false after --help.
bool parse_perplexity_args(const Args& args, PerplexityOptions& o) {
  ArgParser p("perplexity",
              "Perplexity of MODEL over a text, as llama.cpp's llama-perplexity computes it: the\n"
              "text's tokens in non-overlapping windows of --ctx tokens, each starting with BOS,\n"
              "the second half of each window scored. With --save-logits a base run keeps its\n"
              "log-probabilities; --kl-divergence compares a run (another --type, --kv-type,\n"
              "--activations) with it: KL divergence, same top token, Δ perplexity.");
  p.positional("MODEL", &o.model, kModelHelp);
  p.option("-f,--file", &o.text, "TEXT", "the text file (bytes as they are); optional with --kl-divergence");
  p.option("-c,--ctx", &o.ctx, "N",
           "tokens per window; default 512 (the model's context length if shorter; with\n"
           "--kl-divergence, the saved run's)", 0, 1 << 20);
  p.option("-b,--batch", &o.batch, "N", "tokens per forward call (parts of a window or several windows)", 1, 1 << 16);
  p.option("--chunks", &o.chunks, "N", "score only the first N windows; 0 = all", 0, 1 << 30);
  p.option("--type", &o.weight_type, "TYPE", kLoadTypeHelp);
  p.option("--kv-type", &o.kv_type, "TYPE", kv_help());
  o.backend.add_to(p);
  p.option("--tokenizer", &o.tokenizer, "FILE", "llama2.c tokenizer.bin (for a llama2.c model)");
  p.option("--save-logits", &o.save_logits, "FILE", "keep this run's log-probabilities as a base for --kl-divergence");
  p.option("--save-top-k", &o.top_k, "K",
           "with --save-logits: keep the K most likely tokens per position and the rest's mass (K at\n"
           "least the vocabulary: the whole distribution); 0 = the whole distribution when the\n"
           "vocabulary has at most 1024 tokens, else 128", 0, 1 << 24);
  p.option("--kl-divergence", &o.base_logits, "FILE", "compare with the base run saved in FILE");
  p.flag("--json", &o.json, "print one JSON object instead of the summary");
  if (!p.parse(args)) return false;
  o.backend.activations.value();  // a UsageError now for an unknown mode
  if (o.save_logits && o.base_logits) throw UsageError("give one of --save-logits and --kl-divergence");
  if (!o.text && !o.base_logits) throw UsageError("no text: give -f TEXT");
  if (o.ctx != 0 && o.ctx < 4) throw UsageError("--ctx " + std::to_string(o.ctx) + ": a window needs at least 4 tokens");
  return true;
}

// FNV-1a over the vocabulary's pieces: a saved run and a compared one must share a tokenizer.
uint64_t vocabulary_hash(const Tokenizer& tok, int64_t n_vocab) {
  uint64_t h = 1469598103934665603ull;
  const auto mix = [&](unsigned char c) { h = (h ^ c) * 1099511628211ull; };
  for (unsigned char c : std::to_string(n_vocab)) mix(c);
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    for (unsigned char c : tok.piece(id)) mix(c);
    mix(0);
  }
  return h;
}

// The window length: asked for, the saved run's, or 512 bounded by the model's context.
int64_t choose_ctx(const PerplexityOptions& o, const ModelConfig& c, const LogitsHeader* base) {
  if (base) {
    if (o.ctx != 0 && o.ctx != base->ctx) {
      throw UsageError("--ctx " + std::to_string(o.ctx) + " differs from the saved run's " +
                       std::to_string(base->ctx) + " (" + *o.base_logits + ")");
    }
    if (base->ctx > c.context_length) {
      throw UsageError("the saved run's windows of " + std::to_string(base->ctx) +
                       " tokens exceed this model's context length " + std::to_string(c.context_length));
    }
    return base->ctx;
  }
  if (o.ctx == 0) return std::min(kDefaultCtx, c.context_length);
  if (o.ctx > c.context_length) {
    throw UsageError("--ctx " + std::to_string(o.ctx) + " exceeds the model's context length " +
                     std::to_string(c.context_length));
  }
  return o.ctx;
}

// Tokenizes the text (BOS first if the tokenizer adds one) and cuts it into windows.
PerplexityWindows text_windows(const std::string& text, const Tokenizer& tok, int64_t ctx, int64_t chunks) {
  PerplexityWindows w;
  w.ctx = ctx;
  w.bos = tok.add_bos() ? tok.bos() : -1;
  std::vector<TokenId> ids = tok.encode(text, true, false);
  // A tokenizer that adds EOS would end the text with it; llama-perplexity refuses such models,
  // here the text is scored without it.
  if (tok.add_eos() && !ids.empty() && ids.back() == tok.eos()) ids.pop_back();
  if (static_cast<int64_t>(ids.size()) < 2 * ctx) {
    throw UsageError("the text has " + std::to_string(ids.size()) + " tokens; windows of " + std::to_string(ctx) +
                     " need at least " + std::to_string(2 * ctx) + " (give a longer text or a smaller --ctx)");
  }
  w.count = static_cast<int64_t>(ids.size()) / ctx;
  if (chunks > 0) w.count = std::min(w.count, chunks);
  ids.resize(static_cast<size_t>(w.count * ctx));
  w.tokens = std::move(ids);
  return w;
}

// The saved run's windows; the text, if given, must be the one it was computed on.
PerplexityWindows saved_windows(const PerplexityOptions& o, const LogitsHeader& h, const Tokenizer& tok) {
  PerplexityWindows w;
  w.ctx = h.ctx;
  w.count = h.n_windows;
  if (o.chunks > 0) {
    if (o.chunks > w.count) {
      throw UsageError("--chunks " + std::to_string(o.chunks) + ": the saved run has only " + std::to_string(w.count) +
                       " windows");
    }
    w.count = o.chunks;
  }
  w.bos = tok.add_bos() ? tok.bos() : -1;
  w.tokens.assign(h.tokens.begin(), h.tokens.begin() + w.count * w.ctx);
  if (o.text) {
    const PerplexityWindows mine = text_windows(read_file_bytes(*o.text), tok, w.ctx, w.count);
    if (mine.count != w.count || mine.tokens != w.tokens) {
      throw UsageError("'" + *o.base_logits + "' was computed on another text than '" + *o.text + "'");
    }
  }
  return w;
}

void check_base(const LogitsHeader& h, const PerplexityOptions& o, int64_t n_vocab, uint64_t hash) {
  if (h.n_vocab != n_vocab || h.vocab_hash != hash) {
    throw UsageError("'" + *o.base_logits + "' was saved by a model with another vocabulary (" +
                     std::to_string(h.n_vocab) + " tokens, this model " + std::to_string(n_vocab) +
                     "): KL divergence compares models that share a tokenizer");
  }
}

// "[#####     ] 12/40 windows  PPL 34.21  1234 tokens/s  0:03 left": redrawn on a terminal,
// written once at the end elsewhere.
class PerplexityProgress {
 public:
  explicit PerplexityProgress(int64_t total) : total_(total), terminal_(::isatty(STDERR_FILENO) == 1) {}
  void update(int64_t done, int64_t tokens, double seconds, double ppl) {
    const auto now = std::chrono::steady_clock::now();
    if (done < total_ && (!terminal_ || now - last_ < std::chrono::milliseconds(100))) return;
    last_ = now;
    const double rate = seconds > 0 ? static_cast<double>(tokens) / seconds : 0;
    const auto left = static_cast<int64_t>(done > 0 ? seconds / static_cast<double>(done) * static_cast<double>(total_ - done) : 0);
    std::fprintf(stderr, "\rperplexity %s %lld/%lld windows  PPL %.4f  %.0f tokens/s  %lld:%02lld left ",
                 progress_bar(static_cast<double>(done) / static_cast<double>(total_)).c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_), ppl, rate,
                 static_cast<long long>(left / 60), static_cast<long long>(left % 60));
    if (done >= total_) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  int64_t total_;
  bool terminal_;
  std::chrono::steady_clock::time_point last_{};
};

struct RunSetup {
  std::string model_name, weights, kv_type, activations, context;
};

struct RunResult {
  NllAccumulator nll;
  KldAccumulator kld;
  bool compared = false;
  int64_t tokens_evaluated = 0;
  double seconds = 0;
  double tokens_per_s() const { return seconds > 0 ? static_cast<double>(tokens_evaluated) / seconds : 0; }
};

nlohmann::json kld_json(KldAccumulator& k, const std::string& base_name) {
  const std::span<const double> sorted = k.sorted_kld();
  return {{"base_model", base_name},
          {"perplexity_base", k.base.perplexity()},
          {"perplexity_base_error", k.base.perplexity_error()},
          {"delta_perplexity", k.delta_perplexity()},
          {"delta_perplexity_error", k.delta_perplexity_error()},
          {"mean_kld", k.kld().mean},
          {"mean_kld_error", k.kld().error},
          {"median_kld", percentile(sorted, 0.5)},
          {"p90_kld", percentile(sorted, 0.90)},
          {"p99_kld", percentile(sorted, 0.99)},
          {"p999_kld", percentile(sorted, 0.999)},
          {"max_kld", percentile(sorted, 1.0)},
          {"same_top", k.same_top().mean},
          {"same_top_error", k.same_top().error}};
}

void print_json(const RunSetup& s, const PerplexityWindows& w, RunResult& r, const std::string& base_name) {
  nlohmann::json out = {{"model", s.model_name},
                        {"weights", s.weights},
                        {"kv_type", s.kv_type},
                        {"activations", s.activations},
                        {"backend", s.context},
                        {"ctx", w.ctx},
                        {"windows", w.count},
                        {"scored", r.nll.count()},
                        {"perplexity", r.nll.perplexity()},
                        {"perplexity_error", r.nll.perplexity_error()},
                        {"mean_nll", r.nll.nll().mean},
                        {"tokens_evaluated", r.tokens_evaluated},
                        {"seconds", r.seconds},
                        {"tokens_per_s", r.tokens_per_s()}};
  if (r.compared) out["kl_divergence"] = kld_json(r.kld, base_name);
  std::puts(out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

void print_summary(const RunSetup& s, const PerplexityWindows& w, RunResult& r, const std::string& base_name) {
  std::printf("perplexity of %s (weights %s, KV %s, %s) over %lld windows of %lld tokens, %lld positions scored\n",
              s.model_name.c_str(), s.weights.c_str(), s.kv_type.c_str(), s.context.c_str(),
              static_cast<long long>(w.count), static_cast<long long>(w.ctx), static_cast<long long>(r.nll.count()));
  std::printf("PPL = %.4f ± %.4f   (mean NLL %.5f nats)\n", r.nll.perplexity(), r.nll.perplexity_error(),
              r.nll.nll().mean);
  std::printf("%.0f tokens/s (%lld tokens in %.2f s)\n", r.tokens_per_s(), static_cast<long long>(r.tokens_evaluated),
              r.seconds);
  if (!r.compared) return;
  KldAccumulator& k = r.kld;
  const std::span<const double> sorted = k.sorted_kld();
  std::printf("against %s:\n", base_name.c_str());
  std::printf("  PPL(base) = %.4f ± %.4f   ΔPPL = %+.4f ± %.4f (%+.3f%%)\n", k.base.perplexity(),
              k.base.perplexity_error(), k.delta_perplexity(), k.delta_perplexity_error(),
              100.0 * k.delta_perplexity() / k.base.perplexity());
  std::printf("  mean KLD = %.6f ± %.6f   median %.6f   p99 %.6f   max %.6f\n", k.kld().mean, k.kld().error,
              percentile(sorted, 0.5), percentile(sorted, 0.99), percentile(sorted, 1.0));
  std::printf("  same top token: %.3f%% ± %.3f%%\n", 100.0 * k.same_top().mean, 100.0 * k.same_top().error);
}

int64_t default_top_k(int64_t n_vocab) { return n_vocab <= 1024 ? n_vocab : std::min<int64_t>(128, n_vocab); }

LogitsHeader saved_header(const PerplexityOptions& o, const PerplexityWindows& w, int64_t n_vocab, uint64_t hash) {
  LogitsHeader h;
  h.n_vocab = static_cast<uint32_t>(n_vocab);
  h.top_k = static_cast<uint32_t>(o.top_k == 0 ? default_top_k(n_vocab) : std::min(o.top_k, n_vocab));
  h.vocab_hash = hash;
  h.ctx = static_cast<uint32_t>(w.ctx);
  h.n_windows = static_cast<uint32_t>(w.count);
  h.model_name = model_display_name(o.model);
  h.tokens = w.tokens;
  return h;
}

// Scores every window; saves each position to `writer` or compares it with `base` when given.
RunResult evaluate(Model& m, KvType kv, int64_t batch, const PerplexityWindows& w, LogitsWriter* writer,
                   LogitsReader* base) {
  RunResult r;
  r.compared = base != nullptr;
  std::vector<float> log_probs(writer || base ? static_cast<size_t>(m.config().n_vocab) : 0);
  std::vector<uint8_t> in_top;
  BasePosition base_pos;
  PerplexityProgress progress(w.count);
  WindowRunner runner(m, kv, w.ctx, batch);
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  runner.run(
      w,
      [&](int64_t win, int64_t j, std::span<const float> logits) {
        const PositionScore s = score_position(logits, w.target(win, j), log_probs);
        r.nll.add(s.nll);
        if (writer) writer->add(s.nll, log_probs);
        if (base) {
          base->next(base_pos);
          r.kld.add(s.nll, base_pos.nll, kl_divergence(base_pos, log_probs, in_top), s.top == base_pos.top());
        }
      },
      [&](int64_t done) { progress.update(done, done * w.ctx, elapsed(), r.nll.perplexity()); });
  r.seconds = elapsed();
  r.tokens_evaluated = w.count * w.ctx;
  return r;
}

}  // namespace

int perplexity_command(const Args& args) {
  PerplexityOptions o;
  if (!parse_perplexity_args(args, o)) return 0;
  const std::optional<KvType> kv = parse_kv_type(o.kv_type);
  if (!kv) throw UsageError("unknown --kv-type '" + o.kv_type + "' (choose " + std::string(kv_type_choices()) + ")");
  std::optional<LogitsReader> base;
  if (o.base_logits) base.emplace(*o.base_logits);
  std::string text;
  if (o.text) text = read_file_bytes(*o.text);  // before the model: a missing file fails fast

  const std::shared_ptr<ExecutionContext> context = o.backend.make_context();
  Model m(open_model_arg(o.model, o.tokenizer, parse_weight_type(o.weight_type)), context);
  const Tokenizer tok = Tokenizer::from_metadata(m.file().meta, m.file().path);
  const int64_t n_vocab = m.config().n_vocab;
  const uint64_t hash = vocabulary_hash(tok, n_vocab);
  if (base) check_base(base->header(), o, n_vocab, hash);
  const int64_t ctx = choose_ctx(o, m.config(), base ? &base->header() : nullptr);
  const PerplexityWindows w = base ? saved_windows(o, base->header(), tok) : text_windows(text, tok, ctx, o.chunks);

  std::optional<LogitsWriter> writer;
  if (o.save_logits) writer.emplace(*o.save_logits, saved_header(o, w, n_vocab, hash));
  RunResult r = evaluate(m, *kv, o.batch, w, writer ? &*writer : nullptr, base ? &*base : nullptr);
  if (writer) writer->finish();

  const RunSetup setup{model_display_name(o.model), o.weight_type.value_or("as stored"), o.kv_type,
                       o.backend.activations.name, context->describe()};
  const std::string base_name = base ? base->header().model_name + " (" + *o.base_logits + ")" : "";
  if (o.json) {
    print_json(setup, w, r, base_name);
  } else {
    print_summary(setup, w, r, base_name);
  }
  return 0;
}

}  // namespace peregrine::cli
