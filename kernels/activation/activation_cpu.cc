// CPU reference and backend for kernels/activation (GELU, bias + GELU, SwiGLU). Every element type computes
// in double and rounds once on store; the dbias sum over rows is a double
// accumulator per column (rows in ascending order), so results are exact to a
// few double ulps before the final rounding.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "kernels/activation/activation.h"
#include "kernels/activation/activation_layout.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/round_once.h"

namespace colossal::kernels::activation {

// Below this many elements a loop runs on the calling thread: waking the
// OpenMP team costs more than the work (and tiny multi-process runs would
// oversubscribe the cores).
constexpr int64_t kParallelMin = int64_t{1} << 16;
namespace {

using internal::kCubic;
using internal::kSqrt2OverPi;

template <typename T>
double load(const T* p, int64_t i) {
  return static_cast<double>(to_math(p[i]));
}

// Stores a double result with exactly one rounding to T.
template <typename T>
void store(T* p, int64_t i, double v) {
  p[i] = round_once<T>(v);
}

// gelu(x) = x * sigmoid(2u) with u = sqrt(2/pi) (x + 0.044715 x^3); identical to
// 0.5 x (1 + tanh(u)) but without cancellation for large negative x.
double gelu(double x) {
  const double u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return x / (1.0 + std::exp(-2.0 * u));
}

// d/dx gelu = s + 2 x s (1 - s) u'(x), s = sigmoid(2u), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
double gelu_grad(double x) {
  const double u = kSqrt2OverPi * (x + kCubic * x * x * x);
  const double e = std::exp(-2.0 * u);
  const double s = 1.0 / (1.0 + e);
  const double one_minus_s = 1.0 / (1.0 + 1.0 / e);  // = e / (1 + e), finite when e overflows
  const double du = kSqrt2OverPi * (1.0 + 3.0 * kCubic * x * x);
  return s + 2.0 * x * s * one_minus_s * du;
}

// sigmoid(x) and sigmoid(-x) = 1 - sigmoid(x) without its cancellation, from
// e = exp(-|x|) <= 1: sigmoid(|x|) = 1 / (1 + e), sigmoid(-|x|) = e / (1 + e).
// Nothing overflows for any x. silu'(x) = s + x s (1 - s) = s (1 + x sigmoid(-x)).
void sigmoid_pair(double x, double* s, double* s_neg) {
  const double e = std::exp(-std::fabs(x));
  const double r = 1.0 / (1.0 + e);
  *s = x >= 0 ? r : e * r;
  *s_neg = x >= 0 ? e * r : r;
}

// silu(x) = x * sigmoid(x).
double silu(double x) {
  double s, s_neg;
  sigmoid_pair(x, &s, &s_neg);
  return x * s;
}

// float32, float16, bfloat16 and float64: the CPU backend's element types.
template <typename F>
KernelStatus dispatch_cpu_types(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(float{});
    case DType::kF16: return f(Half{});
    case DType::kBF16: return f(BFloat16{});
    case DType::kF64: return f(double{});
    default:
      return KernelStatus::unsupported("activation: dtype must be float32, float16, bfloat16 or float64");
  }
}

// Checks n and the buffers (null allowed only when n == 0), then runs
// body(T{}, i) for 0 <= i < n with T the element type of `dtype`, in parallel
// above kParallelMin elements.
template <typename Body>
KernelStatus elementwise_cpu(int64_t n, std::initializer_list<const void*> buffers, DType dtype,
                             const char* negative, const char* null_buffer, Body&& body) {
  if (n < 0) return KernelStatus::invalid_argument(negative);
  for (const void* p : buffers) {
    if (n > 0 && p == nullptr) return KernelStatus::invalid_argument(null_buffer);
  }
  return dispatch_cpu_types(dtype, [&](auto tag) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) body(tag, i);
    return KernelStatus();
  });
}

KernelStatus check_rows_cols(int64_t rows, int64_t cols, const char* negative) {
  if (rows < 0 || cols < 0) return KernelStatus::invalid_argument(negative);
  return KernelStatus();
}

}  // namespace

size_t bias_gelu_backward_scratch_bytes(int64_t rows, int64_t cols) {
  return internal::bias_grad_scratch_bytes(rows, cols);
}

KernelStatus gelu_forward_cpu(void* out, const void* x, int64_t n, DType dtype) {
  return elementwise_cpu(n, {out, x}, dtype, "gelu_forward_cpu: n < 0",
                         "gelu_forward_cpu: null buffer with n > 0", [&](auto tag, int64_t i) {
                           using T = decltype(tag);
                           store(static_cast<T*>(out), i, gelu(load(static_cast<const T*>(x), i)));
                         });
}

