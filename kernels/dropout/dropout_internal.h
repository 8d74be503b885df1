// kernels/dropout: argument checks shared by the CPU and CUDA paths.
#ifndef COLOSSAL_KERNELS_DROPOUT_DROPOUT_INTERNAL_H_
#define COLOSSAL_KERNELS_DROPOUT_DROPOUT_INTERNAL_H_

#include <cstdint>

#include "kernels/common/status.h"

namespace colossal::kernels::dropout::internal {

// `what` names the call for a missing buffer; p must be in [0, 1).
inline KernelStatus check(const char* what, const void* out, const void* in, double p,
                          int64_t n) {
  if (n < 0 || (n > 0 && (out == nullptr || in == nullptr))) {
    return KernelStatus::invalid_argument(what);
  }
  if (!(p >= 0.0 && p < 1.0)) {
    return KernelStatus::invalid_argument("dropout: p must be in [0, 1)");
  }
  return KernelStatus();
}

}  // namespace colossal::kernels::dropout::internal

#endif  // COLOSSAL_KERNELS_DROPOUT_DROPOUT_INTERNAL_H_
