// kernels/dropout: the CPU reference against kernels/random's uniform stream,
// mask statistics, scaling, split calls; CUDA against the CPU bit for bit.
#include "kernels/dropout/dropout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/common/half.h"
#include "kernels/random/random.h"
#include "tests/util/gpu_test.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::dropout {
namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};
using Bytes = std::vector<uint8_t>;

size_t esize(DType dtype) { return dtype == DType::kF64 ? 8 : dtype == DType::kF32 ? 4 : 2; }

// Deterministic test input of n elements of `dtype` (values in [-2, 2)).
Bytes input(DType dtype, int64_t n) {
  Bytes b(static_cast<size_t>(n) * esize(dtype));
  EXPECT_TRUE(random::fill_uniform_cpu(b.data(), -2.0, 2.0, 99, 0, n, dtype).ok());
  return b;
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

TEST(DropoutCpuTest, ThresholdIsCeilOfP) {
  EXPECT_EQ(drop_threshold(0.0), 0u);
  EXPECT_EQ(drop_threshold(0.5), 1u << 23);
  EXPECT_EQ(drop_threshold(0.1), 1677722u);  // ceil(0.1 * 2^24) = ceil(1677721.6)
  EXPECT_EQ(drop_threshold(1.0 - 1e-9), 1u << 24);
}

// The mask is the uniform stream thresholded: dropped <=> u < t * 2^-24.
TEST(DropoutCpuTest, MaskIsTheUniformStreamThresholded) {
  const int64_t n = 10007;
  for (double p : {0.0, 0.1, 0.5, 0.9}) {
    for (uint64_t offset : {uint64_t{0}, uint64_t{3}, (uint64_t{1} << 40) + 5}) {
      std::vector<float> u(n);
      ASSERT_TRUE(random::fill_uniform_cpu(u.data(), 0.0, 1.0, 42, offset, n, DType::kF32).ok());
      std::vector<uint8_t> mask(n);
      ASSERT_TRUE(dropout_mask_cpu(mask.data(), p, 42, offset, n).ok());
      const double cut = drop_threshold(p) / 16777216.0;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(mask[i], static_cast<double>(u[i]) < cut ? 0 : 1) << "p=" << p << " i=" << i;
      }
    }
  }
}

// Fraction dropped within 5 standard deviations of the binomial mean.
TEST(DropoutCpuTest, FractionDroppedIsBinomial) {
  const int64_t n = 1 << 20;
  std::vector<uint8_t> mask(n);
  for (double p : {0.01, 0.1, 0.3, 0.5, 0.9}) {
    ASSERT_TRUE(dropout_mask_cpu(mask.data(), p, 2024, 17, n).ok());
    int64_t dropped = 0;
    for (uint8_t m : mask) dropped += m == 0;
    const double sd = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(static_cast<double>(dropped), n * p, 5 * sd) << "p=" << p;
  }
}

TEST(DropoutCpuTest, KeptElementsAreScaledDroppedAreZero) {
  const int64_t n = 4099;
  const double p = 0.25;
  std::vector<uint8_t> mask(n);
  ASSERT_TRUE(dropout_mask_cpu(mask.data(), p, 7, 11, n).ok());
  for (DType dtype : kTypes) {
    const Bytes x = input(dtype, n);
    Bytes y(x.size());
    ASSERT_TRUE(dropout_cpu(y.data(), x.data(), p, 7, 11, n, dtype).ok());
    for (int64_t i = 0; i < n; ++i) {
      if (mask[i] == 0) {
        ASSERT_EQ(value(dtype, y, i), 0.0);
      } else {
        const double want = value(dtype, x, i) / (1 - p);
        const double tol = dtype == DType::kF64 ? 1e-15 : dtype == DType::kF32 ? 1e-6 : 1e-2;
        ASSERT_NEAR(value(dtype, y, i), want, tol * std::fabs(want) + 1e-30) << i;
      }
    }
  }
}

