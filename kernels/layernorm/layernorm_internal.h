// Argument checks and the backward's scratch layout, shared by the CPU and
// CUDA implementations so both accept exactly the same calls. Internal to
// kernels/layernorm.
#ifndef COLOSSAL_KERNELS_LAYERNORM_LAYERNORM_INTERNAL_H_
#define COLOSSAL_KERNELS_LAYERNORM_LAYERNORM_INTERNAL_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"
#include "kernels/layernorm/layernorm.h"

namespace colossal::kernels::layernorm::internal {

// The CUDA backward splits the rows into at most this many contiguous ranges,
// one per block; each block writes one float32 partial row of dgamma (and one
// of dbeta) into scratch. 256 blocks fill H100/H200's 132 SMs about twice while
// the partials stay small next to the data (rows = 8192: ~8% extra traffic).
// A function of rows only, so the scratch size and the summation order (hence
// the bits of dgamma) do not depend on the device.
constexpr int64_t kMaxBackwardPartials = 256;

inline int64_t backward_partials(int64_t rows) {
  return rows < kMaxBackwardPartials ? rows : kMaxBackwardPartials;
}

// stats = 2 for LayerNorm (dgamma, dbeta), 1 for RMSNorm (dgamma).
inline size_t backward_scratch_bytes(int64_t rows, int64_t C, int stats) {
  if (rows <= 0 || C <= 0) return 0;
  return static_cast<size_t>(backward_partials(rows)) * static_cast<size_t>(C) * sizeof(float) *
         static_cast<size_t>(stats);
}

// Checks shared by every entry point. Returns ok with *nothing_to_do set when
// rows == 0. `cuda` restricts the dtypes to those the CUDA path implements.
inline KernelStatus check_common(int64_t rows, int64_t C, DType dtype, bool cuda,
                                 bool* nothing_to_do) {
  *nothing_to_do = false;
  const bool supported = dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 ||
                         (!cuda && dtype == DType::kF64);
  if (!supported) {
    return KernelStatus::unsupported(
        cuda ? "layernorm: CUDA dtype must be float32, float16 or bfloat16"
             : "layernorm: dtype must be float32, float16, bfloat16 "
               "or float64");
  }
  if (rows < 0 || C < 0) return KernelStatus::invalid_argument("layernorm: negative rows or C");
  if (rows == 0) {
    *nothing_to_do = true;
    return KernelStatus();
  }
  if (C == 0) return KernelStatus::invalid_argument("layernorm: C must be >= 1 when rows > 0");
  return KernelStatus();
}

inline KernelStatus check_eps(const ForwardOptions& options) {
  if (!std::isfinite(options.eps) || options.eps < 0.0f) {
    return KernelStatus::invalid_argument("layernorm: eps must be finite and >= 0");
  }
  return KernelStatus();
}

// What the backward adds into dx (null: dx is overwritten): residual_grad,
// or dx itself for accumulate_dx. Both given must name dx.
inline KernelStatus dx_addend(const void* dx, const BackwardOptions& options, const void** addend) {
  if (options.accumulate_dx && options.residual_grad != nullptr && options.residual_grad != dx) {
    return KernelStatus::invalid_argument(
        "layernorm backward: accumulate_dx adds into dx; residual_grad must then be dx or null");
  }
  *addend = options.residual_grad != nullptr ? options.residual_grad
                                             : (options.accumulate_dx ? dx : nullptr);
  return KernelStatus();
}

// True when every pointer in the list is non-null.
inline bool all_set(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) {
    if (p == nullptr) return false;
  }
  return true;
}

}  // namespace colossal::kernels::layernorm::internal

#endif  // COLOSSAL_KERNELS_LAYERNORM_LAYERNORM_INTERNAL_H_
