#include "server/json_fields.h"

#include <cmath>

#include "server/api_error.h"

namespace peregrine::server {
namespace {

const nlohmann::json* field(const nlohmann::json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string range_text(double lo, double hi) {
  auto text = [](double v) {
    std::string s = std::to_string(v);
    while (s.find('.') != std::string::npos && (s.back() == '0' || s.back() == '.')) {
      const bool dot = s.back() == '.';
      s.pop_back();
      if (dot) break;
    }
    return s;
  };
  return "[" + text(lo) + ", " + text(hi) + "]";
}

}  // namespace

std::optional<bool> read_bool(const nlohmann::json& body, const char* name) {
  const nlohmann::json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) throw invalid_request(std::string("'") + name + "' must be a boolean", name);
  return v->get<bool>();
}

int64_t as_int(const nlohmann::json& v, const std::string& param, int64_t lo, int64_t hi) {
  int64_t value = 0;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      throw invalid_request("'" + param + "' is out of range", param);
    }
    value = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) {
      throw invalid_request("'" + param + "' must be an integer", param);
    }
    value = static_cast<int64_t>(d);
  } else {
    throw invalid_request("'" + param + "' must be an integer", param);
  }
  if (value < lo || value > hi) {
    throw invalid_request("'" + param + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              "], got " + std::to_string(value),
                          param);
  }
  return value;
}

std::optional<int64_t> read_int(const nlohmann::json& body, const char* name, int64_t lo, int64_t hi) {
  const nlohmann::json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  return as_int(*v, name, lo, hi);
}

std::optional<double> read_number(const nlohmann::json& body, const char* name, double lo, double hi) {
  const nlohmann::json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) throw invalid_request(std::string("'") + name + "' must be a number", name);
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    throw invalid_request(std::string("'") + name + "' must be a finite number in " + range_text(lo, hi), name);
  }
  return d;
}

std::optional<std::string> read_string(const nlohmann::json& body, const char* name) {
  const nlohmann::json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) throw invalid_request(std::string("'") + name + "' must be a string", name);
  return v->get<std::string>();
}

}  // namespace peregrine::server
