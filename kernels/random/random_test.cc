// kernels/random: Philox4x32-10 against the Random123 known-answer vectors,
// the fills against values from an independent model (a Python
// reimplementation of the stream and of the float32 arithmetic, values below),
// statistics of 1M samples, split-call equality, and CUDA == CPU bit for bit
// (memcmp, normals included: see random.h) with poisoned guard bands.
#include "kernels/random/random.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/common/half.h"
#include "kernels/random/philox.h"
#include "tests/util/gpu_test.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::random {
namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};
using Bytes = std::vector<uint8_t>;

enum class Dist { kUniform, kNormal };

// One fill on the CPU: uniform(lo = a, hi = b) or normal(mean = a, std = b).
KernelStatus fill_cpu(Dist d, void* out, double a, double b, uint64_t seed, uint64_t offset,
                      int64_t n, DType dtype) {
  return d == Dist::kUniform ? fill_uniform_cpu(out, a, b, seed, offset, n, dtype)
                             : fill_normal_cpu(out, a, b, seed, offset, n, dtype);
}

double value(DType dtype, const Bytes& bytes, int64_t i) {
  double v = 0;
  (void)dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    v = static_cast<double>(to_math(reinterpret_cast<const T*>(bytes.data())[i]));
    return KernelStatus();
  });
  return v;
}

// Random123's kat_vectors for philox4x32 with 10 rounds: counter, key, output.
TEST(PhiloxTest, KnownAnswerVectors) {
  struct Case {
    PhiloxBlock counter;
    uint32_t k0, k1;
    PhiloxBlock want;
  };
  const Case cases[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Case& c : cases) {
    const PhiloxBlock got = philox4x32_10(c.counter, c.k0, c.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.w[i], c.want.w[i]) << "word " << i;
  }
  // The stream mapping: block b is the counter {lo32(b), hi32(b), 0, 0} under key {lo32(seed), hi32(seed)}.
  const PhiloxBlock s = philox_stream_block(0xa4093822299f31d0ull, 0x85a308d3243f6a88ull);
  const PhiloxBlock d = philox4x32_10({{0x243f6a88, 0x85a308d3, 0, 0}}, 0x299f31d0, 0xa4093822);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(s.w[i], d.w[i]);
  EXPECT_EQ(uniform_float(0xffffffffu), 1.0f - std::ldexp(1.0f, -24));
  EXPECT_EQ(uniform_float(0x000000ffu), 0.0f);
}

// Values from the independent model (float32 bits), seed 0x0123456789abcdef,
// stream elements 5..12: uniform(-1, 3) and normal(0, 1).
TEST(RandomCpuTest, MatchesIndependentModel) {
  const uint32_t uniform_bits[8] = {0x3e91f068u, 0x3f150050u, 0x3fe533b4u, 0x4037ce29u,
                                    0x3f847996u, 0x3e7efe30u, 0xbf15c068u, 0x3fd860f0u};
  const uint32_t normal_bits[8] = {0x3f4b1becu, 0xbee139b3u, 0xbfa4ffafu, 0xbe8267feu,
                                   0xbc6564f7u, 0x3f9b3df9u, 0x3f6cfabau, 0xbf63fd1bu};
  uint32_t got[8];
  ASSERT_TRUE(fill_uniform_cpu(got, -1.0, 3.0, 0x0123456789abcdefull, 5, 8, DType::kF32).ok());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(got[i], uniform_bits[i]) << "uniform " << i;
  ASSERT_TRUE(fill_normal_cpu(got, 0.0, 1.0, 0x0123456789abcdefull, 5, 8, DType::kF32).ok());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(got[i], normal_bits[i]) << "normal " << i;
  // An offset past 2^32 blocks: the block's high word is counter word 1.
  const uint32_t far_bits[4] = {0x3f17537bu, 0x3f424b7cu, 0x3f3b55b2u, 0x3f09e5b3u};
  ASSERT_TRUE(fill_uniform_cpu(got, 0.0, 1.0, 0xfeedbeefull, (uint64_t{1} << 40) + 2, 4, DType::kF32).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], far_bits[i]) << "far " << i;
}

// Sample moments of 1M values against the distribution's, with bounds of about
// 5 standard errors of each estimate.
struct Moments {
  double mean = 0, var = 0, kurtosis = 0, min = INFINITY, max = -INFINITY;
};
Moments moments(DType dtype, const Bytes& x, int64_t n) {
  Moments m;
  for (int64_t i = 0; i < n; ++i) {
    const double v = value(dtype, x, i);
    m.mean += v;
    m.min = std::min(m.min, v);
    m.max = std::max(m.max, v);
  }
  m.mean /= n;
  double m4 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = value(dtype, x, i) - m.mean;
    m.var += d * d;
    m4 += d * d * d * d;
  }
  m.var /= n;
  m.kurtosis = m4 / n / (m.var * m.var);
  return m;
}

