// colossal::core::ops — random fills from the Context's generator: uniform
// and normal, on the CPU and CUDA, the same numbers on both.
//
// Each call reserves numel() numbers of the context's counter-based stream
// (RngState r = ctx.next_offset(numel), core/context/context.h) and writes
// elements [r.offset, r.offset + numel) of the Philox stream for r.seed
// (kernels/random/random.h). So successive calls draw fresh numbers, a run is
// reproduced by ctx.manual_seed() or ctx.set_rng_state(), and a CPU and a
// CUDA context in the same RNG state produce bit-identical tensors (normals
// included). A call that fails validation reserves nothing. Conventions as in
// core/ops/elementwise.h: tensors on ctx.device(), CUDA work enqueued on
// ctx.compute_stream() without synchronising.
//
//   Context& ctx = Context::get();
//   ctx.manual_seed(1234);
//   COLOSSAL_RETURN_IF_ERROR(ops::fill_normal(ctx, wte, 0.0, 0.02));      // GPT-2 init
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor noise, ops::uniform(ctx, {8, 1024}, DType::kF32, -1.0, 1.0));
//
// Values: dtypes float32, float16, bfloat16, float64. uniform: lo + (hi - lo)
// u with u in [0, 1) of 24 random bits, computed in float32 (float64 for
// float64), rounded to the dtype; values lie in [lo, hi] (hi only through
// rounding). normal: Box-Muller on pairs of stream elements, mean + std z
// with |z| <= 5.77.
//
// Errors (absl::Status): InvalidArgumentError for an undefined tensor, one on
// another device, an integer dtype, lo > hi or non-finite bounds, a negative
// or non-finite std or non-finite mean; ResourceExhaustedError when an
// allocating form runs out of memory.
#ifndef COLOSSAL_CORE_OPS_RANDOM_H_
#define COLOSSAL_CORE_OPS_RANDOM_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "core/dtype/dtype.h"
#include "core/tensor/shape.h"
#include "core/tensor/tensor.h"

namespace colossal::core::ops {

// Overwrites out with uniform values in [lo, hi].
absl::Status fill_uniform(Context& ctx, Tensor& out, double lo = 0.0, double hi = 1.0);
// Overwrites out with normal values of mean `mean` and standard deviation `std`.
absl::Status fill_normal(Context& ctx, Tensor& out, double mean = 0.0, double std = 1.0);

// New tensors of `shape` and `dtype`, filled as above.
absl::StatusOr<Tensor> uniform(Context& ctx, const Shape& shape, DType dtype, double lo = 0.0,
                               double hi = 1.0);
absl::StatusOr<Tensor> normal(Context& ctx, const Shape& shape, DType dtype, double mean = 0.0,
                              double std = 1.0);

}  // namespace colossal::core::ops

#endif  // COLOSSAL_CORE_OPS_RANDOM_H_
