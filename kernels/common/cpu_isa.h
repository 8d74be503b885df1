// The CPU instruction sets the CPU kernels' SIMD paths are compiled for and
// chosen among at run time. The paths are compiled with per-function target
// attributes (kernels/common/simd_convert.h), so no file needs a -march flag
// and one binary runs on any x86-64 CPU.
#ifndef COLOSSAL_KERNELS_COMMON_CPU_ISA_H_
#define COLOSSAL_KERNELS_COMMON_CPU_ISA_H_

#include "kernels/common/status.h"

namespace colossal::kernels {

// kAuto picks the widest this CPU runs (AVX-512F, else AVX2+FMA+F16C, else
// scalar). A kernel taking a CpuIsa gives the same bits on every one.
enum class CpuIsa : int { kAuto, kScalar, kAvx2, kAvx512 };

const char* cpu_isa_name(CpuIsa isa);
// Whether this CPU (and build) can run `isa`; kAuto and kScalar always can.
bool cpu_isa_available(CpuIsa isa);
// `requested` made concrete: kAuto becomes the widest available ISA. Errors:
// `unknown` (kInvalidArgument) for a value outside the enum, `lacking`
// (kUnsupported) for an ISA this CPU cannot run; both are the caller's static
// messages, so they can name the kernel.
KernelStatus resolve_cpu_isa(CpuIsa requested, CpuIsa* isa, const char* unknown,
                             const char* lacking);

}  // namespace colossal::kernels

#endif  // COLOSSAL_KERNELS_COMMON_CPU_ISA_H_