TEST(RandomCpuTest, UniformStatistics) {
  const int64_t n = 1 << 20;
  const double lo = -2.0, hi = 3.0, width = hi - lo;
  for (DType dtype : kTypes) {
    Bytes x(n * dtype_size(dtype));
    ASSERT_TRUE(fill_uniform_cpu(x.data(), lo, hi, 42, 0, n, dtype).ok());
    const Moments m = moments(dtype, x, n);
    const double sigma = width / std::sqrt(12.0);
    EXPECT_NEAR(m.mean, (lo + hi) / 2, 5 * sigma / std::sqrt(double(n))) << dtype_name(dtype);
    // Var of the sample variance: (mu4 - sigma^4) / n, mu4 = width^4 / 80.
    EXPECT_NEAR(m.var, sigma * sigma, 5 * std::sqrt((std::pow(width, 4) / 80 - std::pow(sigma, 4)) / n))
        << dtype_name(dtype);
    EXPECT_GE(m.min, lo);
    EXPECT_LE(m.max, hi);
    // 100 equal bins: chi-square with 99 degrees of freedom (mean 99, sd 14).
    if (dtype == DType::kF32 || dtype == DType::kF64) {
      std::vector<double> bins(100, 0);
      for (int64_t i = 0; i < n; ++i) bins[std::min(99, int((value(dtype, x, i) - lo) / width * 100))] += 1;
      double chi2 = 0;
      for (double b : bins) chi2 += (b - n / 100.0) * (b - n / 100.0) / (n / 100.0);
      EXPECT_LT(chi2, 99 + 6 * 14) << dtype_name(dtype);
    }
  }
}

TEST(RandomCpuTest, NormalStatistics) {
  const int64_t n = 1 << 20;
  for (DType dtype : kTypes) {
    Bytes x(n * dtype_size(dtype));
    ASSERT_TRUE(fill_normal_cpu(x.data(), 0.0, 1.0, 7, 0, n, dtype).ok());
    const Moments m = moments(dtype, x, n);
    EXPECT_NEAR(m.mean, 0.0, 5 / std::sqrt(double(n))) << dtype_name(dtype);
    EXPECT_NEAR(m.var, 1.0, 5 * std::sqrt(2.0 / n)) << dtype_name(dtype);
    EXPECT_NEAR(m.kurtosis, 3.0, 5 * std::sqrt(24.0 / n)) << dtype_name(dtype);
    EXPECT_LE(std::max(-m.min, m.max), 5.8);
    // Tails: P(|z| > 2) = 0.0455, P(|z| > 3) = 0.0027.
    int64_t over2 = 0, over3 = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double a = std::fabs(value(dtype, x, i));
      over2 += a > 2;
      over3 += a > 3;
    }
    EXPECT_NEAR(over2 / double(n), 0.0455, 5 * std::sqrt(0.0455 * 0.9545 / n)) << dtype_name(dtype);
    EXPECT_NEAR(over3 / double(n), 0.0027, 5 * std::sqrt(0.0027 * 0.9973 / n)) << dtype_name(dtype);
  }
  // mean and std are applied: N(1.5, 0.25^2).
  Bytes x(n * 4);
  ASSERT_TRUE(fill_normal_cpu(x.data(), 1.5, 0.25, 8, 0, n, DType::kF32).ok());
  const Moments m = moments(DType::kF32, x, n);
  EXPECT_NEAR(m.mean, 1.5, 5 * 0.25 / std::sqrt(double(n)));
  EXPECT_NEAR(m.var, 0.0625, 5 * 0.0625 * std::sqrt(2.0 / n));
}

// float64 outputs carry the float32 draws exactly: uniform(0, 1) and normal(0, 1)
// in float64 equal the float32 values widened.
TEST(RandomCpuTest, Float64CarriesTheFloat32Draws) {
  const int64_t n = 1001;
  for (Dist d : {Dist::kUniform, Dist::kNormal}) {
    std::vector<float> f(n);
    std::vector<double> g(n);
    ASSERT_TRUE(fill_cpu(d, f.data(), 0.0, 1.0, 5, 3, n, DType::kF32).ok());
    ASSERT_TRUE(fill_cpu(d, g.data(), 0.0, 1.0, 5, 3, n, DType::kF64).ok());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(g[i], static_cast<double>(f[i])) << i;
  }
}

