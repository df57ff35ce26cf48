#pragma once
// Instruction-set paths of the kernels and the choice among them at run time. The binary is built
// for baseline x86-64; only the simd_<isa>*.cpp files are compiled for their ISA (per-file flags,
// src/kernels/CMakeLists.txt), so the same binary runs on a CPU without AVX2 or AVX-512 and picks
// the path by cpuid.
#include <string_view>
#include <vector>

namespace peregrine {

// In order of preference: a later path is used by default where the CPU has it.
enum class Isa { Scalar, Avx2, Avx512 };

std::string_view isa_name(Isa isa);  // "scalar", "avx2", "avx512"

// Every path of this build, scalar first (whether or not this CPU can run it).
inline constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512};

// Whether this CPU (and OS) can run the path: Avx2 needs AVX2, FMA and F16C; Avx512 needs those
// and AVX-512 F, BW, VL and VNNI, with the OS saving the zmm and mask registers (XCR0).
bool isa_supported(Isa isa);

// What the path needs, in words (for messages): e.g. "AVX2, FMA and F16C".
std::string_view isa_requirements(Isa isa);

// Whether the avx512 path may also use AVX512-BF16 (vdpbf16ps; cpuid leaf 7 subleaf 1 EAX bit 5):
// it then multiplies F16/BF16 weights with bf16-rounded activations under Activations::Q8
// (kernels/bf16_gemm.h). PEREGRINE_BF16=0 turns it off (the f32 path of every earlier build).
bool cpu_has_avx512_bf16();

// Every path this machine can run, scalar first.
std::vector<Isa> supported_isas();

// The path the kernels use by default: PEREGRINE_ISA (scalar|avx2|avx512) if set, else the best
// this CPU supports. Read once. Throws UsageError if PEREGRINE_ISA names an unknown path or one
// this CPU cannot run.
Isa active_isa();

}  // namespace peregrine