KernelStatus gelu_backward_cpu(void* dx, const void* dout, const void* x, int64_t n, DType dtype) {
  // Reads dout[i] before writing dx[i]: they may be the same buffer.
  return elementwise_cpu(n, {dx, dout, x}, dtype, "gelu_backward_cpu: n < 0",
                         "gelu_backward_cpu: null buffer with n > 0", [&](auto tag, int64_t i) {
                           using T = decltype(tag);
                           const double dy = load(static_cast<const T*>(dout), i);
                           store(static_cast<T*>(dx), i, dy * gelu_grad(load(static_cast<const T*>(x), i)));
                         });
}

KernelStatus swiglu_forward_cpu(void* out, const void* gate, const void* up, int64_t n, DType dtype) {
  return elementwise_cpu(n, {out, gate, up}, dtype, "swiglu_forward_cpu: n < 0",
                         "swiglu_forward_cpu: null buffer with n > 0", [&](auto tag, int64_t i) {
                           using T = decltype(tag);
                           const double g = load(static_cast<const T*>(gate), i);
                           const double u = load(static_cast<const T*>(up), i);
                           store(static_cast<T*>(out), i, silu(g) * u);
                         });
}

KernelStatus swiglu_backward_cpu(void* dgate, void* dup, const void* dout, const void* gate,
                                 const void* up, int64_t n, DType dtype) {
  // All three inputs of element i are read before either output is written.
  return elementwise_cpu(n, {dgate, dup, dout, gate, up}, dtype, "swiglu_backward_cpu: n < 0",
                         "swiglu_backward_cpu: null buffer with n > 0", [&](auto tag, int64_t i) {
                           using T = decltype(tag);
                           const double dy = load(static_cast<const T*>(dout), i);
                           const double g = load(static_cast<const T*>(gate), i);
                           const double u = load(static_cast<const T*>(up), i);
                           double s, s_neg;
                           sigmoid_pair(g, &s, &s_neg);
                           store(static_cast<T*>(dgate), i, dy * u * (s * (1.0 + g * s_neg)));  // silu'(g)
                           store(static_cast<T*>(dup), i, dy * (g * s));                        // silu(g)
                         });
}

KernelStatus bias_gelu_forward_cpu(void* out, const void* x, const void* bias, int64_t rows,
                                   int64_t cols, DType dtype) {
  KernelStatus s = check_rows_cols(rows, cols, "bias_gelu_forward_cpu: rows < 0 or cols < 0");
  if (!s.ok()) return s;
  if (rows == 0 || cols == 0) return KernelStatus();
  if (out == nullptr || x == nullptr || bias == nullptr) {
    return KernelStatus::invalid_argument("bias_gelu_forward_cpu: null buffer with rows * cols > 0");
  }
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out);
    const T* in = static_cast<const T*>(x);
    const T* b = static_cast<const T*>(bias);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        // The bias add is part of the double computation: one rounding in total.
        store(o, i, gelu(load(in, i) + load(b, c)));
      }
    }
    return KernelStatus();
  });
}

KernelStatus bias_gelu_backward_cpu(void* dx, void* dbias, const void* dout, const void* x,
                                    const void* bias, int64_t rows, int64_t cols, DType dtype) {
  KernelStatus s = check_rows_cols(rows, cols, "bias_gelu_backward_cpu: rows < 0 or cols < 0");
  if (!s.ok()) return s;
  if (rows == 0 || cols == 0) return KernelStatus();  // dbias += 0
  if (dx == nullptr || dbias == nullptr || dout == nullptr || x == nullptr || bias == nullptr) {
    return KernelStatus::invalid_argument("bias_gelu_backward_cpu: null buffer with rows * cols > 0");
  }
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* g = static_cast<T*>(dx);
    T* gb = static_cast<T*>(dbias);
    const T* dy = static_cast<const T*>(dout);
    const T* in = static_cast<const T*>(x);
    const T* b = static_cast<const T*>(bias);
    // Threads take blocks of columns and walk every row of them, so each
    // column's bias gradient is summed in row order whatever the thread count.
    constexpr int64_t kBlock = 64;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
      const int64_t c1 = std::min(cols, c0 + kBlock);
      double sum[kBlock] = {};
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          const int64_t i = r * cols + c;
          const double dpre = load(dy, i) * gelu_grad(load(in, i) + load(b, c));
          sum[c - c0] += dpre;
          store(g, i, dpre);
        }
      }
      for (int64_t c = c0; c < c1; ++c) store(gb, c, load(gb, c) + sum[c - c0]);
    }
    return KernelStatus();
  });
}

}  // namespace colossal::kernels::activation
