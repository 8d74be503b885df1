// kernels/reduction: the CPU path against a long double reference, the CUDA
// path against the CPU path, on fresh random data in every CUDA work split
// (thread, warp, block per row; rows split over blocks through scratch).
//
// Tolerances (u = 2^-24 for float32 accumulation, 2^-53 for float64; the
// output rounding e_out = 2^-24 float32, 2^-11 float16, 2^-8 bfloat16, 2^-53
// float64, relative):
//   * CPU vs exact: |got - exact| <= u * depth * sum|x| + e_out * |exact|, the
//     worst-case bound of the CPU's order, depth = min(cols, 1024) / 8 + 3 +
//     log2(cols / 1024) + 1 additions on any path to the result.
//   * CUDA vs CPU on zero-mean data (uniform in [-1, 1)): the two orders
//     differ, and rounding errors of a sum of cols such terms grow like
//     u * sqrt(cols) (a random walk), so |gpu - cpu| <= 32 * u * sqrt(cols) *
//     max|x| + 2 * e_out * |cpu| (more than 10 standard deviations of that
//     walk; one missed element, |x| ~ 0.5, is far outside it). Mean: divided
//     by cols.
//   * CUDA full reductions of positive data (where partial sums grow like k,
//     not sqrt(k)): |gpu - exact| <= 2e-5 * sum|x| (about 170 u, the GPU's
//     worst-case depth with margin).
//   * max: exact, and CUDA equals CPU bit for bit (NaN canonical).
#include "kernels/reduction/reduction.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/common/half.h"
#include "tests/util/gpu_test.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::reduction {
namespace {

constexpr DType kInTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};
constexpr RowReduceOp kOps[] = {RowReduceOp::kSum, RowReduceOp::kMean, RowReduceOp::kMax};

using Bytes = std::vector<uint8_t>;
using Shape = std::pair<int64_t, int64_t>;  // rows, cols

// rows * cols random values of `dtype`, uniform in [lo, hi).
Bytes random_matrix(DType dtype, int64_t count, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  Bytes bytes(count * dtype_size(dtype));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  (void)dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(bytes.data());
    for (int64_t i = 0; i < count; ++i) {
      if constexpr (std::is_same_v<T, double>) {
        p[i] = dist(rng);
      } else {
        p[i] = from_math<T>(static_cast<float>(dist(rng)));
      }
    }
    return KernelStatus();
  });
  return bytes;
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

double unit_roundoff(DType in) { return in == DType::kF64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24); }

// Half the spacing of float16 subnormals (other outputs never get that small here).
double out_abs(DType out) { return out == DType::kF16 ? std::ldexp(1.0, -25) : 1e-300; }

double out_rounding(DType out) {
  switch (out) {
    case DType::kF16: return std::ldexp(1.0, -11);
    case DType::kBF16: return std::ldexp(1.0, -8);
    case DType::kF64: return std::ldexp(1.0, -53);
    default: return std::ldexp(1.0, -24);
  }
}

struct RowStats {
  long double sum = 0;  // exact enough: long double over at most ~1e8 terms of |x| < 2
  double abs_sum = 0;
  double max = -INFINITY;
  double max_abs = 0;
};

std::vector<RowStats> row_stats(DType dtype, const Bytes& x, int64_t rows, int64_t cols) {
  std::vector<RowStats> stats(rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const double v = value(dtype, x, r * cols + c);
      stats[r].sum += v;
      stats[r].abs_sum += std::fabs(v);
      stats[r].max = std::max(stats[r].max, v);
      stats[r].max_abs = std::max(stats[r].max_abs, std::fabs(v));
    }
  }
  return stats;
}

std::string label(DType out, DType in, RowReduceOp op, Shape s) {
  return std::string(dtype_name(in)) + "->" + dtype_name(out) + "/" + row_reduce_op_name(op) + "/[" +
         std::to_string(s.first) + "," + std::to_string(s.second) + "]";
}

