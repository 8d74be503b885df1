#include "kernels/common/cpu_isa.h"

namespace colossal::kernels {

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAuto: return "auto";
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "unknown";
}

bool cpu_isa_available(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAuto:
    case CpuIsa::kScalar: return true;
#if defined(__x86_64__)
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case CpuIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && cpu_isa_available(CpuIsa::kAvx2);
#else
    case CpuIsa::kAvx2:
    case CpuIsa::kAvx512: return false;
#endif
  }
  return false;
}

KernelStatus resolve_cpu_isa(CpuIsa requested, CpuIsa* isa, const char* unknown,
                             const char* lacking) {
  if (requested == CpuIsa::kAuto) {
    *isa = cpu_isa_available(CpuIsa::kAvx512) ? CpuIsa::kAvx512
           : cpu_isa_available(CpuIsa::kAvx2) ? CpuIsa::kAvx2
                                               : CpuIsa::kScalar;
    return KernelStatus();
  }
  if (requested != CpuIsa::kScalar && requested != CpuIsa::kAvx2 && requested != CpuIsa::kAvx512) {
    return KernelStatus::invalid_argument(unknown);
  }
  if (!cpu_isa_available(requested)) return KernelStatus::unsupported(lacking);
  *isa = requested;
  return KernelStatus();
}

}  // namespace colossal::kernels
