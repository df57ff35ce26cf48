#pragma once
// Instruction-set paths of the kernels and the choice among them at run time. The binary is built
// for baseline x86-64; the AVX2 code is compiled per function (target attributes), so the same
// binary runs on a CPU without AVX2 and picks the path by cpuid.
#include <string_view>
#include <vector>

namespace peregrine {

enum class Isa { Scalar, Avx2 };

std::string_view isa_name(Isa isa);  // "scalar", "avx2"

// Whether this CPU (and OS) can run the path: Avx2 needs AVX2, FMA and F16C.
bool isa_supported(Isa isa);

// Every path this machine can run, scalar first.
std::vector<Isa> supported_isas();

// The path the kernels use by default: PEREGRINE_ISA (scalar|avx2) if set, else the best this
// CPU supports. Read once. Throws UsageError if PEREGRINE_ISA names an unknown path or one this
// CPU cannot run.
Isa active_isa();

}  // namespace peregrine