TEST(DropoutCpuTest, PZeroIsTheIdentityAndInPlaceWorks) {
  const int64_t n = 1001;
  for (DType dtype : kTypes) {
    const Bytes x = input(dtype, n);
    Bytes y(x.size());
    ASSERT_TRUE(dropout_cpu(y.data(), x.data(), 0.0, 5, 0, n, dtype).ok());
    EXPECT_EQ(y, x);
    Bytes z = x, w(x.size());
    ASSERT_TRUE(dropout_cpu(z.data(), z.data(), 0.4, 5, 9, n, dtype).ok());
    ASSERT_TRUE(dropout_cpu(w.data(), x.data(), 0.4, 5, 9, n, dtype).ok());
    EXPECT_EQ(z, w);
  }
}

TEST(DropoutCpuTest, SplitCallsEqualOneCallAndOffsetsDiffer) {
  const int64_t n = 5003;
  const Bytes x = input(DType::kF32, n);
  Bytes one(x.size()), two(x.size()), other(x.size());
  ASSERT_TRUE(dropout_cpu(one.data(), x.data(), 0.3, 1, 10, n, DType::kF32).ok());
  for (int64_t k : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{1001}}) {
    ASSERT_TRUE(dropout_cpu(two.data(), x.data(), 0.3, 1, 10, k, DType::kF32).ok());
    ASSERT_TRUE(dropout_cpu(two.data() + 4 * k, x.data() + 4 * k, 0.3, 1, 10 + k, n - k,
                            DType::kF32)
                    .ok());
    EXPECT_EQ(one, two) << "split at " << k;
  }
  ASSERT_TRUE(dropout_cpu(other.data(), x.data(), 0.3, 1, 10 + n, n, DType::kF32).ok());
  EXPECT_NE(one, other);
  ASSERT_TRUE(dropout_cpu(other.data(), x.data(), 0.3, 2, 10, n, DType::kF32).ok());
  EXPECT_NE(one, other);
}

TEST(DropoutCpuTest, RejectsBadArguments) {
  float x[4] = {1, 2, 3, 4}, y[4];
  uint8_t m[4];
  EXPECT_FALSE(dropout_cpu(y, x, 1.0, 0, 0, 4, DType::kF32).ok());
  EXPECT_FALSE(dropout_cpu(y, x, -0.1, 0, 0, 4, DType::kF32).ok());
  EXPECT_FALSE(dropout_cpu(y, x, std::nan(""), 0, 0, 4, DType::kF32).ok());
  EXPECT_FALSE(dropout_cpu(y, x, 0.1, 0, 0, -1, DType::kF32).ok());
  EXPECT_FALSE(dropout_cpu(nullptr, x, 0.1, 0, 0, 4, DType::kF32).ok());
  EXPECT_FALSE(dropout_cpu(y, x, 0.1, 0, 0, 4, DType::kI32).ok());
  EXPECT_FALSE(dropout_mask_cpu(m, 1.5, 0, 0, 4).ok());
  EXPECT_TRUE(dropout_cpu(nullptr, nullptr, 0.1, 0, 0, 0, DType::kF32).ok());
}

#if COLOSSAL_WITH_CUDA
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess)
#endif

