#include "dist/step_message.h"

#include <cstring>
#include <string>

#include "dist/communicator.h"

namespace peregrine::dist {
namespace {

template <class T>
void put(std::vector<std::byte>& out, const T& v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

template <class T>
void put_array(std::vector<std::byte>& out, const std::vector<T>& v) {
  put<uint64_t>(out, v.size());
  const auto* p = reinterpret_cast<const std::byte*>(v.data());
  out.insert(out.end(), p, p + v.size() * sizeof(T));
}

class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  template <class T>
  T get() {
    T v;
    take(&v, sizeof(T));
    return v;
  }
  template <class T>
  void get_array(std::vector<T>& v) {
    const auto n = get<uint64_t>();
    if (n > (bytes_.size() - pos_) / sizeof(T)) fail();
    v.resize(n);
    take(v.data(), n * sizeof(T));
  }
  bool done() const { return pos_ == bytes_.size(); }
  [[noreturn]] static void fail() { throw CommError("step message: malformed bytes from rank 0"); }

 private:
  void take(void* dst, size_t n) {
    if (n > bytes_.size() - pos_) fail();
    std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
  }
  std::span<const std::byte> bytes_;
  size_t pos_ = 0;
};

}  // namespace

void encode(const StepMessage& m, std::vector<std::byte>& out) {
  out.clear();
  put(out, m.kind);
  switch (m.kind) {
    case StepKind::Forward:
      put_array(out, m.journal);
      for (const Batch* b : {&m.batch, &m.decode}) {
        put_array(out, b->tokens);
        put_array(out, b->positions);
        put_array(out, b->seq_ids);
        put_array(out, b->want_logits);
      }
      break;
    case StepKind::CheckMirror: put_array(out, m.journal); break;
    case StepKind::KvTransfer:
      put_array(out, m.journal);
      put(out, m.transfer.seq);
      put(out, m.transfer.length);
      put_array(out, m.transfer.blocks);
      break;
    case StepKind::BindCache:
      put(out, m.cache.type);
      put(out, m.cache.n_blocks);
      put(out, m.cache.block_size);
      break;
    case StepKind::Heartbeat:
    case StepKind::Shutdown: break;
  }
}

uint64_t checksum_bytes(std::span<const std::byte> bytes) {
  uint64_t h = 14695981039346656037ull;
  for (std::byte b : bytes) h = (h ^ static_cast<uint64_t>(b)) * 1099511628211ull;
  return h;
}

void decode(std::span<const std::byte> bytes, StepMessage& m) {
  Reader r(bytes);
  m.kind = r.get<StepKind>();
  switch (m.kind) {
    case StepKind::Forward: {
      r.get_array(m.journal);
      for (Batch* b : {&m.batch, &m.decode}) {
        r.get_array(b->tokens);
        r.get_array(b->positions);
        r.get_array(b->seq_ids);
        r.get_array(b->want_logits);
        const size_t n = b->tokens.size();
        if (b->positions.size() != n || b->seq_ids.size() != n || b->want_logits.size() != n) Reader::fail();
      }
      break;
    }
    case StepKind::CheckMirror: r.get_array(m.journal); break;
    case StepKind::KvTransfer:
      r.get_array(m.journal);
      m.transfer.seq = r.get<SeqId>();
      m.transfer.length = r.get<int64_t>();
      r.get_array(m.transfer.blocks);
      break;
    case StepKind::BindCache:
      m.cache.type = r.get<KvType>();
      m.cache.n_blocks = r.get<int64_t>();
      m.cache.block_size = r.get<int32_t>();
      break;
    case StepKind::Heartbeat:
    case StepKind::Shutdown: break;
    default: Reader::fail();
  }
  if (!r.done()) Reader::fail();
}

}  // namespace peregrine::dist