TEST(ReductionCpuTest, MatchesReference) {
  const Shape shapes[] = {{1, 1},   {3, 17},      {17, 1000},       {5, 4097},
                          {1000, 3}, {2, 100003}, {1, (1 << 20) + 7}};
  uint32_t seed = 1;
  for (DType in : kInTypes) {
    for (DType out : {DType::kF32, in}) {
      for (RowReduceOp op : kOps) {
        for (const Shape& s : shapes) {
          const auto [rows, cols] = s;
          const Bytes x = random_matrix(in, rows * cols, seed++);
          Bytes got(rows * dtype_size(out));
          testing::poison(got.data(), got.size());
          ASSERT_TRUE(reduce_rows_cpu(got.data(), x.data(), rows, cols, out, in, op).ok());
          const auto stats = row_stats(in, x, rows, cols);
          const double blocks = std::ceil(cols / 1024.0);
          const double depth = std::min<double>(cols, 1024) / 8 + 3 + std::ceil(std::log2(blocks)) + 1;
          for (int64_t r = 0; r < rows; ++r) {
            const double g = value(out, got, r);
            if (op == RowReduceOp::kMax) {
              // Exact, then rounded once to the output (only float64 -> float32 rounds).
              const double want = out == DType::kF32 ? static_cast<float>(stats[r].max) : stats[r].max;
              ASSERT_EQ(g, want) << label(out, in, op, s) << " row " << r;
              continue;
            }
            const double scale = op == RowReduceOp::kMean ? 1.0 / cols : 1.0;
            const double want = static_cast<double>(stats[r].sum) * scale;
            const double tol = unit_roundoff(in) * depth * stats[r].abs_sum * scale +
                               out_rounding(out) * std::fabs(want) + out_abs(out);
            ASSERT_LE(std::fabs(g - want), tol) << label(out, in, op, s) << " row " << r;
          }
        }
      }
    }
  }
}

TEST(ReductionCpuTest, NanAndEmptyRows) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float x[6] = {1.0f, nan, 3.0f, inf, -inf, 2.0f};  // rows [1, nan, 3] and [inf, -inf, 2]
  float out[2];
  uint32_t bits[2];
  ASSERT_TRUE(reduce_rows_cpu(out, x, 2, 3, DType::kF32, DType::kF32, RowReduceOp::kMax).ok());
  std::memcpy(bits, out, 8);
  EXPECT_EQ(bits[0], 0x7fffffffu);  // NaN propagates, canonical
  EXPECT_EQ(out[1], inf);
  ASSERT_TRUE(reduce_rows_cpu(out, x, 2, 3, DType::kF32, DType::kF32, RowReduceOp::kSum).ok());
  std::memcpy(bits, out, 8);
  EXPECT_EQ(bits[0], 0x7fffffffu);
  EXPECT_EQ(bits[1], 0x7fffffffu);  // inf + -inf
  Half h[2];
  ASSERT_TRUE(reduce_rows_cpu(h, nullptr, 2, 0, DType::kF16, DType::kF16, RowReduceOp::kSum).ok());
  EXPECT_EQ(h[0].bits, 0);
  ASSERT_TRUE(reduce_rows_cpu(h, nullptr, 2, 0, DType::kF16, DType::kF16, RowReduceOp::kMean).ok());
  EXPECT_EQ(h[1].bits, 0x7fff);  // 0 / 0
  EXPECT_EQ(reduce_rows_cpu(h, nullptr, 2, 0, DType::kF16, DType::kF16, RowReduceOp::kMax).code(),
            KernelStatus::Code::kInvalidArgument);
}

TEST(ReductionCpuTest, RejectsBadArguments) {
  float x[4] = {1, 2, 3, 4}, out[2];
  constexpr auto kInvalid = KernelStatus::Code::kInvalidArgument;
  constexpr auto kUnsupported = KernelStatus::Code::kUnsupported;
  EXPECT_EQ(reduce_rows_cpu(nullptr, x, 2, 2, DType::kF32, DType::kF32, RowReduceOp::kSum).code(), kInvalid);
  EXPECT_EQ(reduce_rows_cpu(out, nullptr, 2, 2, DType::kF32, DType::kF32, RowReduceOp::kSum).code(), kInvalid);
  EXPECT_EQ(reduce_rows_cpu(out, x, -1, 2, DType::kF32, DType::kF32, RowReduceOp::kSum).code(), kInvalid);
  EXPECT_EQ(reduce_rows_cpu(out, x, 2, -2, DType::kF32, DType::kF32, RowReduceOp::kSum).code(), kInvalid);
  EXPECT_EQ(reduce_rows_cpu(out, x, 2, 2, DType::kF32, DType::kF32, static_cast<RowReduceOp>(7)).code(),
            kInvalid);
  EXPECT_EQ(reduce_rows_cpu(out, x, 2, 2, DType::kF32, DType::kI32, RowReduceOp::kSum).code(), kUnsupported);
  EXPECT_EQ(reduce_rows_cpu(out, x, 1, 2, DType::kF64, DType::kF32, RowReduceOp::kSum).code(), kUnsupported);
  EXPECT_EQ(reduce_rows_cpu(out, x, 1, 2, DType::kF16, DType::kBF16, RowReduceOp::kSum).code(), kUnsupported);
  EXPECT_TRUE(reduce_rows_cpu(nullptr, nullptr, 0, 5, DType::kF32, DType::kF32, RowReduceOp::kSum).ok());
}

