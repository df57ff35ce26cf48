#include "backend/guarded_context.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>

#include "kernels/isa.h"

namespace peregrine {

// One reserved address range that every buffer is cut from, so opening and closing all of them
// is one mprotect call each (a mapping per buffer cost two calls per buffer per operation, which
// dominated the guarded suites' time). Buffers are page-aligned chunks of it: reused first-fit
// when given back (their pages returned to the system with MADV_DONTNEED, so they read as zeros
// again), otherwise taken from the end of the part used so far. Buffers may be given back from
// another thread than the engine's (a model destroyed elsewhere), hence the mutex.
class GuardedContext::Pages {
 public:
  Pages() {
    void* p = mmap(nullptr, kReserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    base_ = static_cast<std::byte*>(p);
  }
  ~Pages() { munmap(base_, kReserve); }
  Pages(const Pages&) = delete;
  Pages& operator=(const Pages&) = delete;

  Buffer allocate(const std::shared_ptr<Pages>& self, size_t bytes) {
    if (bytes == 0) return {};
    static const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t length = (bytes + page - 1) / page * page;
    std::lock_guard lock(mutex_);
    size_t offset = used_;
    const auto fit = std::find_if(free_.begin(), free_.end(), [&](const auto& f) { return f.second >= length; });
    if (fit != free_.end()) {
      offset = fit->first;
      if (fit->second > length) free_.emplace(offset + length, fit->second - length);
      free_.erase(fit);
    } else {
      if (used_ + length > kReserve) throw std::bad_alloc();
      used_ += length;
    }
    // Inside a call (an operation that allocates) the new chunk is open like the rest.
    if (depth_ > 0) protect(base_ + offset, length, PROT_READ | PROT_WRITE);
    chunks_.emplace(offset, length);
    return {base_ + offset, bytes, [self](std::byte* d, size_t) { self->release(d); }};
  }

  void open() {
    std::lock_guard lock(mutex_);
    if (depth_++ == 0 && used_ > 0) protect(base_, used_, PROT_READ | PROT_WRITE);
  }
  void close() {
    std::lock_guard lock(mutex_);
    if (--depth_ == 0 && used_ > 0) protect(base_, used_, PROT_NONE);
  }
  size_t size() const {
    std::lock_guard lock(mutex_);
    return chunks_.size();
  }

 private:
  // 1 TiB of address space, no memory: pages are committed as the context's calls write them.
  static constexpr size_t kReserve = size_t{1} << 40;

  void release(std::byte* data) {
    std::lock_guard lock(mutex_);
    const auto it = chunks_.find(static_cast<size_t>(data - base_));
    if (it == chunks_.end()) return;
    madvise(data, it->second, MADV_DONTNEED);
    free_.emplace(it->first, it->second);
    chunks_.erase(it);
  }
  // mprotect fails only for a range that is not mapped: a broken invariant, so abort (the guard's
  // destructor below may run it, and a throw there would terminate anyway).
  static void protect(std::byte* data, size_t length, int prot) {
    if (mprotect(data, length, prot) != 0) {
      std::perror("guarded context: mprotect");
      std::abort();
    }
  }

  mutable std::mutex mutex_;
  std::byte* base_ = nullptr;
  size_t used_ = 0;                  // bytes of the reserve handed out so far (a page multiple)
  std::map<size_t, size_t> chunks_;  // offset -> length of each live buffer
  std::map<size_t, size_t> free_;    // offset -> length of each chunk given back
  int depth_ = 0;                    // open() calls not yet closed
};

namespace {

// Every buffer open for the guard's lifetime: protected again however the call ends.
class OpenPages {
 public:
  explicit OpenPages(GuardedContext::Pages& pages) : pages_(pages) { pages_.open(); }
  ~OpenPages() { pages_.close(); }
  OpenPages(const OpenPages&) = delete;
  OpenPages& operator=(const OpenPages&) = delete;

