// Private to kernels/softmax: argument checks and row geometry shared by the CPU
// and CUDA paths, so both accept exactly the same calls and agree on which
// columns a row excludes.
#ifndef COLOSSAL_KERNELS_SOFTMAX_SOFTMAX_INTERNAL_H_
#define COLOSSAL_KERNELS_SOFTMAX_SOFTMAX_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "kernels/common/dtype.h"
#include "kernels/common/host_device.h"
#include "kernels/common/status.h"

namespace colossal::kernels::softmax::internal {

// Number of leading columns of row `row` ([..., sq, sk] flattened to rows) that a
// causal softmax includes: column j is excluded when j > i + (sk - sq), i = row % sq.
COLOSSAL_HOST_DEVICE int64_t causal_limit(int64_t row, int64_t sq, int64_t sk) {
  const int64_t limit = row % sq + 1 + (sk - sq);
  return limit < 0 ? 0 : (limit > sk ? sk : limit);
}

// Row of the [batch, 1, sq, sk] mask that row `row` of [batch, heads, sq, sk] uses.
COLOSSAL_HOST_DEVICE int64_t mask_row(int64_t row, int64_t heads, int64_t sq) {
  return (row / (heads * sq)) * sq + row % sq;
}

// Multiplies non-negative sizes into *rows (the product of `leading`) and checks
// that rows * sk elements fit in int64_t.
inline KernelStatus count_rows(std::initializer_list<int64_t> leading, int64_t sk, int64_t* rows) {
  if (sk < 0) return KernelStatus::invalid_argument("softmax: negative size");
  int64_t product = 1;
  for (int64_t d : leading) {
    if (d < 0) return KernelStatus::invalid_argument("softmax: negative size");
    if (__builtin_mul_overflow(product, d, &product)) {
      return KernelStatus::invalid_argument("softmax: tensor too large");
    }
  }
  int64_t elements = 0;
  if (__builtin_mul_overflow(product, sk, &elements) ||
      __builtin_mul_overflow(elements, int64_t{8}, &elements)) {
    return KernelStatus::invalid_argument("softmax: tensor too large");
  }
  *rows = product;
  return KernelStatus();
}

// True when [a, a + a_bytes) and [b, b + b_bytes) share a byte.
inline bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const uintptr_t pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

// Output `out` may be exactly `in` or disjoint from it, nothing in between.
inline bool bad_alias(const void* out, const void* in, size_t bytes) {
  return out != in && overlap(out, bytes, in, bytes);
}

// Checks shared by both forwards once sizes and dtype are known to be valid.
// mask_bytes is 0 when there is no mask.
inline KernelStatus check_forward_buffers(void* y, const void* x, const uint8_t* mask, size_t bytes,
                                          size_t mask_bytes) {
  if (y == nullptr || x == nullptr) {
    return KernelStatus::invalid_argument("softmax forward: null x or y with a nonempty tensor");
  }
  if (bad_alias(y, x, bytes)) {
    return KernelStatus::invalid_argument("softmax forward: y partially overlaps x");
  }
  if (mask != nullptr && overlap(y, bytes, mask, mask_bytes)) {
    return KernelStatus::invalid_argument("softmax forward: y overlaps the mask");
  }
  return KernelStatus();
}

inline KernelStatus check_backward_buffers(void* dx, const void* dy, const void* y, size_t bytes) {
  if (dx == nullptr || dy == nullptr || y == nullptr) {
    return KernelStatus::invalid_argument(
        "softmax backward: null dx, dy or y with a nonempty tensor");
  }
  if (bad_alias(dx, dy, bytes) || bad_alias(dx, y, bytes)) {
    return KernelStatus::invalid_argument("softmax backward: dx partially overlaps dy or y");
  }
  return KernelStatus();
}

}  // namespace colossal::kernels::softmax::internal


#endif  // COLOSSAL_KERNELS_SOFTMAX_SOFTMAX_INTERNAL_H_
