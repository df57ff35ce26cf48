// safetensors reader. The JSON header is parsed with nlohmann-json under a callback that bounds
// nesting depth and value count and rejects duplicate keys (which the library would otherwise
// silently resolve); then every tensor entry is checked field by field, and the entries' byte
// ranges must tile the data section exactly (sorted, no overlap, no hole, nothing left over).
#include "format/safetensors.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "format/json_file.h"
#include "util/error.h"

namespace peregrine {
namespace {

using nlohmann::json;

constexpr int kMaxJsonDepth = 8;              // a header needs 3 (root, entry, shape)
constexpr uint64_t kMaxJsonValues = 1u << 22; // ~100 values per tensor for 40k tensors
constexpr size_t kMaxDims = 8;
constexpr size_t kMaxIndexBytes = 64u << 20;  // real indexes are tens of KiB

struct DtypeInfo {
  std::string_view name;
  size_t bytes;
  bool supported;
  TensorType type;
};

// Every dtype the format defines, so an unsupported one is named as such (not as garbage).
constexpr DtypeInfo kDtypes[] = {
    {"F32", 4, true, TensorType::F32},   {"F16", 2, true, TensorType::F16},
    {"BF16", 2, true, TensorType::BF16}, {"F64", 8, false, TensorType::F32},
    {"I64", 8, false, TensorType::F32},  {"U64", 8, false, TensorType::F32},
    {"I32", 4, false, TensorType::F32},  {"U32", 4, false, TensorType::F32},
    {"I16", 2, false, TensorType::F32},  {"U16", 2, false, TensorType::F32},
    {"I8", 1, false, TensorType::F32},   {"U8", 1, false, TensorType::F32},
    {"BOOL", 1, false, TensorType::F32}, {"F8_E4M3", 1, false, TensorType::F32},
    {"F8_E5M2", 1, false, TensorType::F32},
};

json parse_header_json(std::string_view text, const std::string& name) {
  if (text.empty() || text.front() != '{') {
    throw FormatError(name + ": not a safetensors file (the header does not start with '{')");
  }
  std::vector<std::set<std::string>> keys_seen;  // one set per open object
  uint64_t values = 0;
  auto guard = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > kMaxJsonDepth) throw FormatError(name + ": safetensors header nests deeper than expected");
    if (++values > kMaxJsonValues) throw FormatError(name + ": safetensors header holds too many values");
    switch (event) {
      case json::parse_event_t::object_start: keys_seen.emplace_back(); break;
      case json::parse_event_t::object_end: if (!keys_seen.empty()) keys_seen.pop_back(); break;
      case json::parse_event_t::key:
        if (!keys_seen.empty() && !keys_seen.back().insert(parsed.get<std::string>()).second) {
          throw FormatError(name + ": safetensors header repeats the key '" + parsed.get<std::string>() + "'");
        }
        break;
      default: break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), guard);
  } catch (const json::exception& e) {
    throw FormatError(name + ": safetensors header is not valid JSON: " + e.what());
  }
}

struct Entry {
  SafetensorsTensor tensor;
  uint64_t begin = 0, end = 0;
};

Entry parse_entry(const std::string& key, const json& v, const std::string& name) {
  auto fail = [&](const std::string& what) -> Entry {
    throw FormatError(name + ": tensor '" + key + "': " + what);
  };
  if (!v.is_object()) fail("entry is not an object");
  for (const auto& [field, _] : v.items()) {
    if (field != "dtype" && field != "shape" && field != "data_offsets") fail("unexpected field '" + field + "'");
  }
  if (!v.contains("dtype") || !v["dtype"].is_string()) fail("missing string field 'dtype'");
  if (!v.contains("shape") || !v["shape"].is_array()) fail("missing array field 'shape'");
  if (!v.contains("data_offsets") || !v["data_offsets"].is_array()) fail("missing array field 'data_offsets'");

  const std::string dtype = v["dtype"].get<std::string>();
  const auto* info = std::find_if(std::begin(kDtypes), std::end(kDtypes), [&](const DtypeInfo& d) { return d.name == dtype; });
  if (info == std::end(kDtypes)) fail("unknown dtype '" + dtype + "'");
  if (!info->supported) fail("dtype " + dtype + " is not supported (supported: F32, F16, BF16)");

  Entry e;
  e.tensor.name = key;
  e.tensor.type = info->type;
  const json& shape = v["shape"];
  if (shape.size() > kMaxDims) fail("shape has " + std::to_string(shape.size()) + " dimensions (at most 8)");
  uint64_t bytes = info->bytes;
  for (const json& d : shape) {
    if (!d.is_number_unsigned()) fail("shape holds something other than a non-negative integer");
    const uint64_t dim = d.get<uint64_t>();
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (dim != 0 && bytes > std::numeric_limits<uint64_t>::max() / dim)) {
      fail("shape is too large");
    }
    bytes *= dim;
    e.tensor.shape.push_back(static_cast<int64_t>(dim));
  }
  const json& offsets = v["data_offsets"];
  if (offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
    fail("data_offsets must be two non-negative integers");
  }
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.end < e.begin) fail("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] end before they begin");
  if (e.end - e.begin != bytes) {
    fail("data_offsets span " + std::to_string(e.end - e.begin) + " bytes but " + dtype + " " +
         "of its shape needs " + std::to_string(bytes));
  }
  return e;
}

