// reduce_into: the CPU path against a float64 reference, the CUDA path against
// the CPU path bit for bit, on fresh random data of many sizes and alignments.
#include "kernels/reduce/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/common/half.h"
#include "tests/util/gpu_test.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::reduce {
namespace {

constexpr DType kAllTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64,
                               DType::kI32, DType::kI64, DType::kU8,  DType::kU16};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin};

// n random elements of `dtype` as raw bytes: floats in [-2, 2), integers small
// enough that sums and products of two stay exact.
std::vector<uint8_t> random_buffer(DType dtype, int64_t n, uint32_t seed) {
  std::vector<uint8_t> bytes(n * dtype_size(dtype));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> real(-2.0, 2.0);
  std::uniform_int_distribution<int> small(0, 200);
  const KernelStatus s = dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(bytes.data());
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        p[i] = from_float<T>(static_cast<float>(real(rng)));
      } else if constexpr (std::is_floating_point_v<T>) {
        p[i] = static_cast<T>(real(rng));
      } else {
        p[i] = static_cast<T>(std::is_signed_v<T> ? small(rng) - 100 : small(rng) / 16);
      }
    }
    return KernelStatus();
  });
  EXPECT_TRUE(s.ok());
  return bytes;
}

double element(DType dtype, const std::vector<uint8_t>& bytes, int64_t i) {
  double v = 0;
  (void)dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    v = static_cast<double>(to_math(reinterpret_cast<const T*>(bytes.data())[i]));
    return KernelStatus();
  });
  return v;
}

double reference(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kSum: return a + b;
    case ReduceOp::kProd: return a * b;
    case ReduceOp::kMax: return std::max(a, b);
    case ReduceOp::kMin: return std::min(a, b);
  }
  return 0;
}

// Relative tolerance of one rounding to the output dtype (half an ulp, doubled).
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 1.2e-7;
    case DType::kF16: return 1.0e-3;
    case DType::kBF16: return 7.9e-3;
    case DType::kF64: return 2.3e-16;
    default: return 0;  // integers are exact
  }
}

std::string label(DType dtype, ReduceOp op, int64_t n) {
  return std::string(dtype_name(dtype)) + "/" + reduce_op_name(op) + "/n=" + std::to_string(n);
}

TEST(ReduceCpuTest, MatchesFloat64Reference) {
  uint32_t seed = 1;
  for (DType dtype : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (int64_t n : {1, 7, 1000, 4099}) {
        auto dst = random_buffer(dtype, n, seed++);
        const auto src = random_buffer(dtype, n, seed++);
        const auto before = dst;
        ASSERT_TRUE(reduce_into_cpu(dst.data(), src.data(), n, dtype, op).ok());
        for (int64_t i = 0; i < n; ++i) {
          const double want = reference(op, element(dtype, before, i), element(dtype, src, i));
          const double got = element(dtype, dst, i);
          ASSERT_LE(std::fabs(got - want), tolerance(dtype) * std::fabs(want))
              << label(dtype, op, n) << " i=" << i;
        }
      }
    }
  }
}

TEST(ReduceCpuTest, MaxAndMinPropagateNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
    float dst[3] = {nan, 1.0f, 2.0f};
    const float src[3] = {1.0f, nan, 3.0f};
    ASSERT_TRUE(reduce_into_cpu(dst, src, 3, DType::kF32, op).ok());
    EXPECT_TRUE(std::isnan(dst[0]));
    EXPECT_TRUE(std::isnan(dst[1]));
    EXPECT_EQ(dst[2], op == ReduceOp::kMax ? 3.0f : 2.0f);
  }
}

TEST(ReduceCpuTest, RejectsBadArguments) {
  float x = 1.0f;
  EXPECT_EQ(reduce_into_cpu(nullptr, &x, 1, DType::kF32, ReduceOp::kSum).code(),
            KernelStatus::Code::kInvalidArgument);
  EXPECT_EQ(reduce_into_cpu(&x, &x, -1, DType::kF32, ReduceOp::kSum).code(),
            KernelStatus::Code::kInvalidArgument);
  EXPECT_TRUE(reduce_into_cpu(nullptr, nullptr, 0, DType::kF32, ReduceOp::kSum).ok());
  EXPECT_EQ(reduce_into_cpu(&x, &x, 1, DType::kF32, static_cast<ReduceOp>(99)).code(),
            KernelStatus::Code::kInvalidArgument);
}

#if COLOSSAL_WITH_CUDA
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr
#endif

// Every dtype, op, odd sizes and misaligned starts; guard bands around dst
// must stay poisoned, and the result must equal the CPU path bit for bit.
TEST(ReduceCudaTest, MatchesCpuBitForBit) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  constexpr int64_t kGuard = 64;
  uint32_t seed = 100;
  for (DType dtype : kAllTypes) {
    const size_t es = dtype_size(dtype);
    for (ReduceOp op : kAllOps) {
      for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{9}, int64_t{1000},
                        int64_t{4097}, int64_t{(1 << 20) + 13}}) {
        for (int64_t offset : {0, 1}) {
          const auto dst = random_buffer(dtype, n, seed++);
          const auto src = random_buffer(dtype, n, seed++);
          const size_t total = (n + 2 * kGuard) * es;
          std::vector<uint8_t> guarded(total);
          testing::poison(guarded.data(), total);
          std::memcpy(guarded.data() + (kGuard + offset) * es, dst.data(), n * es);
          uint8_t *d_dst = nullptr, *d_src = nullptr;
          CUDA_OK(cudaMalloc(&d_dst, total));
          CUDA_OK(cudaMalloc(&d_src, (n + 1) * es));
          CUDA_OK(cudaMemcpy(d_dst, guarded.data(), total, cudaMemcpyHostToDevice));
          CUDA_OK(cudaMemcpy(d_src + offset * es, src.data(), n * es, cudaMemcpyHostToDevice));
          ASSERT_TRUE(reduce_into_cuda(d_dst + (kGuard + offset) * es, d_src + offset * es, n,
                                       dtype, op, nullptr)
                          .ok());
          std::vector<uint8_t> got(total);
          CUDA_OK(cudaMemcpy(got.data(), d_dst, total, cudaMemcpyDeviceToHost));
          CUDA_OK(cudaFree(d_dst));
          CUDA_OK(cudaFree(d_src));

          std::vector<uint8_t> want = guarded;
          ASSERT_TRUE(reduce_into_cpu(want.data() + (kGuard + offset) * es, src.data(), n, dtype, op)
                          .ok());
          ASSERT_EQ(std::memcmp(got.data(), want.data(), total), 0)
              << label(dtype, op, n) << " offset=" << offset;
        }
      }
    }
  }
#endif
}

TEST(ReduceCudaTest, RejectsBadArguments) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  EXPECT_EQ(reduce_into_cuda(nullptr, nullptr, 5, DType::kF32, ReduceOp::kSum, nullptr).code(),
            KernelStatus::Code::kInvalidArgument);
  EXPECT_TRUE(reduce_into_cuda(nullptr, nullptr, 0, DType::kF32, ReduceOp::kSum, nullptr).ok());
#endif
}

}  // namespace
}  // namespace colossal::kernels::reduce
