// GGUF reader and writer. The reader trusts nothing in the file: each count and length is
// checked against the bytes that remain before anything is allocated, and every tensor's shape,
// type, offset and extent is validated before a view is handed out.
#include "format/gguf.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <stdexcept>
#include <unordered_set>

#include "format/mapped_file.h"
#include "util/error.h"

namespace peregrine {

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr size_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;
// Metadata values held in memory (array elements count one each). Real vocabularies hold a few
// hundred thousand; this bound stops a crafted file of tiny elements from costing ~50x its size.
constexpr uint64_t kMaxMetaValues = uint64_t{1} << 24;

// Bytes one element of `t` occupies at least in the file (for bounding array counts).
size_t min_encoded_size(MetaType t) {
  switch (t) {
    case MetaType::U8:
    case MetaType::I8:
    case MetaType::BOOL:
      return 1;
    case MetaType::U16:
    case MetaType::I16:
      return 2;
    case MetaType::U32:
    case MetaType::I32:
    case MetaType::F32:
      return 4;
    case MetaType::U64:
    case MetaType::I64:
    case MetaType::F64:
      return 8;
    case MetaType::STRING:
      return 8;
    case MetaType::ARRAY:
      return 12;
  }
  return 1;
}

bool valid_meta_type(uint32_t t) { return t <= static_cast<uint32_t>(MetaType::F64); }

class Reader {
 public:
  Reader(std::span<const std::byte> bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  [[noreturn]] void fail(const std::string& what) const { throw FormatError(name_ + ": " + what); }

  size_t pos() const { return pos_; }
  size_t left() const { return bytes_.size() - pos_; }

  void need(size_t n, const char* what) const {
    if (n > left())
      fail(std::string("truncated file: ") + what + " at offset " + std::to_string(pos_) + " needs " +
           std::to_string(n) + " bytes, only " + std::to_string(left()) + " left");
  }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const char* what) {
    const uint64_t len = read<uint64_t>(what);
    if (len > left())
      fail(std::string(what) + " at offset " + std::to_string(pos_ - 8) + " has length " + std::to_string(len) +
           ", more than the " + std::to_string(left()) + " bytes left");
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

  MetaValue read_value(MetaType type, const std::string& key, int depth) {
    switch (type) {
      case MetaType::U8:
        return {type, uint64_t{read<uint8_t>("metadata value")}};
      case MetaType::I8:
        return {type, int64_t{read<int8_t>("metadata value")}};
      case MetaType::U16:
        return {type, uint64_t{read<uint16_t>("metadata value")}};
      case MetaType::I16:
        return {type, int64_t{read<int16_t>("metadata value")}};
      case MetaType::U32:
        return {type, uint64_t{read<uint32_t>("metadata value")}};
      case MetaType::I32:
        return {type, int64_t{read<int32_t>("metadata value")}};
      case MetaType::U64:
        return {type, read<uint64_t>("metadata value")};
      case MetaType::I64:
        return {type, read<int64_t>("metadata value")};
      case MetaType::F32:
        return {type, double{read<float>("metadata value")}};
      case MetaType::F64:
        return {type, read<double>("metadata value")};
      case MetaType::BOOL: {
        const uint8_t b = read<uint8_t>("metadata value");
        if (b > 1) fail("metadata key '" + key + "': bool value " + std::to_string(b) + " is not 0 or 1");
        return {type, b == 1};
      }
      case MetaType::STRING:
        return {type, read_string("metadata string")};
      case MetaType::ARRAY:
        return read_array(key, depth + 1);
    }
    fail("metadata key '" + key + "': unknown value type");
  }

  MetaValue read_array(const std::string& key, int depth) {
    if (depth > kMaxArrayDepth)
      fail("metadata key '" + key + "': arrays nested deeper than " + std::to_string(kMaxArrayDepth));
    const uint32_t raw_elem = read<uint32_t>("array element type");
    if (!valid_meta_type(raw_elem))
      fail("metadata key '" + key + "': unknown array element type " + std::to_string(raw_elem));
    const auto elem = static_cast<MetaType>(raw_elem);
    const uint64_t count = read<uint64_t>("array length");
    if (count > left() / min_encoded_size(elem))
      fail("metadata key '" + key + "': array of " + std::to_string(count) + " " + std::string(meta_type_name(elem)) +
           " values cannot fit in the " + std::to_string(left()) + " bytes left");
    values_ += count;
    if (values_ > kMaxMetaValues) fail("metadata holds more than " + std::to_string(kMaxMetaValues) + " values");
    std::vector<MetaValue> items;
    items.reserve(static_cast<size_t>(count));
    for (uint64_t i = 0; i < count; ++i) items.push_back(read_value(elem, key, depth));
    return MetaValue::array(elem, std::move(items));
  }

  const std::byte* data() const { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }
  void seek(size_t p) { pos_ = p; }

 private:
  std::span<const std::byte> bytes_;
  const std::string& name_;
  size_t pos_ = 0;
  uint64_t values_ = 0;
};

struct Counts {
  uint64_t n_tensors, n_kv;
};

// Magic, version and the two counts, each count bounded by the bytes left.
Counts read_header(Reader& r, ModelFile& mf) {
  const uint32_t magic = r.read<uint32_t>("magic");
  if (magic != kGgufMagic) r.fail("not a GGUF file (bad magic)");
  const uint32_t version = r.read<uint32_t>("version");
  if (version == 1) r.fail("GGUF v1 is not supported (re-convert the model with a current tool)");
  if (version != 2 && version != 3) {
    if ((version & 0xFFFF) == 0 && version != 0) r.fail("big-endian GGUF files are not supported");
    r.fail("unsupported GGUF version " + std::to_string(version));
  }
  mf.gguf_version = version;

  const uint64_t n_tensors = r.read<uint64_t>("tensor count");
  const uint64_t n_kv = r.read<uint64_t>("metadata count");
  // Smallest encodings: a kv is key length + 1 key byte + type + 1 value byte; a tensor info is
  // name length + 1 name byte + n_dims + one dim + type + offset.
  if (n_kv > r.left() / 14)
    r.fail("metadata count " + std::to_string(n_kv) + " cannot fit in a file of " + std::to_string(r.size()) +
           " bytes");
  if (n_tensors > r.left() / 33)
    r.fail("tensor count " + std::to_string(n_tensors) + " cannot fit in a file of " + std::to_string(r.size()) +
           " bytes");
  return {n_tensors, n_kv};
}

void read_metadata(Reader& r, uint64_t n_kv, ModelFile& mf) {
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.read_string("metadata key");
    if (key.empty()) r.fail("metadata key " + std::to_string(i) + " is empty");
    if (mf.meta.contains(key)) r.fail("duplicate metadata key '" + key + "'");
    const uint32_t raw_type = r.read<uint32_t>("metadata value type");
    if (!valid_meta_type(raw_type))
      r.fail("metadata key '" + key + "' has unknown value type " + std::to_string(raw_type));
    MetaValue v = r.read_value(static_cast<MetaType>(raw_type), key, 0);
    mf.meta.set(std::move(key), std::move(v));
  }
}

// general.alignment if present (a power of two up to 2^30), else the default 32.
size_t data_alignment(const Reader& r, const Metadata& meta) {
  const MetaValue* a = meta.find("general.alignment");
  if (!a) return kDefaultAlignment;
  if (!a->is_integer()) r.fail("general.alignment is not an integer");
  const int64_t al = a->as_int();
  if (al <= 0 || (al & (al - 1)) != 0 || al > (int64_t{1} << 30))
    r.fail("general.alignment " + std::to_string(al) + " is not a power of two");
  return static_cast<size_t>(al);
}

// Where a tensor's bytes are, relative to the data section, and how many.
struct DataExtent {
  uint64_t offset;
  size_t bytes;
};

// One tensor info: name, shape (1 to 4 non-zero dims whose product fits int64), type (known,
// rows whole blocks), offset (aligned). The view's data is filled in later.
DataExtent read_tensor_info(Reader& r, uint64_t index, size_t alignment, std::unordered_set<std::string>& names,
                            TensorView& t) {
  t.name = r.read_string("tensor name");
  if (t.name.empty()) r.fail("tensor " + std::to_string(index) + " has an empty name");
  const std::string what = "tensor '" + t.name + "'";
  if (!names.insert(t.name).second) r.fail("duplicate tensor name '" + t.name + "'");
  const uint32_t n_dims = r.read<uint32_t>("tensor dimension count");
  if (n_dims == 0 || n_dims > kMaxDims)
    r.fail(what + " has " + std::to_string(n_dims) + " dimensions (supported: 1 to 4)");
  int64_t n_elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t dim = r.read<uint64_t>("tensor dimension");
    if (dim == 0) r.fail(what + " has a zero dimension");
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        static_cast<int64_t>(dim) > std::numeric_limits<int64_t>::max() / n_elements)
      r.fail(what + " has a shape whose element count overflows");
    n_elements *= static_cast<int64_t>(dim);
    t.shape.push_back(static_cast<int64_t>(dim));
  }
  const uint32_t raw_type = r.read<uint32_t>("tensor type");
  const auto info = tensor_type_info(raw_type);
  if (!info) r.fail(what + " has unknown or unsupported tensor type id " + std::to_string(raw_type));
  t.type = info->type;
  if (t.shape[0] % info->block_elems != 0)
    r.fail(what + " row length " + std::to_string(t.shape[0]) + " is not a multiple of the " + std::string(info->name) +
           " block size " + std::to_string(info->block_elems));
  size_t nbytes = 0;
  try {
    nbytes = tensor_bytes(t.type, n_elements);
  } catch (const std::exception&) {
    r.fail(what + " is too large");
  }
  const uint64_t offset = r.read<uint64_t>("tensor offset");
  if (offset % alignment != 0)
    r.fail(what + " data offset " + std::to_string(offset) + " is not a multiple of the alignment " +
           std::to_string(alignment));
  return {offset, nbytes};
}

