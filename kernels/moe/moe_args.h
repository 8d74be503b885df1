// Argument checks shared by the CPU and CUDA implementations of kernels/moe,
// so both backends accept and reject the same calls. Internal to kernels/moe.
#ifndef COLOSSAL_KERNELS_MOE_MOE_ARGS_H_
#define COLOSSAL_KERNELS_MOE_MOE_ARGS_H_

#include <cstdint>
#include <initializer_list>

#include "kernels/common/status.h"
#include "kernels/moe/moe.h"

namespace colossal::kernels::moe::internal {

// Sizes first, then (only when there is work) the buffers.
inline KernelStatus check_route(int64_t tokens, int64_t num_experts, int64_t top_k,
                                std::initializer_list<const void*> buffers) {
  if (tokens < 0) return KernelStatus::invalid_argument("moe route: tokens < 0");
  if (num_experts < 1 || num_experts > kMaxExperts) {
    return KernelStatus::invalid_argument("moe route: num_experts must be in [1, 1024]");
  }
  if (top_k < 1 || top_k > kMaxTopK || top_k > num_experts) {
    return KernelStatus::invalid_argument("moe route: top_k must be in [1, min(num_experts, 8)]");
  }
  for (const void* p : buffers) {
    if (tokens > 0 && p == nullptr) return KernelStatus::invalid_argument("moe route: null buffer");
  }
  return KernelStatus();
}

// The listed buffers may be null only when there is no work (optional ones
// are not listed).
inline KernelStatus check_rows(int64_t tokens, int64_t top_k, int64_t cols,
                               std::initializer_list<const void*> buffers) {
  if (tokens < 0 || cols < 0) return KernelStatus::invalid_argument("moe rows: tokens < 0 or cols < 0");
  if (top_k < 1 || top_k > kMaxTopK) return KernelStatus::invalid_argument("moe rows: top_k must be in [1, 8]");
  for (const void* p : buffers) {
    if (tokens > 0 && cols > 0 && p == nullptr) return KernelStatus::invalid_argument("moe rows: null buffer");
  }
  return KernelStatus();
}

}  // namespace colossal::kernels::moe::internal

#endif  // COLOSSAL_KERNELS_MOE_MOE_ARGS_H_