TEST(RandomCpuTest, SplitCallsEqualOneCall) {
  const int64_t n = 1000;
  for (Dist d : {Dist::kUniform, Dist::kNormal}) {
    for (DType dtype : kTypes) {
      const size_t es = dtype_size(dtype);
      for (uint64_t base : {uint64_t{0}, uint64_t{3}, (uint64_t{1} << 34) + 1}) {
        Bytes whole(n * es);
        ASSERT_TRUE(fill_cpu(d, whole.data(), -1.0, 2.0, 99, base, n, dtype).ok());
        for (int64_t k : {0, 1, 3, 4, 5, 8, 500, 999, 1000}) {
          Bytes parts(n * es);
          testing::poison(parts.data(), parts.size());
          ASSERT_TRUE(fill_cpu(d, parts.data(), -1.0, 2.0, 99, base, k, dtype).ok());
          ASSERT_TRUE(fill_cpu(d, parts.data() + k * es, -1.0, 2.0, 99, base + k, n - k, dtype).ok());
          ASSERT_EQ(parts, whole) << dtype_name(dtype) << " base " << base << " split at " << k;
        }
      }
    }
  }
}

TEST(RandomCpuTest, SeedsAndOffsetsSelectDifferentValues) {
  float a[64], b[64];
  ASSERT_TRUE(fill_uniform_cpu(a, 0.0, 1.0, 1, 0, 64, DType::kF32).ok());
  ASSERT_TRUE(fill_uniform_cpu(b, 0.0, 1.0, 2, 0, 64, DType::kF32).ok());
  int same = 0;
  for (int i = 0; i < 64; ++i) same += a[i] == b[i];
  EXPECT_LT(same, 2);
  ASSERT_TRUE(fill_uniform_cpu(b, 0.0, 1.0, 1, 64, 64, DType::kF32).ok());
  same = 0;
  for (int i = 0; i < 64; ++i) same += a[i] == b[i];
  EXPECT_LT(same, 2);
  // The seed's high word matters too.
  ASSERT_TRUE(fill_uniform_cpu(b, 0.0, 1.0, 1 + (uint64_t{1} << 32), 0, 64, DType::kF32).ok());
  same = 0;
  for (int i = 0; i < 64; ++i) same += a[i] == b[i];
  EXPECT_LT(same, 2);
}

TEST(RandomCpuTest, RejectsBadArguments) {
  float x[4];
  constexpr auto kInvalid = KernelStatus::Code::kInvalidArgument;
  constexpr auto kUnsupported = KernelStatus::Code::kUnsupported;
  EXPECT_EQ(fill_uniform_cpu(nullptr, 0, 1, 1, 0, 4, DType::kF32).code(), kInvalid);
  EXPECT_EQ(fill_uniform_cpu(x, 0, 1, 1, 0, -4, DType::kF32).code(), kInvalid);
  EXPECT_EQ(fill_uniform_cpu(x, 2, 1, 1, 0, 4, DType::kF32).code(), kInvalid);
  EXPECT_EQ(fill_uniform_cpu(x, NAN, 1, 1, 0, 4, DType::kF32).code(), kInvalid);
  EXPECT_EQ(fill_uniform_cpu(x, -INFINITY, 1, 1, 0, 4, DType::kF32).code(), kInvalid);
  EXPECT_EQ(fill_uniform_cpu(x, 0, 1, 1, 0, 4, DType::kI32).code(), kUnsupported);
  EXPECT_EQ(fill_normal_cpu(x, 0, -1, 1, 0, 4, DType::kF32).code(), kInvalid);
  EXPECT_EQ(fill_normal_cpu(x, 0, NAN, 1, 0, 4, DType::kF32).code(), kInvalid);
  EXPECT_EQ(fill_normal_cpu(x, INFINITY, 1, 1, 0, 4, DType::kF32).code(), kInvalid);
  EXPECT_EQ(fill_normal_cpu(x, 0, 1, 1, 0, 4, DType::kU8).code(), kUnsupported);
  EXPECT_TRUE(fill_normal_cpu(nullptr, 0, 1, 1, 0, 0, DType::kF32).ok());
  EXPECT_TRUE(fill_uniform_cpu(x, 1, 1, 1, 0, 4, DType::kF32).ok());  // lo == hi
  EXPECT_EQ(x[3], 1.0f);
  EXPECT_TRUE(fill_normal_cpu(x, 2, 0, 1, 0, 4, DType::kF32).ok());  // std == 0
  EXPECT_EQ(x[1], 2.0f);
}

// ---- CUDA

#if COLOSSAL_WITH_CUDA
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

constexpr int64_t kGuard = 64;

