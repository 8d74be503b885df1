// How reduce_rows splits a [rows, cols] reduction, and the accumulation
// operators, shared by the CPU (scratch size) and CUDA code so both agree.
// Internal to kernels/reduction.
#ifndef COLOSSAL_KERNELS_REDUCTION_REDUCTION_PLAN_H_
#define COLOSSAL_KERNELS_REDUCTION_REDUCTION_PLAN_H_

#include <cstdint>
#include <limits>

#include "kernels/common/dtype.h"
#include "kernels/common/host_device.h"

namespace colossal::kernels::reduction::internal {

// ---- CUDA work split. It depends on the shape only (never on the device), so
// the summation order, and with it the result, is the same on every GPU.

constexpr int64_t kThreadRowMaxCols = 32;   // up to this: one thread per row
constexpr int64_t kWarpRowMaxCols = 1024;   // up to this: one warp per row
constexpr int kBlockThreads = 256;          // block per row (or per row chunk)
// Blocks wanted in flight: about what an H100 holds at once (132 SMs x 8
// blocks of 256 threads); fewer rows than this get split.
constexpr int64_t kTargetBlocks = 1024;
constexpr int64_t kMinSplitCols = 32768;    // a split never covers fewer columns
constexpr int64_t kChunkAlign = 64;         // split boundaries: multiples of 64 elements

enum class Path { kThreadPerRow, kWarpPerRow, kBlockPerRow };

struct Plan {
  Path path;
  int64_t splits;  // blocks per row (> 1 only for kBlockPerRow)
  int64_t chunk;   // columns per split
};

inline Plan make_plan(int64_t rows, int64_t cols) {
  if (cols <= kThreadRowMaxCols) return Plan{Path::kThreadPerRow, 1, cols};
  if (cols <= kWarpRowMaxCols) return Plan{Path::kWarpPerRow, 1, cols};
  int64_t splits = 1;
  if (rows < kTargetBlocks) {
    const int64_t want = (kTargetBlocks + rows - 1) / rows;
    const int64_t most = cols / kMinSplitCols;
    splits = want < most ? want : most;
    if (splits < 1) splits = 1;
  }
  int64_t chunk = (cols + splits - 1) / splits;
  chunk = (chunk + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
  splits = (cols + chunk - 1) / chunk;
  return Plan{Path::kBlockPerRow, splits, chunk};
}

inline bool is_reducible(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF64;
}

// Accumulator bytes: float64 for float64 input, float32 otherwise.
inline int64_t accumulator_size(DType in_dtype) { return in_dtype == DType::kF64 ? 8 : 4; }

inline int64_t scratch_bytes(int64_t rows, int64_t cols, DType in_dtype) {
  if (rows < 0 || cols < 0) return -1;
  if (rows == 0 || !is_reducible(in_dtype)) return 0;
  const Plan plan = make_plan(rows, cols);
  return plan.splits > 1 ? rows * plan.splits * accumulator_size(in_dtype) : 0;
}

// ---- Accumulation operators (A is float or double).

struct SumOp {
  template <typename A>
  static COLOSSAL_HOST_DEVICE A identity() {
    return A(0);
  }
  template <typename A>
  COLOSSAL_HOST_DEVICE A operator()(A a, A b) const {
    return a + b;
  }
};

// max that propagates NaN: if either operand is NaN the result is NaN.
struct MaxOp {
  template <typename A>
  static COLOSSAL_HOST_DEVICE A identity() {
    return -std::numeric_limits<A>::infinity();  // constexpr: usable on the device
  }
  template <typename A>
  COLOSSAL_HOST_DEVICE A operator()(A a, A b) const {
    if (a != a) return a;
    if (b != b) return b;
    return a < b ? b : a;
  }
};

// The final value of a row from its accumulated total: mean divides by cols
// (in the accumulator type, so CPU and CUDA divide the same way).
template <typename A>
COLOSSAL_HOST_DEVICE A finish(A total, int64_t cols, bool mean) {
  return mean ? total / static_cast<A>(cols) : total;
}

}  // namespace colossal::kernels::reduction::internal

#endif  // COLOSSAL_KERNELS_REDUCTION_REDUCTION_PLAN_H_