TEST(ReductionPlanTest, ScratchBytes) {
  // One-kernel shapes need none.
  EXPECT_EQ(reduce_rows_scratch_bytes(8192, 4096, DType::kF32), 0);
  EXPECT_EQ(reduce_rows_scratch_bytes(1, 1000, DType::kBF16), 0);
  EXPECT_EQ(reduce_rows_scratch_bytes(0, 1 << 30, DType::kF32), 0);
  EXPECT_EQ(reduce_rows_scratch_bytes(-1, 5, DType::kF32), -1);
  // A full reduction of 100M elements is split over many blocks (at least
  // 4 per SM of a 132-SM H100), one float partial each.
  const int64_t full = reduce_rows_scratch_bytes(1, 100000000, DType::kF32);
  EXPECT_GE(full / 4, 512);
  EXPECT_EQ(full % 4, 0);
  EXPECT_EQ(reduce_rows_scratch_bytes(1, 100000000, DType::kF64), 2 * full);
  EXPECT_EQ(reduce_rows_scratch_bytes(3, 100000000, DType::kF16) % (3 * 4), 0);
}

// ---- CUDA

#if COLOSSAL_WITH_CUDA
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// Runs reduce_rows_cuda on host data `x` placed `offset` elements into a
// device allocation, with a poisoned guard element after the output; returns
// the output bytes, or an empty vector on failure (after a test failure).
Bytes run_cuda(const Bytes& x, int64_t rows, int64_t cols, DType out, DType in, RowReduceOp op,
               int64_t offset) {
  const size_t es = dtype_size(in), os = dtype_size(out);
  uint8_t *d_in = nullptr, *d_out = nullptr;
  void* scratch = nullptr;
  const int64_t scratch_bytes = reduce_rows_scratch_bytes(rows, cols, in);
  EXPECT_GE(scratch_bytes, 0);
  Bytes guarded((rows + 1) * os);
  testing::poison(guarded.data(), guarded.size());
  bool ok = cudaMalloc(&d_in, x.size() + (offset + 1) * es) == cudaSuccess &&
            cudaMalloc(&d_out, guarded.size()) == cudaSuccess &&
            (scratch_bytes == 0 || cudaMalloc(&scratch, scratch_bytes) == cudaSuccess) &&
            cudaMemcpy(d_in + offset * es, x.data(), x.size(), cudaMemcpyHostToDevice) == cudaSuccess &&
            cudaMemcpy(d_out, guarded.data(), guarded.size(), cudaMemcpyHostToDevice) == cudaSuccess;
  EXPECT_TRUE(ok) << "cuda setup";
  if (scratch != nullptr) {
    ok = ok && cudaMemset(scratch, 0xA5, scratch_bytes) == cudaSuccess;  // poison the partials
  }
  const KernelStatus s =
      reduce_rows_cuda(d_out, d_in + offset * es, scratch, scratch_bytes, rows, cols, out, in, op, nullptr);
  EXPECT_TRUE(s.ok()) << s.message();
  Bytes got(guarded.size());
  ok = ok && s.ok() && cudaMemcpy(got.data(), d_out, got.size(), cudaMemcpyDeviceToHost) == cudaSuccess;
  EXPECT_TRUE(ok) << "cuda run";
  cudaFree(d_in);
  cudaFree(d_out);
  cudaFree(scratch);
  if (!ok) return {};
  EXPECT_EQ(std::memcmp(got.data() + rows * os, guarded.data() + rows * os, os), 0) << "guard overwritten";
  got.resize(rows * os);
  return got;
}
#endif