// Fills n elements on the device at `shift` elements past a 256-byte aligned
// start, between poisoned guards; returns guards + data.
Bytes fill_cuda_guarded(Dist d, double a, double b, uint64_t seed, uint64_t offset, int64_t n,
                        DType dtype, int64_t shift) {
  const size_t es = dtype_size(dtype);
  Bytes host((n + 2 * kGuard) * es);
  testing::poison(host.data(), host.size());
  uint8_t* dev = nullptr;
  EXPECT_EQ(cudaMalloc(&dev, host.size() + shift * es), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dev + shift * es, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  uint8_t* out = dev + (shift + kGuard) * es;
  const KernelStatus s = d == Dist::kUniform ? fill_uniform_cuda(out, a, b, seed, offset, n, dtype, nullptr)
                                             : fill_normal_cuda(out, a, b, seed, offset, n, dtype, nullptr);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(cudaMemcpy(host.data(), dev + shift * es, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(dev);
  return host;
}

Bytes cpu_guarded(Dist d, double a, double b, uint64_t seed, uint64_t offset, int64_t n, DType dtype) {
  const size_t es = dtype_size(dtype);
  Bytes host((n + 2 * kGuard) * es);
  testing::poison(host.data(), host.size());
  EXPECT_TRUE(fill_cpu(d, host.data() + kGuard * es, a, b, seed, offset, n, dtype).ok());
  return host;
}
#endif

TEST(RandomCudaTest, MatchesCpuBitForBit) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  for (Dist d : {Dist::kUniform, Dist::kNormal}) {
    const double a = d == Dist::kUniform ? -0.5 : 0.25, b = d == Dist::kUniform ? 1.5 : 0.02;
    for (DType dtype : kTypes) {
      for (int64_t n : {1, 3, 7, 8, 9, 1000, 4097, (1 << 20) + 3}) {
        for (uint64_t offset : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{4},
                                uint64_t{5}, (uint64_t{1} << 36) + 6}) {
          for (int64_t shift : {0, 1}) {  // 1: not 16-byte aligned
            if (n > 4097 && (offset % 4 != 0 && offset != 1)) continue;  // keep the big case quick
            const Bytes gpu = fill_cuda_guarded(d, a, b, 1234567, offset, n, dtype, shift);
            const Bytes cpu = cpu_guarded(d, a, b, 1234567, offset, n, dtype);
            ASSERT_EQ(gpu, cpu) << (d == Dist::kUniform ? "uniform " : "normal ") << dtype_name(dtype)
                                << " n=" << n << " offset=" << offset << " shift=" << shift;
          }
        }
      }
    }
  }
#endif
}

TEST(RandomCudaTest, SplitCallsEqualOneCall) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const int64_t n = 100003;
  for (Dist d : {Dist::kUniform, Dist::kNormal}) {
    const size_t es = 4;
    float* dev = nullptr;
    CUDA_OK(cudaMalloc(&dev, 2 * n * es));
    auto fill = [&](float* out, uint64_t offset, int64_t count) {
      return d == Dist::kUniform ? fill_uniform_cuda(out, 0.0, 1.0, 77, offset, count, DType::kF32, nullptr)
                                 : fill_normal_cuda(out, 0.0, 1.0, 77, offset, count, DType::kF32, nullptr);
    };
    ASSERT_TRUE(fill(dev, 10, n).ok());
    for (int64_t k : {int64_t{1}, int64_t{4}, int64_t{4099}, n - 1}) {
      ASSERT_TRUE(fill(dev + n, 10, k).ok());
      ASSERT_TRUE(fill(dev + n + k, 10 + k, n - k).ok());
      std::vector<float> one(n), two(n);
      CUDA_OK(cudaMemcpy(one.data(), dev, n * es, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(two.data(), dev + n, n * es, cudaMemcpyDeviceToHost));
      ASSERT_EQ(std::memcmp(one.data(), two.data(), n * es), 0) << "split at " << k;
    }
    CUDA_OK(cudaFree(dev));
  }
#endif
}

TEST(RandomCudaTest, RejectsBadArguments) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  constexpr auto kInvalid = KernelStatus::Code::kInvalidArgument;
  constexpr auto kUnsupported = KernelStatus::Code::kUnsupported;
  float* d = nullptr;
  CUDA_OK(cudaMalloc(&d, 64));
  EXPECT_EQ(fill_uniform_cuda(nullptr, 0, 1, 1, 0, 4, DType::kF32, nullptr).code(), kInvalid);
  EXPECT_EQ(fill_uniform_cuda(d, 1, 0, 1, 0, 4, DType::kF32, nullptr).code(), kInvalid);
  EXPECT_EQ(fill_uniform_cuda(d, 0, 1, 1, 0, 4, DType::kI64, nullptr).code(), kUnsupported);
  EXPECT_EQ(fill_normal_cuda(d, 0, -2, 1, 0, 4, DType::kF32, nullptr).code(), kInvalid);
  EXPECT_EQ(fill_normal_cuda(d, 0, 1, 1, 0, -1, DType::kF32, nullptr).code(), kInvalid);
  EXPECT_TRUE(fill_normal_cuda(nullptr, 0, 1, 1, 0, 0, DType::kF32, nullptr).ok());
  CUDA_OK(cudaFree(d));
#endif
}

}  // namespace
}  // namespace colossal::kernels::random
