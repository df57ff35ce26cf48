#pragma once
// A small command-line parser for the `peregrine` subcommands: typed options, positionals,
// generated --help, and a UsageError naming the flag for anything malformed (unknown flag,
// missing or unparsable value, value out of range). Written here rather than pulled in because
// the CLI needs exact control over messages and exit codes, and it is small.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine::cli {

class ArgParser {
 public:
  ArgParser(std::string command, std::string summary);

  // Options. `names` is "-p,--prompt" or "--json". The target keeps its value when the flag is
  // absent, so initialise it with the default (which --help prints).
  void flag(std::string names, bool* target, std::string help);
  void option(std::string names, std::string* target, std::string value_name, std::string help);
  void option(std::string names, std::optional<std::string>* target, std::string value_name,
              std::string help);
  void option(std::string names, int64_t* target, std::string value_name, std::string help,
              int64_t min = INT64_MIN, int64_t max = INT64_MAX);
  void option(std::string names, uint64_t* target, std::string value_name, std::string help);
  void option(std::string names, double* target, std::string value_name, std::string help,
              double min = -1e300, double max = 1e300);
  // Positionals, in order. Optional ones must come last.
  void positional(std::string name, std::string* target, std::string help, bool required = true);
  void positional(std::string name, std::optional<std::string>* target, std::string help);

  // Parses args (without the program and command names). Returns false if --help was printed
  // (the caller then exits 0). Throws UsageError on any malformed input.
  bool parse(const std::vector<std::string>& args);
  std::string help() const;

 private:
  struct Option {
    std::vector<std::string> names;
    std::string value_name;  // empty for a flag
    std::string help;
    std::string default_text;
    std::function<void(const std::string& flag, const std::string& value)> set;
  };
  struct Positional {
    std::string name;
    std::string help;
    bool required;
    std::function<void(const std::string&)> set;
  };
  const Option* find(std::string_view name) const;
  void add(std::string names, std::string value_name, std::string help, std::string default_text,
           std::function<void(const std::string&, const std::string&)> set);

  std::string command_;
  std::string summary_;
  std::vector<Option> options_;
  std::vector<Positional> positionals_;
};

}  // namespace peregrine::cli
