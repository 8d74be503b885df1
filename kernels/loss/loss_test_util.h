// Test support shared by kernels/loss's tests: random problems (padding
// columns hold NaN, about one row in eight ignored), the float64 reference,
// gradient comparison under per-dtype tolerances, and guarded device buffers.
// The tolerances are derived in loss_test.cc's file comment.
#ifndef COLOSSAL_KERNELS_LOSS_LOSS_TEST_UTIL_H_
#define COLOSSAL_KERNELS_LOSS_LOSS_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/common/half.h"
#include "kernels/loss/loss.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::loss::test {

inline constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// ---- element access ---------------------------------------------------------

inline double get(DType dtype, const std::vector<uint8_t>& bytes, int64_t i) {
  double v = 0;
  (void)dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    v = static_cast<double>(to_math(reinterpret_cast<const T*>(bytes.data())[i]));
    return KernelStatus();
  });
  return v;
}

inline void set(DType dtype, std::vector<uint8_t>& bytes, int64_t i, double value) {
  (void)dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(bytes.data());
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      p[i] = from_float<T>(static_cast<float>(value));
    } else {
      p[i] = static_cast<T>(value);
    }
    return KernelStatus();
  });
}

// ---- problems and the float64 reference ---------------------------------------

struct Problem {
  DType dtype = DType::kF32;
  int64_t n = 0, v = 0, v_real = 0;
  CrossEntropyOptions opts;
  float dloss = 1.0f;
  std::vector<uint8_t> logits;  // n * v elements; padding columns hold NaN
  std::vector<int32_t> targets;
};

// Logits uniform in [lo, hi) (stored in dtype), about one row in eight
// ignored (never all of them when n > 1), padding columns NaN so a kernel
// that uses them fails.
inline Problem make_problem(DType dtype, int64_t n, int64_t v, int64_t v_real,
                            Reduction reduction, uint32_t seed, double lo = -4.0,
                            double hi = 4.0) {
  Problem p;
  p.dtype = dtype;
  p.n = n;
  p.v = v;
  p.v_real = v_real;
  p.opts.reduction = reduction;
  p.dloss = (seed % 3 == 0) ? 1024.0f : (seed % 3 == 1 ? 1.0f : 0.37f);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> real(lo, hi);
  std::uniform_int_distribution<int32_t> cls(0, static_cast<int32_t>(v_real - 1));
  p.logits.resize(n * v * dtype_size(dtype));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < v; ++j) set(dtype, p.logits, i * v + j, j < v_real ? real(rng) : kNan);
  }
  p.targets.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    p.targets[i] = (n > 1 && i % 8 == 3) ? p.opts.ignore_index : cls(rng);
  }
  return p;
}

struct Reference {
  std::vector<double> lse, row_loss, grad, prob;  // grad/prob: n * v
  // Per row: the largest logit, and sum_j p_j (max - x_j) (how far below the
  // maximum the probability mass sits: the float32 path's error grows with it).
  std::vector<double> max, spread;
  double loss = 0;
  double scale = 0;
};

inline Reference reference(const Problem& p) {
  Reference r;
  r.lse.assign(p.n, 0);
  r.row_loss.assign(p.n, 0);
  r.grad.assign(p.n * p.v, 0);
  r.prob.assign(p.n * p.v, 0);
  r.max.assign(p.n, 0);
  r.spread.assign(p.n, 0);
  int64_t count = 0;
  for (int32_t t : p.targets) count += t != p.opts.ignore_index;
  r.scale = p.dloss;
  if (p.opts.reduction == Reduction::kMean) r.scale = count ? double{p.dloss} / count : 0.0;
  double total = 0;
  for (int64_t i = 0; i < p.n; ++i) {
    double m = -INFINITY;
    for (int64_t j = 0; j < p.v_real; ++j) m = std::max(m, get(p.dtype, p.logits, i * p.v + j));
    double s = 0;
    for (int64_t j = 0; j < p.v_real; ++j) s += std::exp(get(p.dtype, p.logits, i * p.v + j) - m);
    r.lse[i] = m + std::log(s);
    r.max[i] = m;
    if (std::isfinite(r.lse[i])) {
      for (int64_t j = 0; j < p.v_real; ++j) {
        const double x = get(p.dtype, p.logits, i * p.v + j);
        r.spread[i] += std::exp(x - r.lse[i]) * (m - x);
      }
    }
    const int32_t t = p.targets[i];
    if (t == p.opts.ignore_index) continue;
    r.row_loss[i] = r.lse[i] - get(p.dtype, p.logits, i * p.v + t);
    total += r.row_loss[i];
    for (int64_t j = 0; j < p.v_real; ++j) {
      const double prob = std::exp(get(p.dtype, p.logits, i * p.v + j) - r.lse[i]);
      r.prob[i * p.v + j] = prob;
      r.grad[i * p.v + j] = r.scale * (prob - (j == t ? 1.0 : 0.0));
    }
  }
  r.loss = p.opts.reduction == Reduction::kMean ? (count ? total / count : 0.0) : total;
  return r;
}