TEST(DropoutCudaTest, MatchesCpuBitForBit) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  for (DType dtype : kTypes) {
    for (int64_t n : {1, 3, 7, 8, 9, 1000, 4097, (1 << 20) + 3}) {
      // Offsets that are multiples of 4 take the vector kernel (with an
      // element-wise tail when n % 8 != 0); the others the element-wise one.
      for (uint64_t offset : {uint64_t{0}, uint64_t{1}, uint64_t{3}, uint64_t{4}, uint64_t{6},
                              uint64_t{8}, (uint64_t{1} << 36) + 4, (uint64_t{1} << 36) + 5}) {
        for (double p : {0.0, 0.1, 0.5}) {
          const size_t bytes = static_cast<size_t>(n) * esize(dtype);
          const Bytes x = input(dtype, n);
          Bytes cpu(bytes), gpu(bytes);
          ASSERT_TRUE(dropout_cpu(cpu.data(), x.data(), p, 31337, offset, n, dtype).ok());
          void *dx = nullptr, *dy = nullptr;
          CUDA_OK(cudaMalloc(&dx, bytes));
          CUDA_OK(cudaMalloc(&dy, bytes));
          CUDA_OK(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice));
          CUDA_OK(cudaMemset(dy, 0xff, bytes));  // poisoned: every element must be written
          ASSERT_TRUE(dropout_cuda(dy, dx, p, 31337, offset, n, dtype, nullptr).ok());
          CUDA_OK(cudaMemcpy(gpu.data(), dy, bytes, cudaMemcpyDeviceToHost));
          CUDA_OK(cudaFree(dx));
          CUDA_OK(cudaFree(dy));
          ASSERT_EQ(std::memcmp(cpu.data(), gpu.data(), bytes), 0)
              << "dtype " << static_cast<int>(dtype) << " n=" << n << " offset=" << offset
              << " p=" << p;
        }
      }
    }
  }
#endif
}

// Buffers off the 16-byte boundary (a slice one element in) take the
// element-wise kernel; in place (out == in) the vector one: both equal the CPU.
TEST(DropoutCudaTest, MisalignedAndInPlaceMatchCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  for (DType dtype : kTypes) {
    const int64_t n = 4099;
    const size_t es = esize(dtype), bytes = static_cast<size_t>(n) * es;
    const Bytes x = input(dtype, n);
    Bytes cpu(bytes), gpu(bytes);
    ASSERT_TRUE(dropout_cpu(cpu.data(), x.data(), 0.3, 77, 8, n, dtype).ok());
    char* d = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&d), 2 * bytes + 2 * es));
    char* dx = d + es;              // one element past an aligned start
    char* dy = d + bytes + 2 * es;  // likewise, after it
    CUDA_OK(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(dy, 0xff, bytes));
    ASSERT_TRUE(dropout_cuda(dy, dx, 0.3, 77, 8, n, dtype, nullptr).ok());
    CUDA_OK(cudaMemcpy(gpu.data(), dy, bytes, cudaMemcpyDeviceToHost));
    EXPECT_EQ(std::memcmp(cpu.data(), gpu.data(), bytes), 0) << "misaligned, dtype " << static_cast<int>(dtype);
    CUDA_OK(cudaMemcpy(d, x.data(), bytes, cudaMemcpyHostToDevice));  // aligned, in place
    ASSERT_TRUE(dropout_cuda(d, d, 0.3, 77, 8, n, dtype, nullptr).ok());
    CUDA_OK(cudaMemcpy(gpu.data(), d, bytes, cudaMemcpyDeviceToHost));
    EXPECT_EQ(std::memcmp(cpu.data(), gpu.data(), bytes), 0) << "in place, dtype " << static_cast<int>(dtype);
    CUDA_OK(cudaFree(d));
  }
#endif
}

TEST(DropoutCudaTest, MaskMatchesCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  for (int64_t n : {1, 5, 4096, 100003}) {
    for (uint64_t offset : {uint64_t{0}, uint64_t{2}, uint64_t{7}}) {
      std::vector<uint8_t> cpu(n), gpu(n);
      ASSERT_TRUE(dropout_mask_cpu(cpu.data(), 0.2, 9, offset, n).ok());
      uint8_t* d = nullptr;
      CUDA_OK(cudaMalloc(&d, n));
      ASSERT_TRUE(dropout_mask_cuda(d, 0.2, 9, offset, n, nullptr).ok());
      CUDA_OK(cudaMemcpy(gpu.data(), d, n, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaFree(d));
      ASSERT_EQ(cpu, gpu) << "n=" << n << " offset=" << offset;
    }
  }
#endif
}

}  // namespace
}  // namespace colossal::kernels::dropout