// Shapes covering each CUDA path: thread per row (cols <= 32), warp per row
// (<= 1024), block per row, and rows split over blocks.
constexpr Shape kCudaShapes[] = {{1, 1},    {1000, 3},  {77, 32},    {513, 33},  {100, 1000},
                                 {3, 1024}, {64, 4097}, {2048, 1025}, {7, 100000}, {1, (1 << 20) + 3},
                                 {3, 5000003}};

TEST(ReductionCudaTest, MatchesCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 100;
  for (DType in : kInTypes) {
    for (DType out : {DType::kF32, in}) {
      for (RowReduceOp op : kOps) {
        for (const Shape& s : kCudaShapes) {
          const auto [rows, cols] = s;
          // Large shapes once per dtype and op, to keep the test quick.
          if (rows * cols > (1 << 22) && out != DType::kF32) continue;
          for (int64_t offset : {0, 1}) {  // 1: rows start off 16-byte boundaries
            const Bytes x = random_matrix(in, rows * cols, seed++);
            const Bytes gpu = run_cuda(x, rows, cols, out, in, op, offset);
            ASSERT_FALSE(gpu.empty());
            Bytes cpu(rows * dtype_size(out));
            ASSERT_TRUE(reduce_rows_cpu(cpu.data(), x.data(), rows, cols, out, in, op).ok());
            if (op == RowReduceOp::kMax) {
              ASSERT_EQ(gpu, cpu) << label(out, in, op, s);
              continue;
            }
            const double scale = op == RowReduceOp::kMean ? 1.0 / cols : 1.0;
            for (int64_t r = 0; r < rows; ++r) {
              const double g = value(out, gpu, r), c = value(out, cpu, r);
              const double tol = 32 * unit_roundoff(in) * std::sqrt(double(cols)) * scale +
                                 2 * out_rounding(out) * std::fabs(c) + 2 * out_abs(out);
              ASSERT_LE(std::fabs(g - c), tol) << label(out, in, op, s) << " row " << r << " offset " << offset;
            }
          }
        }
      }
    }
  }
#endif
}

// The full reduction: one row of 100M float32, positive values, many
// blocks through scratch; against the exact sum, and reproducible bit for bit.
TEST(ReductionCudaTest, HundredMillionFullReduction) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const int64_t cols = 100000003;
  const Bytes x = random_matrix(DType::kF32, cols, 7, 0.5, 1.5);
  const auto stats = row_stats(DType::kF32, x, 1, cols);
  for (RowReduceOp op : kOps) {
    const Bytes a = run_cuda(x, 1, cols, DType::kF32, DType::kF32, op, 0);
    const Bytes b = run_cuda(x, 1, cols, DType::kF32, DType::kF32, op, 0);
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(a, b) << "not deterministic: " << row_reduce_op_name(op);
    const double g = value(DType::kF32, a, 0);
    if (op == RowReduceOp::kMax) {
      EXPECT_EQ(g, stats[0].max);
    } else {
      const double scale = op == RowReduceOp::kMean ? 1.0 / cols : 1.0;
      EXPECT_LE(std::fabs(g - static_cast<double>(stats[0].sum) * scale), 2e-5 * stats[0].abs_sum * scale)
          << row_reduce_op_name(op);
    }
  }
#endif
}

