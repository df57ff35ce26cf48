#pragma once
// GGUF metadata: an ordered list of key -> typed value, where a value may be an array of values
// (arrays may nest). Used for GGUF files, and synthesized for llama2.c checkpoints so the rest of
// the engine sees one description of a model whatever file it came from.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace peregrine {

// Value type ids exactly as GGUF numbers them.
enum class MetaType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
std::string_view meta_type_name(MetaType t);

struct MetaValue;
struct MetaArray {
  MetaType elem_type = MetaType::U8;  // type of every element (ARRAY for nested arrays)
  std::vector<MetaValue> items;
};

// One typed value. Integers are held widened (uint64_t / int64_t), floats as double, but the
// original GGUF type is kept so a file round-trips through reader and writer byte for byte.
struct MetaValue {
  MetaType type = MetaType::U32;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<MetaArray>> value;

  static MetaValue u32(uint32_t v);
  static MetaValue i32(int32_t v);
  static MetaValue u64(uint64_t v);
  static MetaValue f32(float v);
  static MetaValue boolean(bool v);
  static MetaValue string(std::string v);
  static MetaValue array(MetaType elem_type, std::vector<MetaValue> items);
  static MetaValue string_array(std::span<const std::string> items);
  static MetaValue f32_array(std::span<const float> items);
  static MetaValue i32_array(std::span<const int32_t> items);

  bool is_integer() const;
  bool is_float() const;
  // Conversions throw FormatError (without a file name; callers add it) if the type does not fit.
  int64_t as_int() const;       // any integer type, range-checked
  double as_float() const;      // F32/F64, or an integer
  bool as_bool() const;
  const std::string& as_string() const;
  const MetaArray& as_array() const;
};

// Key -> value, kept in file order (GGUF writers keep it; llama.cpp prints it in order).
class Metadata {
 public:
  void set(std::string key, MetaValue value);  // replaces an existing key in place
  const MetaValue* find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  size_t size() const { return entries_.size(); }
  const std::vector<std::pair<std::string, MetaValue>>& entries() const { return entries_; }

  // Typed getters. The `required` ones throw FormatError("missing metadata key 'K'") or a type
  // error; the optional ones return nullopt when the key is absent (and still throw on a type
  // mismatch).
  int64_t get_int(std::string_view key) const;
  std::optional<int64_t> get_int_opt(std::string_view key) const;
  double get_float(std::string_view key) const;
  std::optional<double> get_float_opt(std::string_view key) const;
  std::optional<bool> get_bool_opt(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  std::optional<std::string> get_string_opt(std::string_view key) const;
  const MetaArray* get_array_opt(std::string_view key) const;

 private:
  std::vector<std::pair<std::string, MetaValue>> entries_;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace peregrine
