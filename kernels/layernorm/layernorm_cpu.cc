// CPU reference and CPU backend of kernels/layernorm.
//
// Every dtype computes in double: row statistics, the normalised values and
// the per-column dgamma/dbeta sums (kept in a double vector across rows, added
// to the dtype's gradient once). Results are rounded to the math type (float
// for float16/bfloat16, as on the GPU) and then to the dtype. The residual add
// of the fused forward is the exception: it is done in the math type and
// rounded to the dtype exactly as the CUDA kernel does, so residual_out is
// bit-identical on both devices. Rows are independent and processed in order.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/layernorm/layernorm.h"
#include "kernels/layernorm/layernorm_internal.h"

namespace colossal::kernels::layernorm {
namespace {

template <typename T>
double load(const T* p, int64_t i) {
  return static_cast<double>(to_math(p[i]));
}

template <typename T>
T store(double v) {
  using M = typename CpuMathType<T>::type;
  return from_math<T>(static_cast<M>(v));
}

// The CPU dtypes: the three CUDA ones plus float64.
template <typename F>
KernelStatus dispatch_cpu_types(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(float{});
    case DType::kF16: return f(Half{});
    case DType::kBF16: return f(BFloat16{});
    case DType::kF64: return f(double{});
    default:
      return KernelStatus::unsupported(
          "layernorm: dtype must be float32, float16, bfloat16 or float64");
  }
}

template <typename T, bool kRms, bool kResidual>
void forward_rows(T* out, float* mean_out, float* rstd_out, T* residual_out, const T* x,
                  const T* residual, const T* gamma, const T* beta, int64_t rows, int64_t C,
                  double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * C;
    if constexpr (kResidual) {
      T* sum = residual_out + r * C;
      const T* add = residual + r * C;
      for (int64_t c = 0; c < C; ++c) sum[c] = from_math<T>(to_math(row[c]) + to_math(add[c]));
      row = sum;
    }
    double mean = 0.0;
    if constexpr (!kRms) {
      double s = 0.0;
      for (int64_t c = 0; c < C; ++c) s += load(row, c);
      mean = s / static_cast<double>(C);
    }
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double d = load(row, c) - mean;
      ss += d * d;
    }
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    if (!kRms && mean_out != nullptr) mean_out[r] = static_cast<float>(mean);
    if (rstd_out != nullptr) rstd_out[r] = static_cast<float>(rstd);
    T* y = out + r * C;
    for (int64_t c = 0; c < C; ++c) {
      double v = (load(row, c) - mean) * rstd * load(gamma, c);
      if constexpr (!kRms) v += load(beta, c);
      y[c] = store<T>(v);
    }
  }
}

template <typename T, bool kRms>
void backward_rows(T* dx, T* dgamma, T* dbeta, const T* dout, const T* x, const float* mean,
                   const float* rstd, const T* gamma, int64_t rows, int64_t C, const T* addend) {
  std::vector<double> dg(C, 0.0);
  std::vector<double> db(kRms ? 0 : C, 0.0);
  const double inv_c = 1.0 / static_cast<double>(C);
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * C;
    const T* dyr = dout + r * C;
    T* dxr = dx + r * C;
    const T* addr = addend != nullptr ? addend + r * C : nullptr;  // may be dxr
    const double m = kRms ? 0.0 : static_cast<double>(mean[r]);
    const double rs = static_cast<double>(rstd[r]);
    double s1 = 0.0, s2 = 0.0;  // sum(g), sum(g * xhat) with g = dout * gamma
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (load(xr, c) - m) * rs;
      const double dy = load(dyr, c);
      const double g = dy * load(gamma, c);
      s1 += g;
      s2 += g * xhat;
      dg[c] += dy * xhat;
      if constexpr (!kRms) db[c] += dy;
    }
    const double m1 = kRms ? 0.0 : s1 * inv_c;
    const double m2 = s2 * inv_c;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (load(xr, c) - m) * rs;
      const double g = load(dyr, c) * load(gamma, c);
      double v = (g - m1 - xhat * m2) * rs;
      if (addr != nullptr) v += load(addr, c);
      dxr[c] = store<T>(v);
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    dgamma[c] = store<T>(load(dgamma, c) + dg[c]);
    if constexpr (!kRms) dbeta[c] = store<T>(load(dbeta, c) + db[c]);
  }
}

}  // namespace

size_t layernorm_backward_scratch_bytes(int64_t rows, int64_t C) {
  return internal::backward_scratch_bytes(rows, C, 2);
}

size_t rmsnorm_backward_scratch_bytes(int64_t rows, int64_t C) {
  return internal::backward_scratch_bytes(rows, C, 1);
}

KernelStatus layernorm_forward_cpu(void* out, float* mean, float* rstd, const void* x,
                                   const void* gamma, const void* beta, int64_t rows, int64_t C,
                                   DType dtype, ForwardOptions options) {
  bool nothing = false;
  KernelStatus s = internal::check_common(rows, C, dtype, /*cuda=*/false, &nothing);
  if (!s.ok() || nothing) return s;
  if (s = internal::check_eps(options); !s.ok()) return s;
  if (!internal::all_set({out, x, gamma, beta})) {
    return KernelStatus::invalid_argument("layernorm_forward_cpu: null buffer");
  }
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_rows<T, false, false>(static_cast<T*>(out), mean, rstd, nullptr,
                                  static_cast<const T*>(x), nullptr, static_cast<const T*>(gamma),
                                  static_cast<const T*>(beta), rows, C, options.eps);
    return KernelStatus();
  });
}