std::vector<DataExtent> read_tensor_infos(Reader& r, uint64_t n_tensors, size_t alignment, ModelFile& mf) {
  std::vector<DataExtent> extents;
  extents.reserve(static_cast<size_t>(n_tensors));
  std::unordered_set<std::string> names;
  mf.tensors.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorView t;
    extents.push_back(read_tensor_info(r, i, alignment, names, t));
    mf.tensors.push_back(std::move(t));
  }
  return extents;
}

// Points each view at its bytes; the data section starts at the first multiple of the alignment
// after the header (computed without overflow: the header end is at most the file size and the
// alignment at most 2^30). Every tensor must end inside the file.
void place_tensor_data(const Reader& r, const std::vector<DataExtent>& extents, ModelFile& mf) {
  const uint64_t data_start = (static_cast<uint64_t>(r.pos()) + mf.alignment - 1) / mf.alignment * mf.alignment;
  const uint64_t file_size = r.size();
  for (size_t i = 0; i < mf.tensors.size(); ++i) {
    const auto& [offset, nbytes] = extents[i];
    const bool past =
        data_start > file_size || offset > file_size - data_start || nbytes > file_size - data_start - offset;
    if (past) {
      r.fail(
          "tensor '" + mf.tensors[i].name + "' data (offset " +
          std::to_string(offset <= std::numeric_limits<uint64_t>::max() - data_start ? data_start + offset : offset) +
          ", " + std::to_string(nbytes) + " bytes) ends past end of file (size " + std::to_string(file_size) + ")");
    }
    mf.tensors[i].data = std::span<const std::byte>(r.data() + data_start + offset, nbytes);
  }
}

