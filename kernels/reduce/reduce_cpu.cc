#include <cstdint>

#include "kernels/common/dispatch.h"
#include "kernels/reduce/reduce.h"
#include "kernels/reduce/reduce_ops.h"

namespace colossal::kernels::reduce {
namespace {

template <typename T, typename Op>
void reduce_loop(T* dst, const T* src, int64_t n, Op op) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = from_math<T>(op(to_math(dst[i]), to_math(src[i])));
  }
}

template <typename T>
KernelStatus reduce_typed(T* dst, const T* src, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: reduce_loop(dst, src, n, internal::SumOp{}); break;
    case ReduceOp::kProd: reduce_loop(dst, src, n, internal::ProdOp{}); break;
    case ReduceOp::kMax: reduce_loop(dst, src, n, internal::MaxOp{}); break;
    case ReduceOp::kMin: reduce_loop(dst, src, n, internal::MinOp{}); break;
    default: return KernelStatus::invalid_argument("unknown ReduceOp");
  }
  return KernelStatus();
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "unknown";
}

KernelStatus reduce_into_cpu(void* dst, const void* src, int64_t n, DType dtype, ReduceOp op) {
  if (n < 0) return KernelStatus::invalid_argument("reduce_into_cpu: n < 0");
  if (n == 0) return KernelStatus();
  if (dst == nullptr || src == nullptr) {
    return KernelStatus::invalid_argument("reduce_into_cpu: null buffer with n > 0");
  }
  return dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    return reduce_typed(static_cast<T*>(dst), static_cast<const T*>(src), n, op);
  });
}

}  // namespace colossal::kernels::reduce
