#include "cli/args.h"

#include <charconv>
#include <cmath>
#include <sstream>

#include "util/error.h"

namespace peregrine::cli {
namespace {

std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  std::stringstream ss(names);
  std::string part;
  while (std::getline(ss, part, ',')) out.push_back(part);
  return out;
}

template <typename T>
T parse_integer(const std::string& flag, const std::string& value) {
  T v{};
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || value.empty())
    throw UsageError("invalid value '" + value + "' for " + flag + ": expected an integer");
  return v;
}

double parse_double(const std::string& flag, const std::string& value) {
  double v = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || value.empty() || !std::isfinite(v))
    throw UsageError("invalid value '" + value + "' for " + flag + ": expected a number");
  return v;
}

}  // namespace

ArgParser::ArgParser(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void ArgParser::add(std::string names, std::string value_name, std::string help,
                    std::string default_text,
                    std::function<void(const std::string&, const std::string&)> set) {
  options_.push_back(Option{split_names(names), std::move(value_name), std::move(help),
                            std::move(default_text), std::move(set)});
}

void ArgParser::flag(std::string names, bool* target, std::string help) {
  add(std::move(names), "", std::move(help), "", [target](auto&, auto&) { *target = true; });
}

void ArgParser::option(std::string names, std::string* target, std::string value_name,
                       std::string help) {
  add(std::move(names), std::move(value_name), std::move(help), *target,
      [target](auto&, const std::string& v) { *target = v; });
}

void ArgParser::option(std::string names, std::optional<std::string>* target,
                       std::string value_name, std::string help) {
  add(std::move(names), std::move(value_name), std::move(help), target->value_or(""),
      [target](auto&, const std::string& v) { *target = v; });
}

void ArgParser::option(std::string names, int64_t* target, std::string value_name,
                       std::string help, int64_t min, int64_t max) {
  add(std::move(names), std::move(value_name), std::move(help), std::to_string(*target),
      [target, min, max](const std::string& flag, const std::string& v) {
        int64_t x = parse_integer<int64_t>(flag, v);
        if (x < min || x > max)
          throw UsageError("value " + v + " for " + flag + " is out of range [" +
                           std::to_string(min) + ", " + std::to_string(max) + "]");
        *target = x;
      });
}

void ArgParser::option(std::string names, uint64_t* target, std::string value_name,
                       std::string help) {
  add(std::move(names), std::move(value_name), std::move(help), std::to_string(*target),
      [target](const std::string& flag, const std::string& v) {
        *target = parse_integer<uint64_t>(flag, v);
      });
}

void ArgParser::option(std::string names, double* target, std::string value_name,
                       std::string help, double min, double max) {
  std::ostringstream def;
  def << *target;
  add(std::move(names), std::move(value_name), std::move(help), def.str(),
      [target, min, max](const std::string& flag, const std::string& v) {
        double x = parse_double(flag, v);
        if (x < min || x > max) {
          std::ostringstream msg;
          msg << "value " << v << " for " << flag << " is out of range [" << min << ", " << max
              << "]";
          throw UsageError(msg.str());
        }
        *target = x;
      });
}

void ArgParser::positional(std::string name, std::string* target, std::string help,
                           bool required) {
  positionals_.push_back(
      Positional{std::move(name), std::move(help), required, [target](auto& v) { *target = v; }});
}

void ArgParser::positional(std::string name, std::optional<std::string>* target,
                           std::string help) {
  positionals_.push_back(
      Positional{std::move(name), std::move(help), false, [target](auto& v) { *target = v; }});
}

const ArgParser::Option* ArgParser::find(std::string_view name) const {
  for (const auto& o : options_)
    for (const auto& n : o.names)
      if (n == name) return &o;
  return nullptr;
}

bool ArgParser::parse(const std::vector<std::string>& args) {
  size_t next_positional = 0;
  bool only_positionals = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (!only_positionals && (a == "-h" || a == "--help")) {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (!only_positionals && a == "--") {
      only_positionals = true;
      continue;
    }
    if (!only_positionals && a.size() > 1 && a[0] == '-' &&
        !(std::isdigit(static_cast<unsigned char>(a[1])) && !find(a))) {
      std::string name = a, value;
      bool has_inline = false;
      if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
        name = a.substr(0, eq);
        value = a.substr(eq + 1);
        has_inline = true;
      }
      const Option* o = find(name);
      if (!o) throw UsageError("unknown option '" + name + "' for '" + command_ + "' (see --help)");
      if (o->value_name.empty()) {
        if (has_inline) throw UsageError("option " + name + " takes no value");
        o->set(name, "");
        continue;
      }
      if (!has_inline) {
        if (i + 1 >= args.size()) throw UsageError("option " + name + " needs a value (" + o->value_name + ")");
        value = args[++i];
      }
      o->set(name, value);
      continue;
    }
    if (next_positional >= positionals_.size())
      throw UsageError("unexpected argument '" + a + "' for '" + command_ + "' (see --help)");
    positionals_[next_positional++].set(a);
  }
  for (size_t p = next_positional; p < positionals_.size(); ++p)
    if (positionals_[p].required)
      throw UsageError("missing " + positionals_[p].name + " for '" + command_ + "' (see --help)");
  return true;
}

std::string ArgParser::help() const {
  std::ostringstream out;
  out << "usage: peregrine " << command_;
  for (const auto& p : positionals_) out << (p.required ? " " : " [") << p.name << (p.required ? "" : "]");
  if (!options_.empty()) out << " [options]";
  out << "\n\n" << summary_ << "\n";
  if (!positionals_.empty()) {
    out << "\narguments:\n";
    for (const auto& p : positionals_) out << "  " << p.name << "\n      " << p.help << "\n";
  }
  out << "\noptions:\n";
  for (const auto& o : options_) {
    out << "  ";
    for (size_t i = 0; i < o.names.size(); ++i) out << (i ? ", " : "") << o.names[i];
    if (!o.value_name.empty()) out << " " << o.value_name;
    out << "\n      " << o.help;
    if (!o.value_name.empty() && !o.default_text.empty()) out << " (default: " << o.default_text << ")";
    out << "\n";
  }
  out << "  -h, --help\n      show this help\n";
  return out.str();
}

}  // namespace peregrine::cli
