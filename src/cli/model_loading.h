#pragma once
// How the CLI finds and opens a model: an explicit path (GGUF, a Hugging Face checkpoint folder,
// or a llama2.c checkpoint with --tokenizer), a name another tool's store holds (hub/resolve.h:
// ORG/NAME from the Hugging Face cache, ollama:NAME from Ollama's), or, with no path, the demo
// model embedded in the binary (models/demo-target.gguf).
#include <optional>
#include <string>

#include "format/model_file.h"
#include "format/quant_scheme.h"
#include "format/tensor_type.h"

namespace peregrine::cli {

// The MODEL positional's help, shared by the commands that load a model.
inline constexpr const char* kModelHelp =
    "GGUF file, Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer.json), or llama2.c .bin\n"
    "with --tokenizer; or a name: ORG/NAME[@REVISION][:FILE|:QUANT] from the Hugging Face cache (`peregrine pull`,\n"
    "huggingface-cli download), ollama:NAME[:TAG] from Ollama's store (`peregrine list` shows both);\n"
    "default: the embedded demo model";
// The --type help for loading: weight matrices converted in memory as the model loads.
inline constexpr const char* kLoadTypeHelp =
    "convert the weight matrices to TYPE while loading: a type (f32, f16, bf16, q8_0, q6_k, q5_k, q5_1,\n"
    "q5_0, q4_k, q4_1, q4_0, iq4_nl, iq4_xs, q3_k) or a llama.cpp mix (q2_k, q3_k_m, q4_k_m, q5_k_m)";

// Parses a --type value (nullopt stays nullopt): a type or a mix (format/quant_scheme.h). Throws
// UsageError naming the choices.
std::optional<QuantScheme> parse_weight_type(const std::optional<std::string>& name);

// Opens the model named on the command line, its weight matrices converted by `scheme` if given.
// Throws UsageError when no model is given and none is embedded, FormatError for a bad file.
ModelFile open_model_arg(const std::optional<std::string>& path, const std::optional<std::string>& tokenizer,
                         std::optional<QuantScheme> scheme = std::nullopt);

// The path a MODEL argument stands for: itself when it exists, else the file or folder the name
// resolves to (hub/resolve.h). Throws UsageError when it is neither (saying how to fetch a name).
std::string resolve_model_path(const std::string& arg);

// The model's name for people: the name for a model given by name, the folder's name for a checkpoint folder, the file's stem
// otherwise ("demo-target" for the embedded model).
std::string model_display_name(const std::optional<std::string>& path);

// Reads a whole file's bytes exactly (no newline handling). Throws UsageError if unreadable.
std::string read_file_bytes(const std::string& path);

}  // namespace peregrine::cli
