// kernels/activation: the CPU path against the tanh formula (GELU) and
// x / (1 + exp(-x)) (SwiGLU) evaluated in long double, finite differences in
// float64 for every backward, the gradient contracts (dx overwritten, dbias accumulated), and the CUDA path against the
// CPU path with per-dtype tolerances, guard bands and bit-identical reruns.
#include "kernels/activation/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/common/half.h"
#include "tests/util/gpu_test.h"
#include "tests/util/host_buffer.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::activation {
namespace {

constexpr DType kCpuTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};

using Buf = testing::HostBuffer;

// The tanh approximation exactly as written, in long double.
long double gelu_tanh(long double x) {
  const long double k = 0.79788456080286535587989211986876L;
  return 0.5L * x * (1.0L + std::tanh(k * (x + 0.044715L * x * x * x)));
}
long double gelu_tanh_grad(long double x) {
  const long double k = 0.79788456080286535587989211986876L;
  const long double t = std::tanh(k * (x + 0.044715L * x * x * x));
  return 0.5L * (1.0L + t) + 0.5L * x * (1.0L - t * t) * k * (1.0L + 3.0L * 0.044715L * x * x);
}

// Rounding of one stored output (relative), and an absolute floor for values
// in the type's subnormal range.
double round_tol(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 1.2e-7;   // 2^-23: one ulp
    case DType::kF16: return 1.0e-3;   // 2^-10
    case DType::kBF16: return 8.0e-3;  // 2^-7
    default: return 1.0e-13;           // float64: the long double tanh reference's own error
  }
}
double abs_floor(DType dtype) {
  return dtype == DType::kF16 ? 6.0e-8 : 1.0e-30;  // float16's subnormal step
}
// The literal tanh formula loses absolute, not relative, accuracy: 1 + tanh(u)
// cancels for large negative x, so its long double value carries an absolute
// error of a few long double ulps (1.1e-19) times the terms' size. That bounds
// how closely a float64 result can be checked against it.
double reference_error(double x, double dout = 1.0) { return 1e-17 * (1 + x * x) * std::fabs(dout); }

std::string label(DType dtype, int64_t a, int64_t b = -1) {
  return std::string(dtype_name(dtype)) + " " + std::to_string(a) + (b >= 0 ? "x" + std::to_string(b) : "");
}

// ------------------------------------------------------------------ CPU ----

TEST(ActivationCpuTest, GeluForwardMatchesTanhFormula) {
  uint32_t seed = 1;
  for (DType dtype : kCpuTypes) {
    for (int64_t n : {1, 3, 17, 1000, 4097}) {
      Buf x = Buf::random(dtype, n, seed++, -6.0f, 6.0f);
      if (n > 3) x.set(0, -12.0), x.set(1, 9.0), x.set(2, 0.0);
      Buf out(dtype, n);
      ASSERT_TRUE(gelu_forward_cpu(out.data(), x.data(), n, dtype).ok());
      for (int64_t i = 0; i < n; ++i) {
        const double want = static_cast<double>(gelu_tanh(x.get(i)));
        ASSERT_LE(std::fabs(out.get(i) - want),
                  round_tol(dtype) * std::fabs(want) + abs_floor(dtype) + reference_error(x.get(i)))
            << label(dtype, n) << " i=" << i << " x=" << x.get(i);
      }
    }
  }
}

TEST(ActivationCpuTest, GeluForwardInPlace) {
  for (DType dtype : kCpuTypes) {
    Buf x = Buf::random(dtype, 333, 7, -4.0f, 4.0f);
    Buf out(dtype, 333);
    ASSERT_TRUE(gelu_forward_cpu(out.data(), x.data(), 333, dtype).ok());
    ASSERT_TRUE(gelu_forward_cpu(x.data(), x.data(), 333, dtype).ok());
    EXPECT_TRUE(x.same_bits(out)) << dtype_name(dtype);
  }
}

TEST(ActivationCpuTest, GeluBackwardMatchesTanhDerivativeAndOverwrites) {
  uint32_t seed = 100;
  for (DType dtype : kCpuTypes) {
    for (int64_t n : {1, 3, 17, 1000, 4097}) {
      const Buf x = Buf::random(dtype, n, seed++, -6.0f, 6.0f);
      const Buf dout = Buf::random(dtype, n, seed++, -2.0f, 2.0f);
      Buf dx = Buf::random(dtype, n, seed++, -50.0f, 50.0f);  // must be overwritten
      ASSERT_TRUE(gelu_backward_cpu(dx.data(), dout.data(), x.data(), n, dtype).ok());
      for (int64_t i = 0; i < n; ++i) {
        const double want = static_cast<double>(dout.get(i) * gelu_tanh_grad(x.get(i)));
        ASSERT_LE(std::fabs(dx.get(i) - want), round_tol(dtype) * std::fabs(want) + abs_floor(dtype) +
                                                   reference_error(x.get(i), dout.get(i)))
            << label(dtype, n) << " i=" << i << " x=" << x.get(i);
      }
      // In place over dout gives the same bits.
      Buf inplace = dout;
      ASSERT_TRUE(gelu_backward_cpu(inplace.data(), inplace.data(), x.data(), n, dtype).ok());
      EXPECT_TRUE(inplace.same_bits(dx)) << label(dtype, n);
    }
  }
}

