#include "kernels/isa.h"

#include <cstdint>
#include <cstdlib>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "util/error.h"

namespace peregrine {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// Feature bits read straight from cpuid and XCR0, so the AVX-512 check covers exactly the
// extensions the avx512 kernels are compiled for and the OS's promise to save their registers.
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false, avx512bf16 = false;
  bool os_ymm = false, os_zmm = false;  // XCR0: SSE+AVX state; plus opmask, ZMM_Hi256, Hi16_ZMM
};

CpuFeatures read_cpu_features() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  f.fma = (c >> 12) & 1;
  f.f16c = (c >> 29) & 1;
  if (osxsave) {
    uint32_t xcr0_lo, xcr0_hi;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    f.os_ymm = (xcr0_lo & 0x6) == 0x6;
    f.os_zmm = (xcr0_lo & 0xE6) == 0xE6;
  }
  if (__get_cpuid_max(0, nullptr) >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = (b >> 5) & 1;
    f.avx512f = (b >> 16) & 1;
    f.avx512bw = (b >> 30) & 1;
    f.avx512vl = (b >> 31) & 1;
    f.avx512vnni = (c >> 11) & 1;
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512bf16 = (a >> 5) & 1;
  }
  return f;
}
#endif

bool cpu_runs(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  static const CpuFeatures f = read_cpu_features();
  const bool avx2 = f.os_ymm && f.avx2 && f.fma && f.f16c;
  switch (isa) {
    case Isa::Scalar:
      return true;
    case Isa::Avx2:
      return avx2;
    case Isa::Avx512:
      return avx2 && f.os_zmm && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni;
  }
  return false;
#else
  return isa == Isa::Scalar;
#endif
}

Isa resolve_active_isa() {
  const char* env = std::getenv("PEREGRINE_ISA");
  if (!env || !*env) return supported_isas().back();
  const std::string want = env;
  for (Isa isa : kAllIsas) {
    if (want != isa_name(isa)) continue;
    if (!isa_supported(isa)) {
      throw UsageError("PEREGRINE_ISA=" + want + ": this CPU does not support it (the path needs " +
                       std::string(isa_requirements(isa)) + ")");
    }
    return isa;
  }
  std::string paths;
  for (Isa isa : supported_isas()) paths += (paths.empty() ? "" : ", ") + std::string(isa_name(isa));
  throw UsageError("PEREGRINE_ISA=" + want + " is not a kernel path of this build and CPU (choose " + paths + ")");
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return "scalar";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
  }
  return "?";
}

bool isa_supported(Isa isa) { return cpu_runs(isa); }

std::string_view isa_requirements(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return "nothing beyond x86-64";
    case Isa::Avx2:
      return "AVX2, FMA and F16C";
    case Isa::Avx512:
      return "AVX2, FMA, F16C and AVX-512 F, BW, VL and VNNI, with the OS saving zmm state";
  }
  return "?";
}

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = [] {
    const char* env = std::getenv("PEREGRINE_BF16");
    if (env && std::string(env) == "0") return false;
    return cpu_runs(Isa::Avx512) && read_cpu_features().avx512bf16;
  }();
  return has;
#else
  return false;
#endif
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : kAllIsas) {
    if (isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

Isa active_isa() {
  static const Isa isa = resolve_active_isa();
  return isa;
}

}  // namespace peregrine