TEST(ReductionCudaTest, NanAndEmptyRows) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  // NaN in every path: even rows hold a NaN (with a payload), odd rows +inf
  // and -inf. max: NaN / +inf; sum and mean: NaN everywhere (inf - inf).
  for (const Shape& s : kCudaShapes) {
    const auto [rows, cols] = s;
    if (rows * cols > (1 << 22) || cols < 2) continue;
    Bytes x = random_matrix(DType::kBF16, rows * cols, 9);
    BFloat16* p = reinterpret_cast<BFloat16*>(x.data());
    for (int64_t r = 0; r < rows; ++r) {
      if (r % 2 == 0) {
        p[r * cols + (r * 7919) % cols] = BFloat16{0xffc1};
      } else {
        p[r * cols] = BFloat16{0x7f80};
        p[r * cols + cols - 1] = BFloat16{0xff80};
      }
    }
    for (RowReduceOp op : kOps) {
      const Bytes gpu = run_cuda(x, rows, cols, DType::kBF16, DType::kBF16, op, 0);
      ASSERT_FALSE(gpu.empty());
      Bytes cpu(rows * 2);
      ASSERT_TRUE(reduce_rows_cpu(cpu.data(), x.data(), rows, cols, DType::kBF16, DType::kBF16, op).ok());
      EXPECT_EQ(gpu, cpu) << label(DType::kBF16, DType::kBF16, op, s);
      for (int64_t r = 0; r < rows; ++r) {
        uint16_t g;
        std::memcpy(&g, gpu.data() + 2 * r, 2);
        const uint16_t want = (op == RowReduceOp::kMax && r % 2 == 1) ? 0x7f80 : 0x7fff;
        ASSERT_EQ(g, want) << label(DType::kBF16, DType::kBF16, op, s) << " row " << r;
      }
    }
  }
  // Empty rows: sum 0, mean NaN.
  const Bytes none;
  const Bytes sum = run_cuda(none, 5, 0, DType::kF32, DType::kF32, RowReduceOp::kSum, 0);
  ASSERT_EQ(sum.size(), 20u);
  for (int r = 0; r < 5; ++r) EXPECT_EQ(value(DType::kF32, sum, r), 0.0);
  const Bytes mean = run_cuda(none, 5, 0, DType::kF32, DType::kF32, RowReduceOp::kMean, 0);
  ASSERT_EQ(mean.size(), 20u);
  for (int r = 0; r < 5; ++r) EXPECT_TRUE(std::isnan(value(DType::kF32, mean, r)));
#endif
}

TEST(ReductionCudaTest, RejectsBadArguments) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  constexpr auto kInvalid = KernelStatus::Code::kInvalidArgument;
  constexpr auto kUnsupported = KernelStatus::Code::kUnsupported;
  const int64_t cols = 1 << 22;  // rows = 1: needs scratch
  const int64_t need = reduce_rows_scratch_bytes(1, cols, DType::kF32);
  ASSERT_GT(need, 0);
  float *d = nullptr, *scratch = nullptr;
  CUDA_OK(cudaMalloc(&d, cols * sizeof(float)));
  CUDA_OK(cudaMalloc(&scratch, need + 8));
  const auto sum = RowReduceOp::kSum;
  EXPECT_EQ(reduce_rows_cuda(d, d, scratch, need - 4, 1, cols, DType::kF32, DType::kF32, sum, nullptr).code(),
            kInvalid);
  EXPECT_EQ(reduce_rows_cuda(d, d, nullptr, 0, 1, cols, DType::kF32, DType::kF32, sum, nullptr).code(),
            kInvalid);
  EXPECT_EQ(reduce_rows_cuda(d, d, reinterpret_cast<uint8_t*>(scratch) + 2, need, 1, cols, DType::kF32,
                             DType::kF32, sum, nullptr)
                .code(),
            kInvalid);
  EXPECT_EQ(reduce_rows_cuda(nullptr, d, scratch, need, 1, cols, DType::kF32, DType::kF32, sum, nullptr).code(),
            kInvalid);
  EXPECT_EQ(reduce_rows_cuda(d, d, scratch, need, -1, cols, DType::kF32, DType::kF32, sum, nullptr).code(),
            kInvalid);
  EXPECT_EQ(reduce_rows_cuda(d, d, scratch, need, 1, cols, DType::kF32, DType::kU8, sum, nullptr).code(),
            kUnsupported);
  EXPECT_EQ(reduce_rows_cuda(d, d, scratch, need, 1, cols, DType::kBF16, DType::kF16, sum, nullptr).code(),
            kUnsupported);
  EXPECT_EQ(reduce_rows_cuda(d, d, nullptr, 0, 4, 0, DType::kF32, DType::kF32, RowReduceOp::kMax, nullptr).code(),
            kInvalid);
  EXPECT_TRUE(reduce_rows_cuda(nullptr, nullptr, nullptr, 0, 0, cols, DType::kF32, DType::kF32, sum, nullptr).ok());
  // Enough scratch (more than needed is fine).
  EXPECT_TRUE(reduce_rows_cuda(d, d, scratch, need + 8, 1, cols, DType::kF32, DType::kF32, sum, nullptr).ok());
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaFree(d));
  CUDA_OK(cudaFree(scratch));
#endif
}

}  // namespace
}  // namespace colossal::kernels::reduction
