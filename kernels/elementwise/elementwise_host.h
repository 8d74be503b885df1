// Host-side helpers shared by elementwise_cpu.cc and the host code of
// elementwise.cu (both compile them for the host). Internal to kernels/elementwise.
#ifndef COLOSSAL_KERNELS_ELEMENTWISE_ELEMENTWISE_HOST_H_
#define COLOSSAL_KERNELS_ELEMENTWISE_ELEMENTWISE_HOST_H_

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/common/dispatch.h"
#include "kernels/common/half.h"
#include "kernels/common/status.h"
#include "kernels/elementwise/elementwise_ops.h"

namespace colossal::kernels::elementwise::internal {

// Checks shared by every entry point: n >= 0 and non-null buffers when n > 0.
inline KernelStatus check_buffers(const char* what, int64_t n, std::initializer_list<const void*> ptrs) {
  if (n < 0) return KernelStatus::invalid_argument(what);
  if (n == 0) return KernelStatus();
  for (const void* p : ptrs) {
    if (p == nullptr) return KernelStatus::invalid_argument(what);
  }
  return KernelStatus();
}

template <typename T>
constexpr bool kIsHalfHost = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Host element -> its math value, and back (see elementwise_ops.h).
template <typename T>
inline typename CpuMathType<T>::type load_host(T v) {
  return to_math(v);
}

// Converts a math value of the source type to an element of type Dst, with
// the cast rules of elementwise.h.
template <typename Dst, typename SrcM>
inline Dst convert_host(SrcM v) {
  using DstM = typename CpuMathType<Dst>::type;
  return from_math<Dst>(convert<DstM, kIsHalfHost<Dst>, SrcM>(v));
}

// fill's value as an element of type T (the CUDA path stores these same bits).
template <typename T>
inline T fill_value(double value) {
  return convert_host<T, double>(value);
}

}  // namespace colossal::kernels::elementwise::internal

#endif  // COLOSSAL_KERNELS_ELEMENTWISE_ELEMENTWISE_HOST_H_