// Tensors must not share bytes: a writer bug or a crafted file could alias weights.
void check_no_overlap(const Reader& r, const std::vector<DataExtent>& extents, const ModelFile& mf) {
  std::vector<size_t> order(mf.tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return extents[a].offset < extents[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const DataExtent& prev = extents[order[k - 1]];
    const DataExtent& cur = extents[order[k]];
    if (prev.offset + prev.bytes > cur.offset)
      r.fail("tensor '" + mf.tensors[order[k - 1]].name + "' (offset " + std::to_string(prev.offset) + ", " +
             std::to_string(prev.bytes) + " bytes) overlaps tensor '" + mf.tensors[order[k]].name + "' (offset " +
             std::to_string(cur.offset) + ")");
  }
}

ModelFile parse(std::span<const std::byte> bytes, const std::string& name) {
  Reader r(bytes, name);
  ModelFile mf;
  mf.path = name;
  const Counts counts = read_header(r, mf);
  read_metadata(r, counts.n_kv, mf);
  mf.alignment = data_alignment(r, mf.meta);
  const std::vector<DataExtent> extents = read_tensor_infos(r, counts.n_tensors, mf.alignment, mf);
  place_tensor_data(r, extents, mf);
  check_no_overlap(r, extents, mf);
  return mf;
}

// ---- writer helpers

class Out {
 public:
  Out(const std::filesystem::path& path) : path_(path), f_(path, std::ios::binary | std::ios::trunc) {
    if (!f_) throw FormatError(path.string() + ": cannot create: " + std::strerror(errno));
  }
  void bytes(const void* p, size_t n) {
    f_.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
    if (!f_) throw FormatError(path_.string() + ": write failed: " + std::strerror(errno));
    pos_ += n;
  }
  template <typename T>
  void put(T v) {
    bytes(&v, sizeof v);
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad(size_t alignment) {
    static const char zeros[4096] = {};
    size_t n = (alignment - pos_ % alignment) % alignment;
    while (n > 0) {
      const size_t k = std::min(n, sizeof zeros);
      bytes(zeros, k);
      n -= k;
    }
  }
  void close() {
    f_.close();
    if (!f_) throw FormatError(path_.string() + ": write failed: " + std::strerror(errno));
  }
  uint64_t pos() const { return pos_; }

 private:
  std::filesystem::path path_;
  std::ofstream f_;
  uint64_t pos_ = 0;
};

[[noreturn]] void bad_value(const std::string& key, const std::string& why) {
  throw UsageError("GGUF writer: metadata key '" + key + "': " + why);
}

// The value's integer as raw 64 bits, checked to fit the GGUF type's range.
uint64_t int_bits(const MetaValue& v, const std::string& key, int64_t lo, uint64_t hi) {
  if (const auto* u = std::get_if<uint64_t>(&v.value)) {
    if (*u > hi) bad_value(key, "value " + std::to_string(*u) + " does not fit " + std::string(meta_type_name(v.type)));
    return *u;
  }
  if (const auto* i = std::get_if<int64_t>(&v.value)) {
    if (*i < lo || (*i > 0 && static_cast<uint64_t>(*i) > hi))
      bad_value(key, "value " + std::to_string(*i) + " does not fit " + std::string(meta_type_name(v.type)));
    return static_cast<uint64_t>(*i);
  }
  bad_value(key, "type " + std::string(meta_type_name(v.type)) + " holds no integer");
}

void write_value(Out& out, const MetaValue& v, const std::string& key) {
  constexpr auto i64max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  switch (v.type) {
    case MetaType::U8:
      return out.put(static_cast<uint8_t>(int_bits(v, key, 0, 0xFF)));
    case MetaType::I8:
      return out.put(static_cast<int8_t>(int_bits(v, key, -128, 127)));
    case MetaType::U16:
      return out.put(static_cast<uint16_t>(int_bits(v, key, 0, 0xFFFF)));
    case MetaType::I16:
      return out.put(static_cast<int16_t>(int_bits(v, key, -32768, 32767)));
    case MetaType::U32:
      return out.put(static_cast<uint32_t>(int_bits(v, key, 0, 0xFFFFFFFFu)));
    case MetaType::I32:
      return out.put(static_cast<int32_t>(
          int_bits(v, key, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max())));
    case MetaType::U64:
      return out.put(int_bits(v, key, 0, std::numeric_limits<uint64_t>::max()));
    case MetaType::I64:
      return out.put(static_cast<int64_t>(int_bits(v, key, std::numeric_limits<int64_t>::min(), i64max)));
    case MetaType::F32:
      return out.put(static_cast<float>(v.as_float()));
    case MetaType::F64:
      return out.put(v.as_float());
    case MetaType::BOOL:
      return out.put(static_cast<uint8_t>(v.as_bool() ? 1 : 0));
    case MetaType::STRING:
      return out.str(v.as_string());
    case MetaType::ARRAY: {
      const MetaArray& a = v.as_array();
      out.put(static_cast<uint32_t>(a.elem_type));
      out.put(static_cast<uint64_t>(a.items.size()));
      for (const MetaValue& item : a.items) {
        if (item.type != a.elem_type)
          bad_value(key, "array of " + std::string(meta_type_name(a.elem_type)) + " holds a " +
                             std::string(meta_type_name(item.type)));
        write_value(out, item, key);
      }
      return;
    }
  }
  bad_value(key, "unknown type");
}

}  // namespace

ModelFile read_gguf_bytes(std::span<const std::byte> bytes, const std::string& name) { return parse(bytes, name); }

ModelFile read_gguf(const std::filesystem::path& path) {
  auto mapping = std::make_shared<MappedFile>(path);
  ModelFile mf = parse(mapping->bytes(), path.string());
  mf.storage = std::move(mapping);
  return mf;
}

GgufWriter::GgufWriter(Metadata meta, size_t alignment) : meta_(std::move(meta)), alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > (size_t{1} << 30))
    throw UsageError("GGUF writer: alignment " + std::to_string(alignment) + " is not a power of two");
  // Readers only learn a non-default alignment from the metadata; keep the key if present.
  if (alignment != kDefaultAlignment || meta_.contains("general.alignment"))
    meta_.set("general.alignment", MetaValue::u32(static_cast<uint32_t>(alignment)));
}

