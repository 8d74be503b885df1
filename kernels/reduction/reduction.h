// colossal::kernels::reduction — sum, mean and max over the rows of a matrix.
//
// in is [rows, cols] row-major and contiguous; out[r] = op(in[r, 0..cols)).
// rows == 1 is a full reduction of a buffer (cols may be in the billions).
//
// Semantics:
//   * Input dtypes float32, float16, bfloat16 and float64. Accumulation is in
//     float32 for float32/float16/bfloat16 and in float64 for float64 (the
//     accumulator is rounded once to the output dtype at the end).
//   * out_dtype is float32 or in_dtype (e.g. bfloat16 in -> float32 sums).
//   * kMean is the float sum divided by cols in the accumulator type.
//   * kMax propagates NaN (a row with a NaN has max NaN). Any NaN result is the
//     canonical NaN (float32 0x7fffffff, float64 0x7fffffffffffffff,
//     float16/bfloat16 0x7fff).
//   * cols == 0: sum is 0, mean is NaN (0/0), max is an error (invalid argument).
//   * Deterministic: a fixed summation order on each device, so a call repeated
//     on the same data (at the same 16-byte alignment) returns the same bits.
//     The CPU and CUDA orders differ, so sums agree only to rounding: with
//     float32 accumulation, about sqrt(cols) * 2^-24 * max|x| apart for
//     zero-mean data (the tests' bound is stated in reduction_test.cc). max
//     is exact and bit-identical on both.
//   * CPU order: each row is summed pairwise over blocks of 1024 elements,
//     each block with 8 interleaved partial sums.
//   * CUDA: rows with at most 32 columns take a thread per row, up to 1024 a
//     warp per row, longer rows a block per row; when there are too few rows
//     to fill the GPU, each row is split over several blocks that write partial
//     results to `scratch` and a second kernel combines them in a fixed order.
//     reduce_rows_scratch_bytes() says how much scratch a shape needs (0 when
//     the one-kernel path is taken); it depends on rows, cols and in_dtype only.
// These are forward reductions; they have no gradient state (a sum's input
// gradient is a broadcast, which core/ composes from elementwise ops).
//
//   using namespace colossal::kernels;
//   float sums[rows];
//   KernelStatus s = reduction::reduce_rows_cpu(sums, x, rows, cols, DType::kF32, DType::kBF16,
//                                               reduction::RowReduceOp::kSum);
//   #if COLOSSAL_WITH_CUDA
//   const int64_t bytes = reduction::reduce_rows_scratch_bytes(1, n, DType::kF32);
//   // ... scratch = bytes of device memory (nullptr when bytes == 0) ...
//   s = reduction::reduce_rows_cuda(d_total, d_x, scratch, bytes, 1, n, DType::kF32, DType::kF32,
//                                   reduction::RowReduceOp::kSum, stream);
//   #endif
#ifndef COLOSSAL_KERNELS_REDUCTION_REDUCTION_H_
#define COLOSSAL_KERNELS_REDUCTION_REDUCTION_H_

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

#if COLOSSAL_WITH_CUDA
typedef struct CUstream_st* cudaStream_t;
#endif

namespace colossal::kernels::reduction {

enum class RowReduceOp : int { kSum, kMean, kMax };

// "sum", "mean", "max" (or "unknown").
const char* row_reduce_op_name(RowReduceOp op);

// CPU reference and CPU backend. out: rows elements of out_dtype (overwritten);
// in: rows * cols elements of in_dtype. rows == 0 is a no-op (null pointers allowed).
KernelStatus reduce_rows_cpu(void* out, const void* in, int64_t rows, int64_t cols, DType out_dtype,
                             DType in_dtype, RowReduceOp op);

// Bytes of device scratch reduce_rows_cuda needs for this shape (0 if none;
// -1 for negative sizes). Available in CPU-only builds too, so callers can plan.
int64_t reduce_rows_scratch_bytes(int64_t rows, int64_t cols, DType in_dtype);

#if COLOSSAL_WITH_CUDA
// CUDA: out, in and scratch are device pointers; scratch must hold at least
// reduce_rows_scratch_bytes(rows, cols, in_dtype) bytes (scratch_bytes says
// how many it has; too few is an invalid argument), aligned to 8 bytes. Its
// contents on entry do not matter and are left undefined. Enqueued on
// `stream`, not synchronised.
KernelStatus reduce_rows_cuda(void* out, const void* in, void* scratch, int64_t scratch_bytes,
                              int64_t rows, int64_t cols, DType out_dtype, DType in_dtype,
                              RowReduceOp op, cudaStream_t stream);
#endif

}  // namespace colossal::kernels::reduction

#endif  // COLOSSAL_KERNELS_REDUCTION_REDUCTION_H_
