// CPU elementwise ops: plain loops over the element functions of
// elementwise_ops.h (the same ones the CUDA kernels run), one element at a time.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/dispatch.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/elementwise/elementwise_host.h"
#include "kernels/elementwise/elementwise_ops.h"

namespace colossal::kernels::elementwise {
namespace {

using internal::check_buffers;
using internal::convert_host;
using internal::load_host;

template <typename T, typename Op>
void binary_loop(T* out, const T* a, const T* b, int64_t n, Op op) {
  for (int64_t i = 0; i < n; ++i) out[i] = from_math<T>(op(load_host(a[i]), load_host(b[i])));
}

template <typename T>
KernelStatus binary_typed(T* out, const T* a, const T* b, int64_t n, BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: binary_loop(out, a, b, n, internal::AddOp{}); return KernelStatus();
    case BinaryOp::kSub: binary_loop(out, a, b, n, internal::SubOp{}); return KernelStatus();
    case BinaryOp::kMul: binary_loop(out, a, b, n, internal::MulOp{}); return KernelStatus();
  }
  return KernelStatus::invalid_argument("elementwise: unknown BinaryOp");
}

// scale/axpby: the floating dtypes (float64 included); integers are unsupported.
template <typename F>
KernelStatus dispatch_floating(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(float{});
    case DType::kF16: return f(Half{});
    case DType::kBF16: return f(BFloat16{});
    case DType::kF64: return f(double{});
    default:
      return KernelStatus::unsupported(
          "elementwise: scale/axpby need float32, float16, bfloat16 or float64");
  }
}

}  // namespace

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "add";
    case BinaryOp::kSub: return "sub";
    case BinaryOp::kMul: return "mul";
  }
  return "unknown";
}

KernelStatus binary_cpu(void* out, const void* a, const void* b, int64_t n, DType dtype,
                        BinaryOp op) {
  KernelStatus s = check_buffers("binary_cpu: n < 0 or null buffer with n > 0", n, {out, a, b});
  if (!s.ok() || n == 0) return s;
  return dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    return binary_typed(static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b),
                        n, op);
  });
}

KernelStatus scale_cpu(void* out, const void* a, double alpha, int64_t n, DType dtype) {
  KernelStatus s = check_buffers("scale_cpu: n < 0 or null buffer with n > 0", n, {out, a});
  if (!s.ok()) return s;
  return dispatch_floating(dtype, [&](auto tag) {
    using T = decltype(tag);
    using M = typename CpuMathType<T>::type;
    const internal::ScaleOp<M> op{static_cast<M>(alpha)};
    T* o = static_cast<T*>(out);
    const T* x = static_cast<const T*>(a);
    for (int64_t i = 0; i < n; ++i) o[i] = from_math<T>(op(load_host(x[i])));
    return KernelStatus();
  });
}

KernelStatus axpby_cpu(void* out, const void* a, const void* b, double alpha, double beta,
                       int64_t n, DType dtype) {
  KernelStatus s = check_buffers("axpby_cpu: n < 0 or null buffer with n > 0", n, {out, a, b});
  if (!s.ok()) return s;
  return dispatch_floating(dtype, [&](auto tag) {
    using T = decltype(tag);
    using M = typename CpuMathType<T>::type;
    const internal::AxpbyOp<M> op{static_cast<M>(alpha), static_cast<M>(beta)};
    binary_loop(static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n, op);
    return KernelStatus();
  });
}

KernelStatus cast_cpu(void* out, const void* in, int64_t n, DType out_dtype, DType in_dtype) {
  KernelStatus s = check_buffers("cast_cpu: n < 0 or null buffer with n > 0", n, {out, in});
  if (!s.ok()) return s;
  // Validate both dtypes before touching memory.
  s = dispatch_all_types(out_dtype, [](auto) { return KernelStatus(); });
  if (!s.ok()) return s;
  s = dispatch_all_types(in_dtype, [](auto) { return KernelStatus(); });
  if (!s.ok() || n == 0) return s;
  if (out_dtype == in_dtype) {
    if (out != in) std::memmove(out, in, static_cast<size_t>(n) * dtype_size(in_dtype));
    return KernelStatus();
  }
  if (out == in && dtype_size(out_dtype) != dtype_size(in_dtype)) {
    return KernelStatus::invalid_argument("cast_cpu: in place needs dtypes of the same size");
  }
  return dispatch_all_types(out_dtype, [&](auto out_tag) {
    using Dst = decltype(out_tag);
    return dispatch_all_types(in_dtype, [&](auto in_tag) {
      using Src = decltype(in_tag);
      Dst* o = static_cast<Dst*>(out);
      const Src* x = static_cast<const Src*>(in);
      for (int64_t i = 0; i < n; ++i) o[i] = convert_host<Dst>(load_host(x[i]));
      return KernelStatus();
    });
  });
}

KernelStatus fill_cpu(void* out, double value, int64_t n, DType dtype) {
  KernelStatus s = check_buffers("fill_cpu: n < 0 or null buffer with n > 0", n, {out});
  if (!s.ok()) return s;
  return dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T v = internal::fill_value<T>(value);
    T* o = static_cast<T*>(out);
    for (int64_t i = 0; i < n; ++i) o[i] = v;
    return KernelStatus();
  });
}

}  // namespace colossal::kernels::elementwise