// The entries' ranges must tile [0, data_size) exactly, as the format requires.
void check_layout(std::vector<Entry>& entries, uint64_t data_size, const std::string& name) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.begin < cursor) {
      throw FormatError(name + ": tensor '" + e.tensor.name + "' overlaps tensor '" + entries[i - 1].tensor.name +
                        "' (bytes " + std::to_string(e.begin) + ".." + std::to_string(cursor) + ")");
    }
    if (e.begin > cursor) {
      throw FormatError(name + ": " + std::to_string(e.begin - cursor) + " unused bytes before tensor '" +
                        e.tensor.name + "' (at data offset " + std::to_string(cursor) + ")");
    }
    if (e.end > data_size) {
      throw FormatError(name + ": tensor '" + e.tensor.name + "' data ends at offset " + std::to_string(e.end) +
                        ", past the end of the data (" + std::to_string(data_size) + " bytes; truncated file?)");
    }
    cursor = e.end;
  }
  if (cursor != data_size) {
    throw FormatError(name + ": " + std::to_string(data_size - cursor) + " bytes after the last tensor are not "
                      "described by the header");
  }
}

}  // namespace

int64_t SafetensorsTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // the parser bounded the product by the file size
  return n;
}

std::vector<SafetensorsTensor> parse_safetensors(std::span<const std::byte> bytes, const std::string& name) {
  if (bytes.size() < 8) {
    throw FormatError(name + ": file of " + std::to_string(bytes.size()) +
                      " bytes is too small for a safetensors header (8-byte length first)");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  if (header_len > kMaxSafetensorsHeader) {
    throw FormatError(name + ": safetensors header length " + std::to_string(header_len) + " is over the " +
                      std::to_string(kMaxSafetensorsHeader) + "-byte limit (not a safetensors file?)");
  }
  if (header_len > bytes.size() - 8) {
    throw FormatError(name + ": safetensors header length " + std::to_string(header_len) + " runs past the end of the " +
                      std::to_string(bytes.size()) + "-byte file (truncated?)");
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), static_cast<size_t>(header_len));
  const json header = parse_header_json(text, name);
  if (!header.is_object()) throw FormatError(name + ": safetensors header is not a JSON object");

  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) throw FormatError(name + ": '__metadata__' is not an object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) throw FormatError(name + ": '__metadata__' value '" + k + "' is not a string");
      }
      continue;
    }
    entries.push_back(parse_entry(key, value, name));
  }
  const std::span<const std::byte> data = bytes.subspan(8 + static_cast<size_t>(header_len));
  check_layout(entries, data.size(), name);

  std::vector<SafetensorsTensor> out;
  out.reserve(entries.size());
  for (Entry& e : entries) {
    e.tensor.data = data.subspan(static_cast<size_t>(e.begin), static_cast<size_t>(e.end - e.begin));
    out.push_back(std::move(e.tensor));
  }
  return out;
}

SafetensorsFile read_safetensors(const std::filesystem::path& path) {
  auto mapping = std::make_shared<MappedFile>(path);
  SafetensorsFile f;
  f.path = path.string();
  f.tensors = parse_safetensors(mapping->bytes(), f.path);
  f.mapping = std::move(mapping);
  return f;
}

std::vector<SafetensorsFile> read_safetensors_index(const std::filesystem::path& index_json) {
  const std::string name = index_json.string();
  const json index = read_json_file(index_json, kMaxIndexBytes);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw FormatError(name + ": missing object 'weight_map'");
  }
  std::map<std::string, std::vector<std::string>> by_shard;  // shard file -> tensors it should hold
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) throw FormatError(name + ": weight_map entry '" + tensor + "' is not a file name");
    const std::string file = shard.get<std::string>();
    const std::filesystem::path rel(file);
    if (file.empty() || rel.is_absolute() || rel.has_parent_path() || file == "." || file == "..") {
      throw FormatError(name + ": weight_map entry '" + tensor + "' names '" + file +
                        "', not a file beside the index");
    }
    by_shard[file].push_back(tensor);
  }
  if (by_shard.empty()) throw FormatError(name + ": weight_map is empty");

  std::vector<SafetensorsFile> shards;
  const std::filesystem::path dir = index_json.parent_path();
  for (const auto& [file, tensors] : by_shard) {
    const std::filesystem::path path = dir / file;
    if (!std::filesystem::is_regular_file(path)) {
      throw FormatError(name + ": shard '" + file + "' (holding '" + tensors.front() + "') does not exist");
    }
    SafetensorsFile shard = read_safetensors(path);
    std::set<std::string> present;
    for (const auto& t : shard.tensors) present.insert(t.name);
    for (const auto& t : tensors) {
      if (!present.erase(t)) throw FormatError(name + ": tensor '" + t + "' is not in shard '" + file + "'");
    }
    if (!present.empty()) {
      throw FormatError(shard.path + ": tensor '" + *present.begin() + "' is not listed in " + name);
    }
    shards.push_back(std::move(shard));
  }
  return shards;
}

}  // namespace peregrine
