// peregrine: command-line entry point. Dispatches to one subcommand; every error in user input
// ends here as one line on stderr and a non-zero exit code (2 for usage, 1 for everything else).
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "dist/session.h"
#include "util/error.h"

namespace {

struct Command {
  std::string_view name;
  int (*run)(const peregrine::cli::Args&);
  std::string_view summary;
};

constexpr Command kCommands[] = {
    {"run", peregrine::cli::run_command, "generate text from a prompt"},
    {"info", peregrine::cli::info_command, "describe a model: architecture, shapes, tensor types, KV bytes"},
    {"tokenize", peregrine::cli::tokenize_command, "print the token ids of a text"},
    {"convert", peregrine::cli::convert_command, "convert a llama2.c checkpoint (or GGUF) to GGUF"},
    {"synth", peregrine::cli::synth_command, "write a random-weight model of a known shape"},
    {"kv-calc", peregrine::cli::kv_calc_command, "KV cache size for MHA, GQA and MQA"},
    {"bench-serve", peregrine::cli::bench_serve_command, "serving benchmark: many requests, continuous or static batching"},
    {"bench", peregrine::cli::bench_command, "prefill and decode tokens/s against this machine's bounds"},
    {"perplexity", peregrine::cli::perplexity_command, "perplexity over a text (llama.cpp's rules); KL divergence against a saved run"},
    {"roofline", peregrine::cli::roofline_command, "roofline of this machine and where the matmul kernels sit (--svg)"},
    {"serve", peregrine::cli::serve_command, "OpenAI-compatible HTTP server"},
    {"plan", peregrine::cli::plan_command, "memory, decode/prefill bounds and layouts of a model on accelerators"},
    {"pull", peregrine::cli::pull_command, "download ORG/NAME from the Hugging Face hub into its cache (resumed, checked)"},
    {"list", peregrine::cli::list_command, "models in the Hugging Face cache and Ollama's store, by the names that run them"},
};

void print_usage(std::FILE* out) {
  std::fputs("usage: peregrine COMMAND [options]   (peregrine COMMAND --help for details)\n\ncommands:\n", out);
  for (const auto& c : kCommands) std::fprintf(out, "  %-12s %.*s\n", std::string(c.name).c_str(),
                                               static_cast<int>(c.summary.size()), c.summary.data());
  std::fputs("\nMODEL (run, serve, info, bench, ...): a GGUF file, a Hugging Face checkpoint folder, a llama2.c .bin,\n"
             "or a name: ORG/NAME[@REVISION][:FILE|:QUANT] from the Hugging Face cache, ollama:NAME[:TAG] from\n"
             "Ollama's store\n", out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  std::string_view name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    print_usage(stdout);
    return 0;
  }
  for (const auto& c : kCommands) {
    if (c.name != name) continue;
    peregrine::cli::Args args(argv + 2, argv + argc);
    try {
      return c.run(args);
    } catch (const peregrine::dist::QuietExit& e) {
      return e.code;  // a worker rank of a layout: rank 0 reports the error
    } catch (const peregrine::UsageError& e) {
      std::fprintf(stderr, "peregrine %s: error: %s\n", argv[1], e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "peregrine %s: error: %s\n", argv[1], e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "peregrine: unknown command '%s'\n\n", argv[1]);
  print_usage(stderr);
  return 2;
}
