// colossal::core::ops — elementwise Tensor ops: add, sub, mul, scale, axpby,
// cast and fill, on the CPU and CUDA.
//
// Every op is a free function taking the Context first: the tensors must all
// be on ctx.device(); on CUDA the work is enqueued on ctx.compute_stream() and
// nothing is synchronised (read results after ctx.synchronize() or an ordered
// copy); on the CPU it runs in the calling thread. Each op has an out-parameter
// form, which writes into existing memory (its shape and dtype must already be
// right), and an allocating form, which returns a new tensor allocated on
// ctx.compute_stream():
//
//   Context& ctx = Context::get();
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor h, ops::add(ctx, x, residual));   // a new tensor
//   COLOSSAL_RETURN_IF_ERROR(ops::axpby(ctx, m, m, g, 0.9, 0.1));      // m = 0.9m + 0.1g in place
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor w16, ops::cast(ctx, w, DType::kBF16));
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor mask, ops::full(ctx, {4, 4}, DType::kF32, -1e4));
//
// Semantics are kernels/elementwise's (elementwise.h there): float16/bfloat16
// compute in float32 and round once, float32 in float32, float64 in float64;
// integers wrap; any NaN result is the canonical NaN; and the CPU and CUDA
// results are bit-for-bit equal. There is no broadcasting: operands have
// identical shapes (reshape first). `out` may be an input (in place) or
// disjoint from them, never a partial overlap.
//
// Errors (absl::Status, never an abort): InvalidArgumentError naming the
// shapes, dtypes or devices that do not fit ("add: shapes [2, 3] and [3, 2]
// differ", "add: dtypes float32 and bfloat16 differ", "add: b is float32
// [2, 3] on cuda:0, not on the context's device cpu"), an undefined operand,
// a partial overlap, a dtype the op does not take; ResourceExhaustedError when
// an allocating form runs out of memory.
#ifndef COLOSSAL_CORE_OPS_ELEMENTWISE_H_
#define COLOSSAL_CORE_OPS_ELEMENTWISE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "core/device/stream.h"
#include "core/dtype/dtype.h"
#include "core/tensor/shape.h"
#include "core/tensor/tensor.h"

namespace colossal::core::ops {

// out = a + b, a - b, a * b, elementwise. Every dtype; a, b and out share one
// dtype and one shape.
absl::Status add(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b);
absl::Status sub(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b);
absl::Status mul(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b);
absl::StatusOr<Tensor> add(Context& ctx, const Tensor& a, const Tensor& b);
absl::StatusOr<Tensor> sub(Context& ctx, const Tensor& a, const Tensor& b);
absl::StatusOr<Tensor> mul(Context& ctx, const Tensor& a, const Tensor& b);
// add() on `stream`, for code with streams of its own (see the stream cast
// below): out, a and b on one device, of one dtype and as many elements.
// CUDA tensors are added on `stream` (of their device); CPU ones at once.
absl::Status add(const Stream& stream, const Tensor& out, const Tensor& a, const Tensor& b);

// out = alpha * a. Floating dtypes only (float32, float16, bfloat16, float64);
// alpha is rounded once to the math type (float32, or float64 for float64).
absl::Status scale(Context& ctx, Tensor& out, const Tensor& a, double alpha);
absl::StatusOr<Tensor> scale(Context& ctx, const Tensor& a, double alpha);

// out = alpha * a + beta * b. Floating dtypes only; the products and the sum
// are rounded separately (no fused multiply-add), the same on CPU and CUDA.
absl::Status axpby(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b, double alpha,
                   double beta);
absl::StatusOr<Tensor> axpby(Context& ctx, const Tensor& a, const Tensor& b, double alpha,
                             double beta);

// out = in converted to out's dtype (any pair of dtypes; same shape). Float to
// float rounds to nearest even; float to integer truncates toward zero and
// saturates, NaN -> 0; integer to integer wraps. In place (out and in the same
// memory) only when both dtypes have the same size.
absl::Status cast(Context& ctx, Tensor& out, const Tensor& in);
// A new tensor holding `in` converted to `dtype`, like Tensor::to(dtype) in
// other frameworks — but always a new tensor, also when dtype == in.dtype()
// (then a copy), so writing to the result never changes `in`.
absl::StatusOr<Tensor> cast(Context& ctx, const Tensor& in, DType dtype);
// cast() for code that runs on streams of its own rather than a Context's
// (ZeRO's gradient buckets, Gemini's chunks, optimizer masters): out and in
// on one device with as many elements (shapes may differ: flat views of a
// buffer). CUDA tensors are converted on `stream`, which must be of their
// device (enqueued, not synchronised); CPU tensors at once, whatever the
// stream. Aliasing and conversion rules as cast(). InvalidArgument, and
// nothing written, for anything else.
absl::Status cast(const Stream& stream, const Tensor& out, const Tensor& in);

// Every element of out = value converted to out's dtype with cast's rules
// (e.g. 2.7 -> int32 2, 300 -> uint8 255). Every dtype.
absl::Status fill(Context& ctx, Tensor& out, double value);
// A new `shape` tensor of `dtype` with every element `value`.
absl::StatusOr<Tensor> full(Context& ctx, const Shape& shape, DType dtype, double value);

}  // namespace colossal::core::ops

#endif  // COLOSSAL_CORE_OPS_ELEMENTWISE_H_
