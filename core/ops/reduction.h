// colossal::core::ops — reductions: sum, mean and max over the last dimension
// or over all elements, on the CPU and CUDA.
//
// Conventions as in core/ops/elementwise.h: the Context comes first, every
// tensor is on ctx.device(), CUDA work is enqueued on ctx.compute_stream()
// without synchronising, and each op has an out-parameter and an allocating
// form.
//
//   Context& ctx = Context::get();
//   // x: bfloat16 [batch, seq, hidden]; row_max: bfloat16 [batch, seq]; total: float32 []
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor row_max, ops::max(ctx, x, ops::ReduceOver::kLastDim));
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor total, ops::sum(ctx, x, ops::ReduceOver::kAll, DType::kF32));
//   // into an existing bfloat16 [batch, seq] tensor:
//   COLOSSAL_RETURN_IF_ERROR(ops::mean(ctx, row_mean, x, ops::ReduceOver::kLastDim));
//
// Shapes: kLastDim reduces in [d0, ..., dk, n] to out [d0, ..., dk] (a 1-D
// input gives a scalar []); kAll reduces every element to a scalar [].
// Tensors are contiguous, so other dimensions are reduced by reshaping first
// (e.g. [a, b, c] over b and c: reshape to [a, b * c]).
//
// Numbers (kernels/reduction's semantics): input float32, float16, bfloat16 or
// float64; accumulation in float32 (float64 for float64 input) whatever the
// input, rounded once to out's dtype, which is float32 or the input's dtype
// (allocating forms default to the input's; pass DType::kF32 to keep the
// accumulator's precision for 16-bit inputs). mean divides the sum by n in the
// accumulator. max propagates NaN. Over an empty dimension sum is 0 and mean
// NaN; max is an error. Results are deterministic per device; the CPU and
// CUDA summation orders differ, so sum and mean agree across devices to
// rounding (about sqrt(n) 2^-24 max|x| for float32 accumulation), while max
// is bit-identical. CUDA scratch for long rows comes from ctx.allocator() on
// the compute stream (stream-ordered, freed when the call returns).
//
// Errors (absl::Status): InvalidArgumentError for an undefined operand, a
// tensor on another device, an integer input, an out of the wrong shape or
// dtype, out overlapping the input, kLastDim of a scalar, max over nothing;
// ResourceExhaustedError when the result or the scratch does not fit.
#ifndef COLOSSAL_CORE_OPS_REDUCTION_H_
#define COLOSSAL_CORE_OPS_REDUCTION_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "core/dtype/dtype.h"
#include "core/tensor/tensor.h"

namespace colossal::core::ops {

enum class ReduceOp { kSum, kMean, kMax };

// "sum", "mean", "max" (or "unknown").
const char* reduce_op_name(ReduceOp op);

// What a reduction runs over.
enum class ReduceOver {
  kLastDim,  // in [..., n] -> out [...]
  kAll,      // every element -> out []
};

// out = op(in) over `over`. out's dtype (float32 or in's) is the output dtype.
absl::Status reduce(Context& ctx, Tensor& out, const Tensor& in, ReduceOp op, ReduceOver over);
// A new tensor of `out_dtype` (default: in's dtype) holding op(in) over `over`.
absl::StatusOr<Tensor> reduce(Context& ctx, const Tensor& in, ReduceOp op, ReduceOver over,
                              std::optional<DType> out_dtype = std::nullopt);

// reduce() with the op named.
absl::Status sum(Context& ctx, Tensor& out, const Tensor& in, ReduceOver over);
absl::Status mean(Context& ctx, Tensor& out, const Tensor& in, ReduceOver over);
absl::Status max(Context& ctx, Tensor& out, const Tensor& in, ReduceOver over);
absl::StatusOr<Tensor> sum(Context& ctx, const Tensor& in, ReduceOver over,
                           std::optional<DType> out_dtype = std::nullopt);
absl::StatusOr<Tensor> mean(Context& ctx, const Tensor& in, ReduceOver over,
                            std::optional<DType> out_dtype = std::nullopt);
absl::StatusOr<Tensor> max(Context& ctx, const Tensor& in, ReduceOver over,
                           std::optional<DType> out_dtype = std::nullopt);

}  // namespace colossal::core::ops

#endif  // COLOSSAL_CORE_OPS_REDUCTION_H_