TEST(ActivationCpuTest, GeluBackwardFiniteDifferencesFloat64) {
  const int64_t n = 257;
  const Buf x = Buf::random(DType::kF64, n, 11, -5.0f, 5.0f);
  const Buf dout = Buf::random(DType::kF64, n, 12, -2.0f, 2.0f);
  Buf dx(DType::kF64, n);
  ASSERT_TRUE(gelu_backward_cpu(dx.data(), dout.data(), x.data(), n, DType::kF64).ok());
  const double h = 1e-5;
  Buf xp = x, xm = x, yp(DType::kF64, n), ym(DType::kF64, n);
  for (int64_t i = 0; i < n; ++i) xp.set(i, x.get(i) + h), xm.set(i, x.get(i) - h);
  ASSERT_TRUE(gelu_forward_cpu(yp.data(), xp.data(), n, DType::kF64).ok());
  ASSERT_TRUE(gelu_forward_cpu(ym.data(), xm.data(), n, DType::kF64).ok());
  for (int64_t i = 0; i < n; ++i) {
    const double fd = dout.get(i) * (yp.get(i) - ym.get(i)) / (2 * h);
    ASSERT_NEAR(dx.get(i), fd, 1e-8) << "i=" << i << " x=" << x.get(i);
  }
}

TEST(ActivationCpuTest, BiasGeluForwardMatchesTanhFormula) {
  uint32_t seed = 200;
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {3, 17}, {17, 3}, {64, 24}, {65, 1000}};
  for (DType dtype : kCpuTypes) {
    for (auto [rows, cols] : shapes) {
      const Buf x = Buf::random(dtype, rows * cols, seed++, -5.0f, 5.0f);
      const Buf bias = Buf::random(dtype, cols, seed++, -1.0f, 1.0f);
      Buf out(dtype, rows * cols);
      ASSERT_TRUE(bias_gelu_forward_cpu(out.data(), x.data(), bias.data(), rows, cols, dtype).ok());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t i = r * cols + c;
          const double want = static_cast<double>(gelu_tanh(x.get(i) + static_cast<long double>(bias.get(c))));
          ASSERT_LE(std::fabs(out.get(i) - want), round_tol(dtype) * std::fabs(want) + abs_floor(dtype) +
                                                      reference_error(x.get(i) + bias.get(c)))
              << label(dtype, rows, cols) << " r=" << r << " c=" << c;
        }
      }
      Buf inplace = x;  // out may equal x
      ASSERT_TRUE(bias_gelu_forward_cpu(inplace.data(), inplace.data(), bias.data(), rows, cols, dtype).ok());
      EXPECT_TRUE(inplace.same_bits(out)) << label(dtype, rows, cols);
    }
  }
}

// dx overwritten (pre-filled with garbage), dbias accumulated onto random
// values, twice: the second call must add the same sum again.
TEST(ActivationCpuTest, BiasGeluBackwardContractAndReference) {
  uint32_t seed = 300;
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {3, 17}, {17, 3}, {64, 24}, {130, 40}};
  for (DType dtype : kCpuTypes) {
    for (auto [rows, cols] : shapes) {
      const int64_t n = rows * cols;
      const Buf x = Buf::random(dtype, n, seed++, -5.0f, 5.0f);
      const Buf bias = Buf::random(dtype, cols, seed++, -1.0f, 1.0f);
      const Buf dout = Buf::random(dtype, n, seed++, -2.0f, 2.0f);
      Buf dx = Buf::random(dtype, n, seed++, -50.0f, 50.0f);
      const Buf dbias0 = Buf::random(dtype, cols, seed++, -3.0f, 3.0f);
      Buf dbias = dbias0;
      ASSERT_TRUE(bias_gelu_backward_cpu(dx.data(), dbias.data(), dout.data(), x.data(), bias.data(),
                                         rows, cols, dtype).ok());
      std::vector<long double> sum(cols, 0.0L), abs_sum(cols, 0.0L);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t i = r * cols + c;
          const long double dpre = dout.get(i) * gelu_tanh_grad(x.get(i) + static_cast<long double>(bias.get(c)));
          sum[c] += dpre;
          abs_sum[c] += std::fabs(dpre);
          const double want = static_cast<double>(dpre);
          ASSERT_LE(std::fabs(dx.get(i) - want),
                    round_tol(dtype) * std::fabs(want) + abs_floor(dtype) +
                        reference_error(x.get(i) + bias.get(c), dout.get(i)))
              << label(dtype, rows, cols) << " dx r=" << r << " c=" << c;
        }
      }
      for (int64_t c = 0; c < cols; ++c) {
        const double want = static_cast<double>(dbias0.get(c) + sum[c]);
        const double tol = round_tol(dtype) * std::fabs(want) + 1e-12 * static_cast<double>(abs_sum[c]) +
                           abs_floor(dtype);
        ASSERT_LE(std::fabs(dbias.get(c) - want), tol) << label(dtype, rows, cols) << " dbias c=" << c;
      }
      // Second call: dx identical (overwritten, not accumulated), dbias grows again.
      const Buf dx_first = dx;
      const Buf dbias_first = dbias;
      ASSERT_TRUE(bias_gelu_backward_cpu(dx.data(), dbias.data(), dout.data(), x.data(), bias.data(),
                                         rows, cols, dtype).ok());
      EXPECT_TRUE(dx.same_bits(dx_first)) << label(dtype, rows, cols);
      for (int64_t c = 0; c < cols; ++c) {
        const double want = static_cast<double>(dbias_first.get(c) + sum[c]);
        const double tol = round_tol(dtype) * std::fabs(want) + 1e-12 * static_cast<double>(abs_sum[c]) +
                           abs_floor(dtype);
        ASSERT_LE(std::fabs(dbias.get(c) - want), tol) << label(dtype, rows, cols) << " 2nd dbias c=" << c;
      }
      // In place over dout: same dx bits, same dbias.
      Buf inplace = dout;
      Buf dbias_inplace = dbias0;
      ASSERT_TRUE(bias_gelu_backward_cpu(inplace.data(), dbias_inplace.data(), inplace.data(), x.data(),
                                         bias.data(), rows, cols, dtype).ok());
      EXPECT_TRUE(inplace.same_bits(dx_first)) << label(dtype, rows, cols);
      Buf dbias_ref = dbias0;
      Buf scratch_dx(dtype, n);
      ASSERT_TRUE(bias_gelu_backward_cpu(scratch_dx.data(), dbias_ref.data(), dout.data(), x.data(),
                                         bias.data(), rows, cols, dtype).ok());
      EXPECT_TRUE(dbias_inplace.same_bits(dbias_ref)) << label(dtype, rows, cols);
    }
  }
}

