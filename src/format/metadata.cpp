#include "format/metadata.h"

#include <cmath>
#include <limits>

#include "util/error.h"

namespace peregrine {

std::string_view meta_type_name(MetaType t) {
  switch (t) {
    case MetaType::U8: return "u8";
    case MetaType::I8: return "i8";
    case MetaType::U16: return "u16";
    case MetaType::I16: return "i16";
    case MetaType::U32: return "u32";
    case MetaType::I32: return "i32";
    case MetaType::F32: return "f32";
    case MetaType::BOOL: return "bool";
    case MetaType::STRING: return "string";
    case MetaType::ARRAY: return "array";
    case MetaType::U64: return "u64";
    case MetaType::I64: return "i64";
    case MetaType::F64: return "f64";
  }
  return "unknown";
}

MetaValue MetaValue::u32(uint32_t v) { return {MetaType::U32, uint64_t{v}}; }
MetaValue MetaValue::i32(int32_t v) { return {MetaType::I32, int64_t{v}}; }
MetaValue MetaValue::u64(uint64_t v) { return {MetaType::U64, v}; }
MetaValue MetaValue::f32(float v) { return {MetaType::F32, double{v}}; }
MetaValue MetaValue::boolean(bool v) { return {MetaType::BOOL, v}; }
MetaValue MetaValue::string(std::string v) { return {MetaType::STRING, std::move(v)}; }

MetaValue MetaValue::array(MetaType elem_type, std::vector<MetaValue> items) {
  auto arr = std::make_shared<MetaArray>();
  arr->elem_type = elem_type;
  arr->items = std::move(items);
  return {MetaType::ARRAY, std::shared_ptr<MetaArray>(std::move(arr))};
}

MetaValue MetaValue::string_array(std::span<const std::string> items) {
  std::vector<MetaValue> v;
  v.reserve(items.size());
  for (const auto& s : items) v.push_back(string(s));
  return array(MetaType::STRING, std::move(v));
}

MetaValue MetaValue::f32_array(std::span<const float> items) {
  std::vector<MetaValue> v;
  v.reserve(items.size());
  for (float f : items) v.push_back(f32(f));
  return array(MetaType::F32, std::move(v));
}

MetaValue MetaValue::i32_array(std::span<const int32_t> items) {
  std::vector<MetaValue> v;
  v.reserve(items.size());
  for (int32_t i : items) v.push_back(i32(i));
  return array(MetaType::I32, std::move(v));
}

bool MetaValue::is_integer() const {
  switch (type) {
    case MetaType::U8: case MetaType::I8: case MetaType::U16: case MetaType::I16:
    case MetaType::U32: case MetaType::I32: case MetaType::U64: case MetaType::I64:
      return true;
    default:
      return false;
  }
}

bool MetaValue::is_float() const { return type == MetaType::F32 || type == MetaType::F64; }

namespace {
std::string type_error(const MetaValue& v, std::string_view wanted) {
  return "metadata value has type " + std::string(meta_type_name(v.type)) + ", expected " +
         std::string(wanted);
}
}  // namespace

int64_t MetaValue::as_int() const {
  if (!is_integer()) throw FormatError(type_error(*this, "an integer"));
  if (const auto* u = std::get_if<uint64_t>(&value)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw FormatError("metadata integer " + std::to_string(*u) + " is out of range");
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&value)) return *i;
  throw FormatError(type_error(*this, "an integer"));
}

double MetaValue::as_float() const {
  if (const auto* d = std::get_if<double>(&value); d && is_float()) return *d;
  if (is_integer()) {
    if (const auto* u = std::get_if<uint64_t>(&value)) return static_cast<double>(*u);
    if (const auto* i = std::get_if<int64_t>(&value)) return static_cast<double>(*i);
  }
  throw FormatError(type_error(*this, "a number"));
}

bool MetaValue::as_bool() const {
  if (const auto* b = std::get_if<bool>(&value); b && type == MetaType::BOOL) return *b;
  throw FormatError(type_error(*this, "bool"));
}

const std::string& MetaValue::as_string() const {
  if (const auto* s = std::get_if<std::string>(&value); s && type == MetaType::STRING) return *s;
  throw FormatError(type_error(*this, "string"));
}

const MetaArray& MetaValue::as_array() const {
  if (const auto* a = std::get_if<std::shared_ptr<MetaArray>>(&value);
      a && *a && type == MetaType::ARRAY)
    return **a;
  throw FormatError(type_error(*this, "array"));
}

void Metadata::set(std::string key, MetaValue value) {
  if (auto it = index_.find(key); it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
}

const MetaValue* Metadata::find(std::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

namespace {
// Re-throws a conversion error with the key named, so the message says which key is wrong.
template <typename F>
auto with_key(std::string_view key, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const FormatError& e) {
    throw FormatError("metadata key '" + std::string(key) + "': " + e.what());
  }
}

const MetaValue& require(const Metadata& m, std::string_view key) {
  const MetaValue* v = m.find(key);
  if (v == nullptr) throw FormatError("missing metadata key '" + std::string(key) + "'");
  return *v;
}
}  // namespace

int64_t Metadata::get_int(std::string_view key) const {
  const MetaValue& v = require(*this, key);
  return with_key(key, [&] { return v.as_int(); });
}

std::optional<int64_t> Metadata::get_int_opt(std::string_view key) const {
  const MetaValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  return with_key(key, [&] { return v->as_int(); });
}

double Metadata::get_float(std::string_view key) const {
  const MetaValue& v = require(*this, key);
  return with_key(key, [&] { return v.as_float(); });
}

std::optional<double> Metadata::get_float_opt(std::string_view key) const {
  const MetaValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  return with_key(key, [&] { return v->as_float(); });
}

std::optional<bool> Metadata::get_bool_opt(std::string_view key) const {
  const MetaValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  return with_key(key, [&] { return v->as_bool(); });
}

const std::string& Metadata::get_string(std::string_view key) const {
  const MetaValue& v = require(*this, key);
  return with_key(key, [&]() -> const std::string& { return v.as_string(); });
}

std::optional<std::string> Metadata::get_string_opt(std::string_view key) const {
  const MetaValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  return with_key(key, [&] { return v->as_string(); });
}

const MetaArray* Metadata::get_array_opt(std::string_view key) const {
  const MetaValue* v = find(key);
  if (v == nullptr) return nullptr;
  return with_key(key, [&] { return &v->as_array(); });
}

}  // namespace peregrine
