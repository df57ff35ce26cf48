#include "kernels/isa.h"

#include <cstdlib>
#include <string>

#include "util/error.h"

namespace peregrine {
namespace {

Isa resolve_active_isa() {
  const char* env = std::getenv("PEREGRINE_ISA");
  if (!env || !*env) return isa_supported(Isa::Avx2) ? Isa::Avx2 : Isa::Scalar;
  const std::string want = env;
  for (Isa isa : {Isa::Scalar, Isa::Avx2}) {
    if (want != isa_name(isa)) continue;
    if (!isa_supported(isa)) throw UsageError("PEREGRINE_ISA=" + want + ": this CPU does not support it");
    return isa;
  }
  std::string paths;
  for (Isa isa : supported_isas()) paths += (paths.empty() ? "" : ", ") + std::string(isa_name(isa));
  throw UsageError("PEREGRINE_ISA=" + want + " is not a kernel path of this build and CPU (choose " + paths + ")");
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
  }
  return "?";
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2:
#if defined(__x86_64__) || defined(__i386__)
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
      return false;
#endif
  }
  return false;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Scalar, Isa::Avx2}) {
    if (isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

Isa active_isa() {
  static const Isa isa = resolve_active_isa();
  return isa;
}

}  // namespace peregrine