void GgufWriter::add_tensor(std::string name, TensorType type, std::vector<int64_t> shape, Producer produce) {
  if (name.empty()) throw UsageError("GGUF writer: empty tensor name");
  for (const auto& p : tensors_)
    if (p.name == name) throw UsageError("GGUF writer: duplicate tensor '" + name + "'");
  if (shape.empty() || shape.size() > kMaxDims)
    throw UsageError("GGUF writer: tensor '" + name + "' needs 1 to 4 dimensions");
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0 || d > std::numeric_limits<int64_t>::max() / n)
      throw UsageError("GGUF writer: tensor '" + name + "' has an invalid shape");
    n *= d;
  }
  const auto& info = tensor_type_info(type);
  if (shape[0] % info.block_elems != 0)
    throw UsageError("GGUF writer: tensor '" + name + "' row length " + std::to_string(shape[0]) +
                     " is not a multiple of the " + std::string(info.name) + " block size");
  tensors_.push_back({std::move(name), type, std::move(shape), std::move(produce)});
}

void GgufWriter::add_tensor_bytes(std::string name, TensorType type, std::vector<int64_t> shape,
                                  std::span<const std::byte> bytes) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d > 0 ? d : 1;
  const std::string label = name;
  add_tensor(std::move(name), type, std::move(shape), [bytes, label](std::span<std::byte> dst) {
    if (dst.size() != bytes.size())
      throw UsageError("GGUF writer: tensor '" + label + "' has " + std::to_string(bytes.size()) +
                       " bytes, its shape needs " + std::to_string(dst.size()));
    std::memcpy(dst.data(), bytes.data(), bytes.size());
  });
  if (tensor_bytes(type, n) != bytes.size()) {
    tensors_.pop_back();
    throw UsageError("GGUF writer: tensor '" + label + "' has " + std::to_string(bytes.size()) +
                     " bytes, its shape needs " + std::to_string(tensor_bytes(type, n)));
  }
}

