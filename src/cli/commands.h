#pragma once
// The `peregrine` subcommands. Each takes its arguments (after the subcommand name), returns the
// process exit code, and throws UsageError/FormatError for bad input (main prints them).
#include <string>
#include <vector>

namespace peregrine::cli {

using Args = std::vector<std::string>;

int run_command(const Args& args);       // generate text from a prompt
int info_command(const Args& args);      // describe a model file
int tokenize_command(const Args& args);  // text → token ids
int convert_command(const Args& args);   // llama2.c (or GGUF) → GGUF, optionally quantized
int synth_command(const Args& args);     // random-weight model of a known shape
int kv_calc_command(const Args& args);   // KV cache capacity plan
int bench_serve_command(const Args& args);  // serving benchmark: continuous vs static batching
int bench_command(const Args& args);     // throughput vs this machine's bounds
int roofline_command(const Args& args);  // roofline: machine bounds and where the kernels sit
int serve_command(const Args& args);     // OpenAI-compatible HTTP server
int plan_command(const Args& args);      // what a model costs on a layout of accelerators
int pull_command(const Args& args);      // a model from the Hugging Face hub into its cache
int list_command(const Args& args);      // what the Hugging Face cache and Ollama's store hold
int perplexity_command(const Args& args);  // perplexity over a text; KL divergence against a base run

}  // namespace peregrine::cli