// L = sum(dout * bias_gelu(x, bias)); central differences in float64 for every
// element of x and of bias.
TEST(ActivationCpuTest, BiasGeluBackwardFiniteDifferencesFloat64) {
  const int64_t rows = 5, cols = 7, n = rows * cols;
  const DType f64 = DType::kF64;
  const Buf x = Buf::random(f64, n, 21, -4.0f, 4.0f);
  const Buf bias = Buf::random(f64, cols, 22, -1.0f, 1.0f);
  const Buf dout = Buf::random(f64, n, 23, -2.0f, 2.0f);
  const Buf dbias0 = Buf::random(f64, cols, 24, -1.0f, 1.0f);
  Buf dx(f64, n), dbias = dbias0;
  ASSERT_TRUE(bias_gelu_backward_cpu(dx.data(), dbias.data(), dout.data(), x.data(), bias.data(), rows,
                                     cols, f64).ok());
  auto loss = [&](const Buf& xx, const Buf& bb) {
    Buf out(f64, n);
    EXPECT_TRUE(bias_gelu_forward_cpu(out.data(), xx.data(), bb.data(), rows, cols, f64).ok());
    double l = 0;
    for (int64_t i = 0; i < n; ++i) l += dout.get(i) * out.get(i);
    return l;
  };
  const double h = 1e-5;
  for (int64_t i = 0; i < n; ++i) {
    Buf xp = x, xm = x;
    xp.set(i, x.get(i) + h);
    xm.set(i, x.get(i) - h);
    const double fd = (loss(xp, bias) - loss(xm, bias)) / (2 * h);
    ASSERT_NEAR(dx.get(i), fd, 1e-7) << "dx i=" << i;
  }
  for (int64_t c = 0; c < cols; ++c) {
    Buf bp = bias, bm = bias;
    bp.set(c, bias.get(c) + h);
    bm.set(c, bias.get(c) - h);
    const double fd = (loss(x, bp) - loss(x, bm)) / (2 * h);
    ASSERT_NEAR(dbias.get(c) - dbias0.get(c), fd, 1e-7) << "dbias c=" << c;
  }
}