void GgufWriter::write(const std::filesystem::path& path,
                       const std::function<void(uint64_t, uint64_t)>& progress) const {
  write_file(path, progress, true);
}

void GgufWriter::write_header_only(const std::filesystem::path& path) const { write_file(path, {}, false); }

void GgufWriter::write_file(const std::filesystem::path& path,
                            const std::function<void(uint64_t, uint64_t)>& progress, bool with_data) const {
  std::vector<size_t> sizes;
  uint64_t total = 0;
  for (const auto& t : tensors_) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    sizes.push_back(tensor_bytes(t.type, n));
    total += sizes.back();
  }
  // Written to a temporary name and renamed, so a failed conversion never leaves a file that
  // looks complete.
  std::filesystem::path tmp = path;
  tmp += ".partial";
  try {
    Out out(tmp);
    out.put(kGgufMagic);
    out.put(uint32_t{3});
    out.put(static_cast<uint64_t>(tensors_.size()));
    out.put(static_cast<uint64_t>(meta_.size()));
    for (const auto& [key, value] : meta_.entries()) {
      out.str(key);
      out.put(static_cast<uint32_t>(value.type));
      write_value(out, value, key);
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      out.str(t.name);
      out.put(static_cast<uint32_t>(t.shape.size()));
      for (int64_t d : t.shape) out.put(static_cast<uint64_t>(d));
      out.put(static_cast<uint32_t>(t.type));
      out.put(offset);
      offset += (sizes[i] + alignment_ - 1) / alignment_ * alignment_;
    }
    out.pad(alignment_);
    if (!with_data) {
      const uint64_t end = out.pos() + offset;
      out.close();
      std::filesystem::resize_file(tmp, end);  // extends with a hole
      std::filesystem::rename(tmp, path);
      return;
    }
    std::vector<std::byte> buf;
    uint64_t done = 0;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      buf.assign(sizes[i], std::byte{0});
      tensors_[i].produce(buf);
      out.bytes(buf.data(), buf.size());
      out.pad(alignment_);
      done += sizes[i];
      if (progress) progress(done, total);
    }
    out.close();
    std::filesystem::rename(tmp, path);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
}

}  // namespace peregrine
