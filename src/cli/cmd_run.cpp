// `peregrine run`: one prompt in, streamed text out, with a timing summary on stderr.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "engine/generator.h"
#include "kernels/thread_pool.h"
#include "kv/kv_type.h"
#include "util/error.h"

namespace peregrine::cli {
int run_command(const Args& args) {
  std::optional<std::string> model, tokenizer, weight_type;
  std::string prompt, kv_type = "f16";
  int64_t n = 128, top_k = 40, n_logprobs = 0;
  double temperature = 0.8, top_p = 0.95, min_p = 0.05, repeat_penalty = 1.0, freq_penalty = 0,
         presence_penalty = 0;
  uint64_t seed = 0;
  int64_t threads = physical_core_count();
  bool no_kv_cache = false, json = false, parse_special = false, ignore_eos = false;
  ArgParser p("run", "Generate text from a prompt. The text streams to stdout; a summary (prompt\n"
                     "tokens, time to first token, decode tokens/s) goes to stderr.");
  p.positional("MODEL", &model, kModelHelp);
  p.option("-p,--prompt", &prompt, "TEXT", "prompt; empty means BOS alone");
  p.option("-n,--max-tokens", &n, "N", "tokens to generate at most", 1, 1 << 24);
  p.option("--temperature,--temp", &temperature, "T", "sampling temperature; 0 = greedy", 0, 100);
  p.option("--top-k", &top_k, "K", "keep the K most likely tokens; 0 = off", 0, 1 << 24);
  p.option("--top-p", &top_p, "P", "nucleus sampling: smallest set with mass >= P; 1 = off", 0, 1);
  p.option("--min-p", &min_p, "P", "drop tokens below P * p(best); 0 = off", 0, 1);
  p.option("--repeat-penalty", &repeat_penalty, "R", "repetition penalty; 1 = off", 0, 100);
  p.option("--frequency-penalty", &freq_penalty, "F", "OpenAI frequency penalty", -2, 2);
  p.option("--presence-penalty", &presence_penalty, "F", "OpenAI presence penalty", -2, 2);
  p.option("--seed", &seed, "S", "random seed: the same seed gives the same text");
  p.option("--logprobs", &n_logprobs, "N", "report the top-N alternatives per token (--json)", 0, 20);
  p.option("--tokenizer", &tokenizer, "FILE", "llama2.c tokenizer.bin (for a llama2.c model)");
  p.option("--type", &weight_type, "TYPE", kLoadTypeHelp);
  p.option("-t,--threads", &threads, "N", "compute threads (default: physical cores)", 1, 1024);
  p.option("--kv-type", &kv_type, "TYPE", "KV cache element type: f16, bf16, f32, q8_0 (8-bit; head dim a multiple of 32)");
  p.flag("--no-kv-cache", &no_kv_cache, "recompute the whole prefix at every step (slow; same tokens)");
  p.flag("--parse-special", &parse_special, "turn special-token text in the prompt into tokens");
  p.flag("--ignore-eos", &ignore_eos, "keep generating past end-of-generation tokens");
  p.flag("--json", &json, "print one JSON object at the end instead of streaming text");
  if (!p.parse(args)) return 0;

  ModelFile mf = open_model_arg(model, tokenizer, parse_weight_type(weight_type));
  Tokenizer tok = Tokenizer::from_metadata(mf.meta, mf.path);
  Model m(std::move(mf), static_cast<int>(threads));

  std::vector<TokenId> ids = tok.encode(prompt, true, parse_special);
  if (ids.empty()) {
    if (tok.bos() < 0) throw UsageError("empty prompt and the model has no BOS token");
    ids.push_back(tok.bos());
  }

  GenerateOptions opt;
  opt.max_new_tokens = n;
  opt.use_kv_cache = !no_kv_cache;
  std::optional<KvType> kv = parse_kv_type(kv_type);
  if (!kv) throw UsageError("unknown --kv-type '" + kv_type + "' (choose " + std::string(kv_type_choices()) + ")");
  opt.kv_type = *kv;
  opt.stop_at_end_of_generation = !ignore_eos;
  opt.sampling.temperature = static_cast<float>(temperature);
  opt.sampling.top_k = static_cast<int32_t>(top_k);
  opt.sampling.top_p = static_cast<float>(top_p);
  opt.sampling.min_p = static_cast<float>(min_p);
  opt.sampling.repetition_penalty = static_cast<float>(repeat_penalty);
  opt.sampling.frequency_penalty = static_cast<float>(freq_penalty);
  opt.sampling.presence_penalty = static_cast<float>(presence_penalty);
  opt.sampling.seed = seed;
  opt.sampling.n_logprobs = static_cast<int32_t>(n_logprobs);

  std::function<void(std::string_view)> stream;
  if (!json) {
    // Echo the prompt, then stream: text appears as soon as each character is complete.
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fflush(stdout);
    stream = [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    };
  }
  GenerateResult r = generate(m, tok, ids, opt, stream);

  if (json) {
    nlohmann::json out;
    out["prompt_tokens"] = r.prompt_tokens;
    out["tokens"] = r.tokens;
    out["text"] = r.text;
    out["finish_reason"] = finish_reason_name(r.finish);
    out["prompt_ms"] = r.prompt_ms;
    out["ttft_ms"] = r.ttft_ms;
    out["decode_tokens_per_s"] = r.decode_tokens_per_s();
    if (n_logprobs > 0) {
      nlohmann::json lp = nlohmann::json::array();
      for (const auto& s : r.samples) {
        nlohmann::json top = nlohmann::json::array();
        for (const auto& t : s.top) top.push_back({{"token", t.token}, {"logprob", t.logprob}});
        lp.push_back({{"token", s.token}, {"logprob", s.logprob}, {"top", top}});
      }
      out["logprobs"] = lp;
    }
    // Invalid UTF-8 cannot occur (the stream decoder replaces it), but never crash on output.
    std::puts(out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fputc('\n', stdout);
    std::fflush(stdout);
    std::fprintf(stderr,
                 "\n[peregrine] prompt tokens: %zu  prefill: %.1f ms  time to first token: %.1f ms  "
                 "generated: %zu tokens (%s)  decode: %.1f tokens/s%s\n",
                 r.prompt_tokens.size(), r.prompt_ms, r.ttft_ms, r.tokens.size(),
                 std::string(finish_reason_name(r.finish)).c_str(), r.decode_tokens_per_s(),
                 no_kv_cache ? "  (no KV cache: whole prefix recomputed per token)" : "");
  }
  return 0;
}

}  // namespace peregrine::cli