TEST(ActivationCpuTest, RejectsBadArguments) {
  using Code = KernelStatus::Code;
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 4}, c[4] = {1, 2, 3, 4}, d[2] = {1, 2};
  EXPECT_EQ(gelu_forward_cpu(nullptr, a, 4, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(gelu_forward_cpu(a, b, -1, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(gelu_forward_cpu(a, b, 4, DType::kI32).code(), Code::kUnsupported);
  EXPECT_TRUE(gelu_forward_cpu(nullptr, nullptr, 0, DType::kF32).ok());
  EXPECT_EQ(gelu_backward_cpu(a, nullptr, b, 4, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(gelu_backward_cpu(a, b, c, 4, DType::kU8).code(), Code::kUnsupported);
  EXPECT_TRUE(gelu_backward_cpu(nullptr, nullptr, nullptr, 0, DType::kF32).ok());
  EXPECT_EQ(bias_gelu_forward_cpu(a, b, nullptr, 2, 2, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(bias_gelu_forward_cpu(a, b, d, -2, 2, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(bias_gelu_forward_cpu(a, b, d, 2, 2, DType::kI64).code(), Code::kUnsupported);
  EXPECT_TRUE(bias_gelu_forward_cpu(nullptr, nullptr, nullptr, 0, 5, DType::kF32).ok());
  EXPECT_EQ(bias_gelu_backward_cpu(a, nullptr, b, c, d, 2, 2, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(bias_gelu_backward_cpu(a, d, b, c, d, 2, -1, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(bias_gelu_backward_cpu(a, d, b, c, d, 2, 2, DType::kI32).code(), Code::kUnsupported);
  EXPECT_TRUE(bias_gelu_backward_cpu(nullptr, nullptr, nullptr, nullptr, nullptr, 5, 0, DType::kF32).ok());
  // rows == 0 leaves dbias untouched (+= an empty sum).
  EXPECT_TRUE(bias_gelu_backward_cpu(nullptr, d, nullptr, nullptr, nullptr, 0, 2, DType::kF32).ok());
  EXPECT_EQ(d[0], 1.0f);
}

// ---------------------------------------------------------------- SwiGLU ----

// silu and its derivative in long double, written differently from the kernels
// (1 / (1 + exp(-x)) and 1 - s as exp(-x) * s): an independent reference.
long double silu_ref(long double x) { return x / (1.0L + std::exp(-x)); }
long double silu_grad_ref(long double x) {
  const long double s = 1.0L / (1.0L + std::exp(-x));
  return s + x * s * (std::exp(-x) * s);
}
// s (1 + |x| (1 - s)): silu' with its two terms added in magnitude, the size of
// what cancels near its zero (x = -1.278).
double silu_grad_scale(double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return s * (1.0 + std::fabs(x) * (1.0 - s));
}

// Fresh gates in [-8, 8) with large magnitudes at the front (the sigmoid's
// saturated ends).
Buf swiglu_gate(DType dtype, int64_t n, uint32_t seed) {
  Buf g = Buf::random(dtype, n, seed, -8.0f, 8.0f);
  const double big[] = {-10000.0, -100.0, -60.0, -20.0, 20.0, 60.0, 100.0, 10000.0};
  for (int64_t i = 0; i < n && i < 8; ++i) g.set(i, big[i]);
  return g;
}

// Every byte 0xFF: NaN in every float type, so an unwritten element fails.
void poison_nan(Buf* b) { std::memset(b->data(), 0xFF, b->bytes()); }

TEST(ActivationCpuTest, SwigluForwardMatchesReference) {
  uint32_t seed = 3000;
  for (DType dtype : kCpuTypes) {
    for (int64_t n : {1, 3, 17, 1000, 4097}) {
      const Buf gate = swiglu_gate(dtype, n, seed++);
      const Buf up = Buf::random(dtype, n, seed++, -2.0f, 2.0f);
      Buf out(dtype, n);
      poison_nan(&out);
      ASSERT_TRUE(swiglu_forward_cpu(out.data(), gate.data(), up.data(), n, dtype).ok());
      for (int64_t i = 0; i < n; ++i) {
        const double want = static_cast<double>(silu_ref(gate.get(i)) * up.get(i));
        ASSERT_LE(std::fabs(out.get(i) - want), round_tol(dtype) * std::fabs(want) + abs_floor(dtype))
            << label(dtype, n) << " i=" << i << " gate=" << gate.get(i) << " up=" << up.get(i);
      }
      // In place over gate and over up: the same bits.
      Buf over_gate = gate, over_up = up;
      ASSERT_TRUE(swiglu_forward_cpu(over_gate.data(), over_gate.data(), up.data(), n, dtype).ok());
      ASSERT_TRUE(swiglu_forward_cpu(over_up.data(), gate.data(), over_up.data(), n, dtype).ok());
      EXPECT_TRUE(over_gate.same_bits(out)) << label(dtype, n);
      EXPECT_TRUE(over_up.same_bits(out)) << label(dtype, n);
    }
  }
}

TEST(ActivationCpuTest, SwigluBackwardMatchesReferenceAndOverwrites) {
  uint32_t seed = 3100;
  for (DType dtype : kCpuTypes) {
    for (int64_t n : {1, 3, 17, 1000, 4097}) {
      const Buf gate = swiglu_gate(dtype, n, seed++);
      const Buf up = Buf::random(dtype, n, seed++, -2.0f, 2.0f);
      const Buf dout = Buf::random(dtype, n, seed++, -2.0f, 2.0f);
      Buf dgate(dtype, n), dup(dtype, n);
      poison_nan(&dgate);
      poison_nan(&dup);
      ASSERT_TRUE(swiglu_backward_cpu(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n, dtype).ok());
      for (int64_t i = 0; i < n; ++i) {
        const long double g = gate.get(i), u = up.get(i), dy = dout.get(i);
        const double want_dgate = static_cast<double>(dy * u * silu_grad_ref(g));
        const double want_dup = static_cast<double>(dy * silu_ref(g));
        // The double evaluation of s (1 + x sigmoid(-x)) carries a few double
        // ulps of its terms' size (the long double reference far fewer).
        const double cancel = 1e-15 * std::fabs(static_cast<double>(dy * u)) * silu_grad_scale(g);
        ASSERT_LE(std::fabs(dgate.get(i) - want_dgate),
                  round_tol(dtype) * std::fabs(want_dgate) + abs_floor(dtype) + cancel)
            << label(dtype, n) << " dgate i=" << i << " gate=" << gate.get(i);
        ASSERT_LE(std::fabs(dup.get(i) - want_dup), round_tol(dtype) * std::fabs(want_dup) + abs_floor(dtype))
            << label(dtype, n) << " dup i=" << i << " gate=" << gate.get(i);
      }
      // dgate over dout and dup over up: the same bits.
      Buf over_dout = dout, over_up = up;
      ASSERT_TRUE(swiglu_backward_cpu(over_dout.data(), over_up.data(), over_dout.data(), gate.data(),
                                      over_up.data(), n, dtype).ok());
      EXPECT_TRUE(over_dout.same_bits(dgate)) << label(dtype, n);
      EXPECT_TRUE(over_up.same_bits(dup)) << label(dtype, n);
    }
  }
}

// L = sum(dout * swiglu(gate, up)); central differences in float64 for every
// element of gate and of up (elementwise, so all elements move at once).
TEST(ActivationCpuTest, SwigluBackwardFiniteDifferencesFloat64) {
  const DType f64 = DType::kF64;
  const int64_t n = 257;
  Buf gate = Buf::random(f64, n, 3201, -8.0f, 8.0f);
  for (int64_t i = 0; i < 6; ++i) gate.set(i, (i % 2 ? 1.0 : -1.0) * (25.0 + 10.0 * i));
  const Buf up = Buf::random(f64, n, 3202, -2.0f, 2.0f);
  const Buf dout = Buf::random(f64, n, 3203, -2.0f, 2.0f);
  Buf dgate(f64, n), dup(f64, n);
  poison_nan(&dgate);
  poison_nan(&dup);
  ASSERT_TRUE(swiglu_backward_cpu(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n, f64).ok());
  const double h = 1e-5;
  auto shifted = [&](const Buf& b, double d) {
    Buf r = b;
    for (int64_t i = 0; i < n; ++i) r.set(i, b.get(i) + d);
    return r;
  };
  auto forward = [&](const Buf& g, const Buf& u) {
    Buf y(f64, n);
    EXPECT_TRUE(swiglu_forward_cpu(y.data(), g.data(), u.data(), n, f64).ok());
    return y;
  };
  const Buf yg_p = forward(shifted(gate, h), up), yg_m = forward(shifted(gate, -h), up);
  const Buf yu_p = forward(gate, shifted(up, h)), yu_m = forward(gate, shifted(up, -h));
  for (int64_t i = 0; i < n; ++i) {
    // Truncation h^2 |third derivative| / 6 < 1e-10 |dout up|; rounding
    // 1e-16 |y| / h < 1e-10 (1 + |gate|).
    const double fd_gate = dout.get(i) * (yg_p.get(i) - yg_m.get(i)) / (2 * h);
    const double fd_up = dout.get(i) * (yu_p.get(i) - yu_m.get(i)) / (2 * h);
    const double tol = 1e-8 * (1 + std::fabs(gate.get(i)));
    ASSERT_NEAR(dgate.get(i), fd_gate, tol) << "dgate i=" << i << " gate=" << gate.get(i);
    ASSERT_NEAR(dup.get(i), fd_up, tol) << "dup i=" << i << " gate=" << gate.get(i);
  }
}

TEST(ActivationCpuTest, SwigluRejectsBadArguments) {
  using Code = KernelStatus::Code;
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 4}, c[4] = {1, 2, 3, 4};
  EXPECT_EQ(swiglu_forward_cpu(nullptr, a, b, 4, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(swiglu_forward_cpu(a, b, nullptr, 4, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(swiglu_forward_cpu(a, b, c, -1, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(swiglu_forward_cpu(a, b, c, 4, DType::kI32).code(), Code::kUnsupported);
  EXPECT_TRUE(swiglu_forward_cpu(nullptr, nullptr, nullptr, 0, DType::kF32).ok());
  EXPECT_EQ(swiglu_backward_cpu(a, nullptr, b, c, a, 4, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(swiglu_backward_cpu(a, b, c, nullptr, a, 4, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(swiglu_backward_cpu(a, b, c, a, b, -2, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(swiglu_backward_cpu(a, b, c, a, b, 4, DType::kU8).code(), Code::kUnsupported);
  EXPECT_TRUE(swiglu_backward_cpu(nullptr, nullptr, nullptr, nullptr, nullptr, 0, DType::kF32).ok());
  EXPECT_EQ(a[0], 1.0f);
}

TEST(ActivationCpuTest, ScratchBytes) {
  EXPECT_EQ(bias_gelu_backward_scratch_bytes(0, 10), 0u);
  EXPECT_EQ(bias_gelu_backward_scratch_bytes(10, 0), 0u);
  EXPECT_EQ(bias_gelu_backward_scratch_bytes(-1, 10), 0u);
  EXPECT_EQ(bias_gelu_backward_scratch_bytes(1, 10), 40u);
  EXPECT_EQ(bias_gelu_backward_scratch_bytes(64, 10), 40u);
  EXPECT_EQ(bias_gelu_backward_scratch_bytes(65, 10), 80u);
  EXPECT_EQ(bias_gelu_backward_scratch_bytes(8192, 3072), size_t{128} * 3072 * 4);
}

// ----------------------------------------------------------------- CUDA ----

#if COLOSSAL_WITH_CUDA
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

constexpr DType kCudaTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
// Flat lengths: below, at and just above one 16-byte pack, and large with a tail.
constexpr int64_t kCudaSizes[] = {1, 3, 8, 9, 1000, 4097, (1 << 20) + 13};

// Tolerances against the CPU (double math, one rounding): the device computes
// in float32 with exp on the ex2 unit (relative error ~1e-6 for arguments up to
// ~20, the data below stays there), then rounds once, so results can differ by
// one output ulp (round_tol) plus 1e-5 of the math scale (for the backward,
// |dout| * (1 + |x|): gelu' has a zero near x = -0.75 where only an absolute
// bound makes sense).
constexpr double kMathTol = 1e-5;

// A device copy of `host` placed `offset` elements into an allocation with
// kGuard poisoned elements on each side; check_guards() verifies they survived.
class DeviceBuf {
 public:
  static constexpr int64_t kGuard = 32;
  DeviceBuf(const Buf& host, int64_t offset) : dtype_(host.dtype()), n_(host.size()), offset_(offset) {
    const size_t es = dtype_size(dtype_);
    total_ = (n_ + 2 * kGuard + offset_) * es;
    std::vector<uint8_t> init(total_);
    testing::poison(init.data(), total_);
    std::memcpy(init.data() + (kGuard + offset_) * es, host.data(), host.bytes());
    ok_ = cudaMalloc(&base_, total_) == cudaSuccess &&
          cudaMemcpy(base_, init.data(), total_, cudaMemcpyHostToDevice) == cudaSuccess;
  }
  ~DeviceBuf() { cudaFree(base_); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  bool ok() const { return ok_; }
  void* ptr() { return static_cast<uint8_t*>(base_) + (kGuard + offset_) * dtype_size(dtype_); }
  // Copies the payload back into `host` and checks the guard bands.
  void fetch(Buf* host, const std::string& what) {
    std::vector<uint8_t> all(total_);
    ASSERT_EQ(cudaMemcpy(all.data(), base_, total_, cudaMemcpyDeviceToHost), cudaSuccess) << what;
    const size_t es = dtype_size(dtype_);
    std::memcpy(host->data(), all.data() + (kGuard + offset_) * es, host->bytes());
    for (size_t i = 0; i < (kGuard + offset_) * es; ++i) ASSERT_EQ(all[i], 0xA5) << what << " guard before";
    for (size_t i = (kGuard + offset_ + n_) * es; i < total_; ++i) ASSERT_EQ(all[i], 0xA5) << what << " guard after";
  }

 private:
  DType dtype_;
  int64_t n_, offset_;
  size_t total_ = 0;
  void* base_ = nullptr;
  bool ok_ = false;
};

// |got - want| <= round_tol * |want| + kMathTol * scale + abs_floor, where the
// forward's scale is |want| * (1 + |x|) (exp's error grows with its argument)
// and the backward's |dout| * (1 + |x|).
void expect_close(const Buf& got, const Buf& want, const std::vector<double>& scale,
                  const std::string& what) {
  const DType dt = got.dtype();
  for (int64_t i = 0; i < got.size(); ++i) {
    const double w = want.get(i);
    ASSERT_LE(std::fabs(got.get(i) - w), round_tol(dt) * std::fabs(w) + kMathTol * scale[i] + abs_floor(dt))
        << what << " i=" << i << " got " << got.get(i) << " want " << w;
  }
}
#endif

TEST(ActivationCudaTest, GeluMatchesCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 1000;
  for (DType dtype : kCudaTypes) {
    for (int64_t n : kCudaSizes) {
      for (int64_t offset : {0, 1}) {
        const std::string what = label(dtype, n) + " offset " + std::to_string(offset);
        Buf x = Buf::random(dtype, n, seed++, -5.0f, 5.0f);
        if (n > 4) x.set(0, -20.0), x.set(1, -11.0), x.set(2, 15.0), x.set(3, 0.0);
        const Buf dout = Buf::random(dtype, n, seed++, -2.0f, 2.0f);
        Buf want_y(dtype, n), want_dx(dtype, n);
        ASSERT_TRUE(gelu_forward_cpu(want_y.data(), x.data(), n, dtype).ok());
        ASSERT_TRUE(gelu_backward_cpu(want_dx.data(), dout.data(), x.data(), n, dtype).ok());
        std::vector<double> fwd_scale(n), bwd_scale(n);
        for (int64_t i = 0; i < n; ++i) {
          fwd_scale[i] = std::fabs(want_y.get(i)) * (1 + std::fabs(x.get(i)));
          bwd_scale[i] = std::fabs(dout.get(i)) * (1 + std::fabs(x.get(i)));
        }

        DeviceBuf d_x(x, offset), d_dout(dout, offset), d_y(Buf(dtype, n), offset),
            d_dx(Buf(dtype, n), offset);
        ASSERT_TRUE(d_x.ok() && d_dout.ok() && d_y.ok() && d_dx.ok());
        ASSERT_TRUE(gelu_forward_cuda(d_y.ptr(), d_x.ptr(), n, dtype, nullptr).ok());
        ASSERT_TRUE(gelu_backward_cuda(d_dx.ptr(), d_dout.ptr(), d_x.ptr(), n, dtype, nullptr).ok());
        CUDA_OK(cudaDeviceSynchronize());
        Buf y(dtype, n), dx(dtype, n);
        d_y.fetch(&y, what + " y");
        d_dx.fetch(&dx, what + " dx");
        expect_close(y, want_y, fwd_scale, what + " forward");
        expect_close(dx, want_dx, bwd_scale, what + " backward");

        // In place: backward over dout, forward over x; same bits as out of place.
        ASSERT_TRUE(gelu_backward_cuda(d_dout.ptr(), d_dout.ptr(), d_x.ptr(), n, dtype, nullptr).ok());
        ASSERT_TRUE(gelu_forward_cuda(d_x.ptr(), d_x.ptr(), n, dtype, nullptr).ok());
        CUDA_OK(cudaDeviceSynchronize());
        Buf dx_inplace(dtype, n), y_inplace(dtype, n);
        d_dout.fetch(&dx_inplace, what + " dx in place");
        d_x.fetch(&y_inplace, what + " y in place");
        EXPECT_TRUE(dx_inplace.same_bits(dx)) << what;
        EXPECT_TRUE(y_inplace.same_bits(y)) << what;
      }
    }
  }
#endif
}

TEST(ActivationCudaTest, BiasGeluMatchesCpuAndIsDeterministic) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 2000;
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1},    {1, 3072}, {3, 17},    {17, 3},
                                                {64, 24},  {65, 40},  {130, 768}, {1000, 17},
                                                {4097, 64}, {257, 3072}};
  for (DType dtype : kCudaTypes) {
    for (auto [rows, cols] : shapes) {
      for (int64_t offset : {0, 1}) {
        const int64_t n = rows * cols;
        const std::string what = label(dtype, rows, cols) + " offset " + std::to_string(offset);
        const Buf x = Buf::random(dtype, n, seed++, -5.0f, 5.0f);
        const Buf bias = Buf::random(dtype, cols, seed++, -1.0f, 1.0f);
        const Buf dout = Buf::random(dtype, n, seed++, -2.0f, 2.0f);
        const Buf dbias0 = Buf::random(dtype, cols, seed++, -3.0f, 3.0f);
        Buf want_y(dtype, n), want_dx(dtype, n), want_dbias = dbias0;
        ASSERT_TRUE(bias_gelu_forward_cpu(want_y.data(), x.data(), bias.data(), rows, cols, dtype).ok());
        ASSERT_TRUE(bias_gelu_backward_cpu(want_dx.data(), want_dbias.data(), dout.data(), x.data(),
                                           bias.data(), rows, cols, dtype).ok());
        std::vector<double> fwd_scale(n), bwd_scale(n), col_scale(cols, 0.0);
        for (int64_t i = 0; i < n; ++i) {
          const double xb = std::fabs(x.get(i) + bias.get(i % cols));
          fwd_scale[i] = std::fabs(want_y.get(i)) * (1 + xb);
          bwd_scale[i] = std::fabs(dout.get(i)) * (1 + xb);
          col_scale[i % cols] += bwd_scale[i];
        }

        DeviceBuf d_x(x, offset), d_bias(bias, offset), d_dout(dout, offset), d_y(Buf(dtype, n), offset),
            d_dx(Buf(dtype, n), offset), d_dbias(dbias0, offset);
        const size_t scratch_bytes = bias_gelu_backward_scratch_bytes(rows, cols);
        void* scratch = nullptr;
        CUDA_OK(cudaMalloc(&scratch, scratch_bytes));
        CUDA_OK(cudaMemset(scratch, 0xA5, scratch_bytes));
        ASSERT_TRUE(d_x.ok() && d_bias.ok() && d_dout.ok() && d_y.ok() && d_dx.ok() && d_dbias.ok());
        ASSERT_TRUE(bias_gelu_forward_cuda(d_y.ptr(), d_x.ptr(), d_bias.ptr(), rows, cols, dtype, nullptr).ok());
        ASSERT_TRUE(bias_gelu_backward_cuda(d_dx.ptr(), d_dbias.ptr(), d_dout.ptr(), d_x.ptr(), d_bias.ptr(),
                                            scratch, scratch_bytes, rows, cols, dtype, nullptr).ok());
        CUDA_OK(cudaDeviceSynchronize());
        Buf y(dtype, n), dx(dtype, n), dbias(dtype, cols);
        d_y.fetch(&y, what + " y");
        d_dx.fetch(&dx, what + " dx");
        d_dbias.fetch(&dbias, what + " dbias");
        expect_close(y, want_y, fwd_scale, what + " forward");
        expect_close(dx, want_dx, bwd_scale, what + " dx");
        for (int64_t c = 0; c < cols; ++c) {
          const double w = want_dbias.get(c);
          ASSERT_LE(std::fabs(dbias.get(c) - w),
                    round_tol(dtype) * std::fabs(w) + kMathTol * (col_scale[c] + std::fabs(dbias0.get(c))) +
                        abs_floor(dtype))
              << what << " dbias c=" << c;
        }

        // Rerun in place over a fresh copy of dout, from the same dbias start:
        // dx and dbias bit-identical to the first run.
        DeviceBuf d_dout2(dout, offset), d_dbias2(dbias0, offset);
        ASSERT_TRUE(d_dout2.ok() && d_dbias2.ok());
        ASSERT_TRUE(bias_gelu_backward_cuda(d_dout2.ptr(), d_dbias2.ptr(), d_dout2.ptr(), d_x.ptr(),
                                            d_bias.ptr(), scratch, scratch_bytes, rows, cols, dtype, nullptr)
                        .ok());
        ASSERT_TRUE(bias_gelu_forward_cuda(d_x.ptr(), d_x.ptr(), d_bias.ptr(), rows, cols, dtype, nullptr).ok());
        CUDA_OK(cudaDeviceSynchronize());
        Buf dx2(dtype, n), dbias2(dtype, cols), y2(dtype, n);
        d_dout2.fetch(&dx2, what + " dx in place");
        d_dbias2.fetch(&dbias2, what + " dbias rerun");
        d_x.fetch(&y2, what + " y in place");
        EXPECT_TRUE(dx2.same_bits(dx)) << what;
        EXPECT_TRUE(dbias2.same_bits(dbias)) << what;
        EXPECT_TRUE(y2.same_bits(y)) << what;
        CUDA_OK(cudaFree(scratch));
      }
    }
  }
#endif
}

// SwiGLU on the device against the CPU. The float32 sigmoid: the exp argument
// -|x| log2(e) is rounded (relative error ~|x| 2^-24 of e), ex2.approx (2^-22.5)
// and rcp.approx (2^-23), the sum 1 + e and the products (2^-24 each): below
// 1e-7 (|x| + 10) relative for silu(x) * up and dout * silu(x), and for dgate
// the same of the size of its terms |dout up| s (1 + |x| (1 - s)) (they cancel
// near x = -1.278). Then one output rounding on each side (round_tol). Below
// x = -87 the device's exp flushes to 0 where the CPU keeps a value under
// 1e-36 (abs_floor).
// (CUDA builds only.)
[[maybe_unused]] double swiglu_math_tol(double x) { return 1e-7 * (std::fabs(x) + 10.0); }

TEST(ActivationCudaTest, SwigluMatchesCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 4000;
  for (DType dtype : kCudaTypes) {
    for (int64_t n : kCudaSizes) {
      for (int64_t offset : {0, 1}) {
        const std::string what = label(dtype, n) + " offset " + std::to_string(offset);
        const Buf gate = swiglu_gate(dtype, n, seed++);
        const Buf up = Buf::random(dtype, n, seed++, -2.0f, 2.0f);
        const Buf dout = Buf::random(dtype, n, seed++, -2.0f, 2.0f);
        Buf want_y(dtype, n), want_dgate(dtype, n), want_dup(dtype, n);
        ASSERT_TRUE(swiglu_forward_cpu(want_y.data(), gate.data(), up.data(), n, dtype).ok());
        ASSERT_TRUE(swiglu_backward_cpu(want_dgate.data(), want_dup.data(), dout.data(), gate.data(), up.data(), n,
                                        dtype).ok());
        // expect_close multiplies its scale by kMathTol: pass tol / kMathTol.
        std::vector<double> y_scale(n), dgate_scale(n), dup_scale(n);
        for (int64_t i = 0; i < n; ++i) {
          const double x = gate.get(i), rel = swiglu_math_tol(x) / kMathTol;
          y_scale[i] = rel * std::fabs(want_y.get(i));
          dgate_scale[i] = rel * std::fabs(dout.get(i) * up.get(i)) * silu_grad_scale(x);
          dup_scale[i] = rel * std::fabs(want_dup.get(i));
        }
        DeviceBuf d_gate(gate, offset), d_up(up, offset), d_dout(dout, offset), d_y(Buf(dtype, n), offset),
            d_dgate(Buf(dtype, n), offset), d_dup(Buf(dtype, n), offset);
        ASSERT_TRUE(d_gate.ok() && d_up.ok() && d_dout.ok() && d_y.ok() && d_dgate.ok() && d_dup.ok());
        ASSERT_TRUE(swiglu_forward_cuda(d_y.ptr(), d_gate.ptr(), d_up.ptr(), n, dtype, nullptr).ok());
        ASSERT_TRUE(swiglu_backward_cuda(d_dgate.ptr(), d_dup.ptr(), d_dout.ptr(), d_gate.ptr(), d_up.ptr(), n,
                                         dtype, nullptr).ok());
        CUDA_OK(cudaDeviceSynchronize());
        Buf y(dtype, n), dgate(dtype, n), dup(dtype, n);
        d_y.fetch(&y, what + " y");
        d_dgate.fetch(&dgate, what + " dgate");
        d_dup.fetch(&dup, what + " dup");
        expect_close(y, want_y, y_scale, what + " forward");
        expect_close(dgate, want_dgate, dgate_scale, what + " dgate");
        expect_close(dup, want_dup, dup_scale, what + " dup");

        // In place: dgate over dout and dup over up, then the forward over gate
        // (with a fresh up): the same bits as out of place.
        ASSERT_TRUE(swiglu_backward_cuda(d_dout.ptr(), d_up.ptr(), d_dout.ptr(), d_gate.ptr(), d_up.ptr(), n,
                                         dtype, nullptr).ok());
        DeviceBuf d_up2(up, offset);
        ASSERT_TRUE(d_up2.ok());
        ASSERT_TRUE(swiglu_forward_cuda(d_gate.ptr(), d_gate.ptr(), d_up2.ptr(), n, dtype, nullptr).ok());
        CUDA_OK(cudaDeviceSynchronize());
        Buf dgate_inplace(dtype, n), dup_inplace(dtype, n), y_inplace(dtype, n);
        d_dout.fetch(&dgate_inplace, what + " dgate in place");
        d_up.fetch(&dup_inplace, what + " dup in place");
        d_gate.fetch(&y_inplace, what + " y in place");
        EXPECT_TRUE(dgate_inplace.same_bits(dgate)) << what;
        EXPECT_TRUE(dup_inplace.same_bits(dup)) << what;
        EXPECT_TRUE(y_inplace.same_bits(y)) << what;
      }
    }
  }
#endif
}

TEST(ActivationCudaTest, RejectsBadArguments) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  using Code = KernelStatus::Code;
  void* d = nullptr;
  CUDA_OK(cudaMalloc(&d, 1 << 16));
  char* p = static_cast<char*>(d);
  EXPECT_EQ(gelu_forward_cuda(nullptr, p, 4, DType::kF32, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(gelu_forward_cuda(p, p, -1, DType::kF32, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(gelu_forward_cuda(p, p, 4, DType::kF64, nullptr).code(), Code::kUnsupported);
  EXPECT_TRUE(gelu_forward_cuda(nullptr, nullptr, 0, DType::kF32, nullptr).ok());
  EXPECT_EQ(gelu_backward_cuda(p, nullptr, p, 4, DType::kF32, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(bias_gelu_forward_cuda(p, p, nullptr, 2, 2, DType::kF32, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(bias_gelu_forward_cuda(p, p, p, 2, 2, DType::kI32, nullptr).code(), Code::kUnsupported);
  const size_t need = bias_gelu_backward_scratch_bytes(100, 8);
  EXPECT_EQ(bias_gelu_backward_cuda(p, p, p, p, p, p, need - 4, 100, 8, DType::kF32, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(bias_gelu_backward_cuda(p, p, p, p, p, nullptr, need, 100, 8, DType::kF32, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(bias_gelu_backward_cuda(p, p, p, p, p, p + 4, need, 100, 8, DType::kF32, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(bias_gelu_backward_cuda(p, p, p, p, p, p, need, -1, 8, DType::kF32, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(bias_gelu_backward_cuda(p, p, p, p, p, p, need, 100, 8, DType::kF64, nullptr).code(),
            Code::kUnsupported);
  EXPECT_TRUE(bias_gelu_backward_cuda(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 8,
                                      DType::kF32, nullptr).ok());
  EXPECT_EQ(swiglu_forward_cuda(p, nullptr, p, 4, DType::kF32, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(swiglu_forward_cuda(p, p, p, -1, DType::kF32, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(swiglu_forward_cuda(p, p, p, 4, DType::kF64, nullptr).code(), Code::kUnsupported);
  EXPECT_EQ(swiglu_backward_cuda(p, nullptr, p, p, p, 4, DType::kF32, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(swiglu_backward_cuda(p, p, p, p, p, 4, DType::kI32, nullptr).code(), Code::kUnsupported);
  EXPECT_TRUE(swiglu_backward_cuda(nullptr, nullptr, nullptr, nullptr, nullptr, 0, DType::kF32, nullptr).ok());
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaFree(d));
#endif
}

}  // namespace
}  // namespace colossal::kernels::activation