 private:
  GuardedContext::Pages& pages_;
};

}  // namespace

GuardedContext::GuardedContext(int n_threads, Activations act)
    : pages_(std::make_shared<Pages>()), inner_(std::make_unique<CpuContext>(n_threads, act, Isa::Scalar)) {}

GuardedContext::~GuardedContext() = default;

Buffer GuardedContext::allocate(size_t bytes) { return pages_->allocate(pages_, bytes); }

size_t GuardedContext::live_regions() const { return pages_->size(); }

std::string GuardedContext::describe() const {
  return "guarded (memory protected outside its calls), " + inner_->describe();
}

template <class F>
decltype(auto) GuardedContext::open(F&& f) {
  const OpenPages guard(*pages_);
  return f();
}

void GuardedContext::copy_to_host(std::span<const float> src, std::span<float> dst) {
  open([&] { inner_->copy_to_host(src, dst); });
}
void GuardedContext::copy_from_host(std::span<const float> src, std::span<float> dst) {
  open([&] { inner_->copy_from_host(src, dst); });
}
void GuardedContext::embed(const TensorView& table, std::span<const TokenId> tokens, std::span<float> x) {
  open([&] { inner_->embed(table, tokens, x); });
}
void GuardedContext::matmul(const TensorView& w, std::span<const float> x, std::span<float> y, int64_t n) {
  open([&] { inner_->matmul(w, x, y, n); });
}
void GuardedContext::matmuls(std::span<const MatmulOutput> outs, std::span<const float> x, int64_t n) {
  open([&] { inner_->matmuls(outs, x, n); });
}
void GuardedContext::matmul_glu(const TensorView& w_gate, const TensorView& w_up, Glu glu, std::span<const float> x,
                                std::span<float> gate, std::span<float> up, int64_t n) {
  open([&] { inner_->matmul_glu(w_gate, w_up, glu, x, gate, up, n); });
}
void GuardedContext::rmsnorm(std::span<const float> x, std::span<const float> weight, float eps, std::span<float> out,
                             int64_t n) {
  open([&] { inner_->rmsnorm(x, weight, eps, out, n); });
}
void GuardedContext::add_bias(std::span<float> x, std::span<const float> bias, int64_t n) {
  open([&] { inner_->add_bias(x, bias, n); });
}
void GuardedContext::add(std::span<float> x, std::span<const float> y) {
  open([&] { inner_->add(x, y); });
}
void GuardedContext::swiglu(std::span<float> gate, std::span<const float> up) {
  open([&] { inner_->swiglu(gate, up); });
}
void GuardedContext::silu(std::span<float> x) {
  open([&] { inner_->silu(x); });
}
void GuardedContext::geglu(std::span<float> gate, std::span<const float> up) {
  open([&] { inner_->geglu(gate, up); });
}
void GuardedContext::scale(std::span<float> x, float s) {
  open([&] { inner_->scale(x, s); });
}
void GuardedContext::softcap(std::span<float> x, float cap) {
  open([&] { inner_->softcap(x, cap); });
}
void GuardedContext::rope_angles(std::span<const int32_t> positions, const RopeParams& p, std::span<float> cos_sin) {
  open([&] { inner_->rope_angles(positions, p, cos_sin); });
}
void GuardedContext::rope(std::span<float> x, int64_t n_heads, int64_t head_dim, const RopeParams& p,
                          std::span<const float> cos_sin, int64_t n) {
  open([&] { inner_->rope(x, n_heads, head_dim, p, cos_sin, n); });
}
std::unique_ptr<KvStorage> GuardedContext::allocate_kv(const KvStorageSpec& spec) {
  std::unique_ptr<KvStorage> kv;
  // The base class's host storage, in memory from this context's allocate(); open while the
  // storage initializes it.
  open([&] { kv = ExecutionContext::allocate_kv(spec); });
  return kv;
}
void GuardedContext::write_kv(KvStorage& kv, int64_t layer, const KvBatchLayout& layout, std::span<const float> k,
                              std::span<const float> v) {
  open([&] { inner_->write_kv(kv, layer, layout, k, v); });
}
void GuardedContext::attention(const KvStorage& kv, int64_t layer, const KvBatchLayout& layout, int64_t n_heads,
                               const AttentionParams& params, std::span<const float> q, std::span<float> out) {
  open([&] { inner_->attention(kv, layer, layout, n_heads, params, q, out); });
}
void GuardedContext::copy_kv_blocks(KvStorage& kv, std::span<const BlockCopy> copies) {
  open([&] { inner_->copy_kv_blocks(kv, copies); });
}
void GuardedContext::export_kv(const KvStorage& kv, BlockId block, int64_t h0, int64_t h1, std::span<std::byte> out) {
  open([&] { inner_->export_kv(kv, block, h0, h1, out); });
}
void GuardedContext::import_kv(KvStorage& kv, BlockId block, int64_t h0, int64_t h1, std::span<const std::byte> in) {
  open([&] { inner_->import_kv(kv, block, h0, h1, in); });
}
void GuardedContext::read_kv_row(const KvStorage& kv, int64_t layer, int64_t row, std::span<float> k,
                                 std::span<float> v) {
  open([&] { inner_->read_kv_row(kv, layer, row, k, v); });
}
void GuardedContext::route_experts(std::span<const float> logits, const MoeRouting& r, std::span<int32_t> experts,
                                   std::span<float> weights) {
  open([&] { inner_->route_experts(logits, r, experts, weights); });
}
void GuardedContext::gather_rows(std::span<const float> x, std::span<const int32_t> rows, std::span<float> out,
                                 int64_t width) {
  open([&] { inner_->gather_rows(x, rows, out, width); });
}
void GuardedContext::matmul_experts(const TensorView& w, std::span<const int64_t> offsets, std::span<const float> x,
                                    std::span<float> y) {
  open([&] { inner_->matmul_experts(w, offsets, x, y); });
}
void GuardedContext::combine_rows(std::span<const float> y, std::span<const int32_t> rows,
                                  std::span<const float> scales, std::span<float> out, int64_t width) {
  open([&] { inner_->combine_rows(y, rows, scales, out, width); });
}
void GuardedContext::sigmoid_gate(std::span<float> x, std::span<const float> gate, int64_t n) {
  open([&] { inner_->sigmoid_gate(x, gate, n); });
}

}  // namespace peregrine
