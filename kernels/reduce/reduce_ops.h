// The reduction operators, shared by the CPU and CUDA implementations so the
// two compute exactly the same function. Internal to kernels/reduce.
#ifndef COLOSSAL_KERNELS_REDUCE_REDUCE_OPS_H_
#define COLOSSAL_KERNELS_REDUCE_REDUCE_OPS_H_

#include "kernels/common/host_device.h"

namespace colossal::kernels::reduce::internal {

template <typename M>
COLOSSAL_HOST_DEVICE bool is_nan(M v) {
  return v != v;  // false for integers
}

struct SumOp {
  template <typename M>
  COLOSSAL_HOST_DEVICE M operator()(M a, M b) const { return a + b; }
};
struct ProdOp {
  template <typename M>
  COLOSSAL_HOST_DEVICE M operator()(M a, M b) const { return a * b; }
};
struct MaxOp {
  template <typename M>
  COLOSSAL_HOST_DEVICE M operator()(M a, M b) const {
    if (is_nan(a)) return a;
    if (is_nan(b)) return b;
    return a < b ? b : a;
  }
};
struct MinOp {
  template <typename M>
  COLOSSAL_HOST_DEVICE M operator()(M a, M b) const {
    if (is_nan(a)) return a;
    if (is_nan(b)) return b;
    return b < a ? b : a;
  }
};

}  // namespace colossal::kernels::reduce::internal

#endif  // COLOSSAL_KERNELS_REDUCE_REDUCE_OPS_H_
