// exp_f64 against std::exp on fresh random arguments over the whole range a
// softmax feeds it (-745 .. 0 and a little above), odd lengths (the scalar
// tail), in place, and the special values. Tolerance: libmvec's exp is within
// 4 ulp, std::exp within 1, so 5 * 2^-52 relative; results that underflow to
// subnormals are compared with an absolute 2^-1074 * 8.
#include "kernels/common/vector_exp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace colossal::kernels {
namespace {

TEST(VectorExpTest, MatchesStdExp) {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> wide(-745.0, 5.0), narrow(-1.0, 1.0);
  for (int64_t n : {0, 1, 3, 4, 5, 7, 64, 257, 1000}) {
    std::vector<double> in(n), out(n, std::numeric_limits<double>::quiet_NaN());
    for (int64_t i = 0; i < n; ++i) in[i] = (i % 2) ? wide(rng) : narrow(rng);
    exp_f64(in.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double want = std::exp(in[i]);
      const double tol = 5 * std::ldexp(1.0, -52) * want + 8 * std::numeric_limits<double>::denorm_min();
      ASSERT_NEAR(out[i], want, tol) << "n=" << n << " x=" << in[i];
    }
  }
}

TEST(VectorExpTest, InPlaceAndSpecialValues) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> v = {0.0, -inf, inf, -1000.0, 1.0, -0.5, 709.0, -745.2};
  const std::vector<double> x = v;
  exp_f64(v.data(), v.data(), static_cast<int64_t>(v.size()));
  EXPECT_EQ(v[0], 1.0);
  EXPECT_EQ(v[1], 0.0);
  EXPECT_EQ(v[2], inf);
  EXPECT_EQ(v[3], 0.0);
  for (size_t i = 4; i < v.size(); ++i) EXPECT_NEAR(v[i], std::exp(x[i]), 5e-16 * std::exp(x[i]) + 1e-320) << x[i];
  std::vector<double> nan = {std::numeric_limits<double>::quiet_NaN(), 0, 0, 0, 0};
  exp_f64(nan.data(), nan.data(), 5);
  EXPECT_TRUE(std::isnan(nan[0]));
  EXPECT_EQ(nan[4], 1.0);
}

// max_f32: every length around the 8-wide blocks, the maximum anywhere, NaN
// flagged wherever it is.
TEST(VectorExpTest, MaxF32) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 10.0f);
  for (int64_t n : {1, 7, 8, 9, 16, 17, 1001}) {
    std::vector<float> x(n);
    for (float& v : x) v = normal(rng);
    for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
      std::vector<float> y = x;
      y[at] = 1e30f;
      bool nan = true;
      EXPECT_EQ(max_f32(y.data(), n, &nan), 1e30f) << n << " " << at;
      EXPECT_FALSE(nan);
      y[at] = std::numeric_limits<float>::quiet_NaN();
      max_f32(y.data(), n, &nan);
      EXPECT_TRUE(nan) << n << " " << at;
    }
  }
  bool nan = true;
  EXPECT_EQ(max_f32(nullptr, 0, &nan), -std::numeric_limits<float>::infinity());
  EXPECT_FALSE(nan);
}

// exp_shifted_sum_f32f against std::exp in long double: each e[i] within
// 4 ulp of expf (8 * 2^-24 relative) plus the rounding of x - shift to float32
// (|x - shift| * 2^-24), the sum within the largest of those plus n float64
// roundings (every term is positive: no cancellation).
TEST(VectorExpTest, ExpShiftedSumF32f) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (int64_t n : {1, 3, 7, 8, 9, 255, 1024, 50257}) {
    std::vector<float> x(n);
    for (float& v : x) v = normal(rng);
    const float shift = *std::max_element(x.begin(), x.end());
    std::vector<float> e(n, std::numeric_limits<float>::quiet_NaN());
    const double s = exp_shifted_sum_f32f(x.data(), n, shift, e.data());
    long double want_sum = 0, err_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const long double want = std::exp(static_cast<long double>(x[i]) - shift);
      const double rel = (8 + std::fabs(double{x[i]} - shift)) * 0x1p-24;
      want_sum += want;
      err_sum += rel * want;
      ASSERT_NEAR(e[i], static_cast<double>(want), rel * static_cast<double>(want))
          << "n=" << n << " i=" << i << " x=" << x[i];
    }
    const double tol = static_cast<double>(err_sum) + n * 0x1p-52 * static_cast<double>(want_sum);
    EXPECT_NEAR(s, static_cast<double>(want_sum), tol) << "n=" << n;
  }
}

// scale_to_f32 is one float64 product rounded once: bit-equal to the scalar
// expression for every element.
TEST(VectorExpTest, ScaleToF32RoundsOnce) {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t n : {1, 4, 5, 333}) {
    std::vector<double> e(n);
    for (double& v : e) v = u(rng);
    const double w = 0.37 / 3.3;
    std::vector<float> out(n, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> ef(e.begin(), e.end());
    scale_to_f32(ef.data(), n, w, out.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<float>(w * double{ef[i]})) << i;
  }
}

}  // namespace
}  // namespace colossal::kernels