KernelStatus rmsnorm_forward_cpu(void* out, float* rstd, const void* x, const void* gamma,
                                 int64_t rows, int64_t C, DType dtype, ForwardOptions options) {
  bool nothing = false;
  KernelStatus s = internal::check_common(rows, C, dtype, /*cuda=*/false, &nothing);
  if (!s.ok() || nothing) return s;
  if (s = internal::check_eps(options); !s.ok()) return s;
  if (!internal::all_set({out, x, gamma})) {
    return KernelStatus::invalid_argument("rmsnorm_forward_cpu: null buffer");
  }
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_rows<T, true, false>(static_cast<T*>(out), nullptr, rstd, nullptr,
                                 static_cast<const T*>(x), nullptr, static_cast<const T*>(gamma),
                                 nullptr, rows, C, options.eps);
    return KernelStatus();
  });
}

KernelStatus fused_residual_layernorm_forward_cpu(void* residual_out, void* out, float* mean,
                                                  float* rstd, const void* x, const void* residual,
                                                  const void* gamma, const void* beta, int64_t rows,
                                                  int64_t C, DType dtype, ForwardOptions options) {
  bool nothing = false;
  KernelStatus s = internal::check_common(rows, C, dtype, /*cuda=*/false, &nothing);
  if (!s.ok() || nothing) return s;
  if (s = internal::check_eps(options); !s.ok()) return s;
  if (!internal::all_set({residual_out, out, x, residual, gamma, beta})) {
    return KernelStatus::invalid_argument("fused_residual_layernorm_forward_cpu: null buffer");
  }
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_rows<T, false, true>(static_cast<T*>(out), mean, rstd, static_cast<T*>(residual_out),
                                 static_cast<const T*>(x), static_cast<const T*>(residual),
                                 static_cast<const T*>(gamma), static_cast<const T*>(beta), rows, C,
                                 options.eps);
    return KernelStatus();
  });
}

KernelStatus fused_residual_rmsnorm_forward_cpu(void* residual_out, void* out, float* rstd,
                                                const void* x, const void* residual,
                                                const void* gamma, int64_t rows, int64_t C,
                                                DType dtype, ForwardOptions options) {
  bool nothing = false;
  KernelStatus s = internal::check_common(rows, C, dtype, /*cuda=*/false, &nothing);
  if (!s.ok() || nothing) return s;
  if (s = internal::check_eps(options); !s.ok()) return s;
  if (!internal::all_set({residual_out, out, x, residual, gamma})) {
    return KernelStatus::invalid_argument("fused_residual_rmsnorm_forward_cpu: null buffer");
  }
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_rows<T, true, true>(static_cast<T*>(out), nullptr, rstd, static_cast<T*>(residual_out),
                                static_cast<const T*>(x), static_cast<const T*>(residual),
                                static_cast<const T*>(gamma), nullptr, rows, C, options.eps);
    return KernelStatus();
  });
}

KernelStatus layernorm_backward_cpu(void* dx, void* dgamma, void* dbeta, const void* dout,
                                    const void* x, const float* mean, const float* rstd,
                                    const void* gamma, int64_t rows, int64_t C, DType dtype,
                                    BackwardOptions options) {
  bool nothing = false;
  KernelStatus s = internal::check_common(rows, C, dtype, /*cuda=*/false, &nothing);
  if (!s.ok() || nothing) return s;
  if (!internal::all_set({dx, dgamma, dbeta, dout, x, mean, rstd, gamma})) {
    return KernelStatus::invalid_argument("layernorm_backward_cpu: null buffer");
  }
  const void* addend = nullptr;
  if (s = internal::dx_addend(dx, options, &addend); !s.ok()) return s;
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    backward_rows<T, false>(static_cast<T*>(dx), static_cast<T*>(dgamma), static_cast<T*>(dbeta),
                            static_cast<const T*>(dout), static_cast<const T*>(x), mean, rstd,
                            static_cast<const T*>(gamma), rows, C, static_cast<const T*>(addend));
    return KernelStatus();
  });
}

KernelStatus rmsnorm_backward_cpu(void* dx, void* dgamma, const void* dout, const void* x,
                                  const float* rstd, const void* gamma, int64_t rows, int64_t C,
                                  DType dtype, BackwardOptions options) {
  bool nothing = false;
  KernelStatus s = internal::check_common(rows, C, dtype, /*cuda=*/false, &nothing);
  if (!s.ok() || nothing) return s;
  if (!internal::all_set({dx, dgamma, dout, x, rstd, gamma})) {
    return KernelStatus::invalid_argument("rmsnorm_backward_cpu: null buffer");
  }
  const void* addend = nullptr;
  if (s = internal::dx_addend(dx, options, &addend); !s.ok()) return s;
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    backward_rows<T, true>(static_cast<T*>(dx), static_cast<T*>(dgamma), nullptr,
                           static_cast<const T*>(dout), static_cast<const T*>(x), nullptr, rstd,
                           static_cast<const T*>(gamma), rows, C, static_cast<const T*>(addend));
    return KernelStatus();
  });
}

}  // namespace colossal::kernels::layernorm