struct Tol {
  double loss;   // relative to max(1, |want|)
  double rtol;   // dlogits
  double atol;
  // The CPU's float32 path (exp of x - max in float32): each probability is
  // within (8 + max - x_j) * u of the exact one (argument rounding and 4 ulp
  // of expf, u = 2^-24), their sum within (8 + spread) * u, so lse within
  // that absolutely and dlogits within (18 + (max - x_j) + spread) * u
  // relative (two more roundings). `arg` is u for that path, 0 otherwise.
  double arg = 0;
};

inline std::string describe(const Problem& p) {
  return std::string(dtype_name(p.dtype)) + " n=" + std::to_string(p.n) +
         " v=" + std::to_string(p.v) + " v_real=" + std::to_string(p.v_real) + " " +
         reduction_name(p.opts.reduction) + " dloss=" + std::to_string(p.dloss);
}

inline void expect_grads(const Problem& p, const Reference& ref,
                         const std::vector<uint8_t>& got, Tol tol, const std::string& what) {
  for (int64_t i = 0; i < p.n * p.v; ++i) {
    const double g = get(p.dtype, got, i);
    const double want = ref.grad[i];
    const int64_t row = i / p.v;
    const double below = ref.max[row] - get(p.dtype, p.logits, i);  // max - x_j
    const double rtol = tol.rtol + tol.arg * (18 + below + ref.spread[row]);
    const double bound = rtol * (std::fabs(want) + ref.scale * ref.prob[i]) + tol.atol;
    if (want == 0.0) {  // padding, ignored rows (and a zero scale) are exactly 0
      const bool zero_by_contract =
          (i % p.v) >= p.v_real || p.targets[i / p.v] == p.opts.ignore_index || ref.scale == 0;
      if (zero_by_contract) {
        ASSERT_EQ(g, 0.0) << what << " element " << i << " must be exactly 0";
        continue;
      }
    }
    ASSERT_LE(std::fabs(g - want), bound)
        << what << " row " << i / p.v << " col " << i % p.v << " got " << g << " want " << want;
  }
}

inline Tol cpu_tol(DType dtype) {
  switch (dtype) {
    case DType::kF32: return {5e-7, 1.2e-7, 1e-44, 0x1p-24};
    case DType::kF16: return {5e-7, 9.8e-4, 6e-8};
    case DType::kBF16: return {5e-7, 7.9e-3, 1e-39};
    default: return {5e-7, 1e-12, 1e-300};
  }
}

// Backward from the saved float32 lse: + |lse| * 2^-24 relative on p (|lse| <= ~16 here).
inline Tol cpu_backward_tol(DType dtype) {
  Tol t = cpu_tol(dtype);
  t.rtol += 1e-6;
  return t;
}

// Targets a problem of v_real 1000 (v 1030) must flag: negative, v_real, a
// padding column, beyond v, the int32 extremes.
inline const std::vector<int32_t> kBadTargets = {-1, 1000, 1029, 1 << 30,
                                                 std::numeric_limits<int32_t>::max(),
                                                 std::numeric_limits<int32_t>::min()};

struct Shape {
  int64_t n, v, v_real;
};

#if COLOSSAL_WITH_CUDA
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// A device buffer with poisoned guard bands of kGuard bytes on both sides.
inline constexpr size_t kGuard = 256;

struct DeviceBuffer {
  uint8_t* base = nullptr;
  size_t bytes = 0;
  size_t offset = 0;  // extra misalignment of the payload, in bytes
  DeviceBuffer(size_t payload, size_t misalign) : bytes(payload + 2 * kGuard + misalign),
                                                  offset(kGuard + misalign) {
    std::vector<uint8_t> poison(bytes);
    testing::poison(poison.data(), bytes);
    EXPECT_EQ(cudaMalloc(&base, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(base, poison.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(base); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  uint8_t* ptr() const { return base + offset; }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(ptr());
  }
  void upload(const void* src, size_t n) const {
    EXPECT_EQ(cudaMemcpy(ptr(), src, n, cudaMemcpyHostToDevice), cudaSuccess);
  }
  // The payload's `n` bytes; fails the test if a guard band was written.
  std::vector<uint8_t> download(size_t n) const {
    std::vector<uint8_t> all(bytes);
    EXPECT_EQ(cudaMemcpy(all.data(), base, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < bytes; ++i) {
      if (i >= offset && i < offset + n) continue;
      if (all[i] != 0xA5) {
        ADD_FAILURE() << "guard byte " << i << " written (payload at " << offset << ")";
        break;
      }
    }
    return std::vector<uint8_t>(all.begin() + offset, all.begin() + offset + n);
  }
};

inline std::vector<float> as_floats(const std::vector<uint8_t>& b) {
  std::vector<float> f(b.size() / sizeof(float));
  std::memcpy(f.data(), b.data(), f.size() * sizeof(float));
  return f;
}

inline Tol cuda_tol(DType dtype) {
  switch (dtype) {
    case DType::kF32: return {2e-5, 2e-5, 1e-34};
    case DType::kF16: return {2e-5, 2e-3, 6e-8};
    default: return {2e-5, 1.6e-2, 1e-34};
  }
}

#endif  // COLOSSAL_WITH_CUDA

}  // namespace colossal::kernels::loss::test

#endif  // COLOSSAL_KERNELS_LOSS_LOSS_TEST_UTIL_H_
