// colossal::nn — small tensor helpers shared by the layers.
//
// Not a public op library (core/ops is): shape and device checks, allocation
// on the context's compute stream, and the few elementwise/copy steps the
// layers need, each on ctx's device (CPU, or CUDA on ctx.compute_stream()),
// each returning an absl::Status that names the shapes involved.
//
// COLOSSAL_NN_ON_DEVICE(ctx, cpu_call, cuda_call) picks a kernel family's CPU
// or CUDA function by ctx's device; in CPU-only builds the CUDA call is not
// compiled (and a context is always on the CPU there).
//
//   COLOSSAL_RETURN_IF_ERROR(require_device(ctx, x, "input"));
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor x2, as_rows(x, in_features, "input"));   // [N, in]
//   kernels::KernelStatus s = COLOSSAL_NN_ON_DEVICE(ctx,
//       gelu_forward_cpu(y, x, n, dtype), gelu_forward_cuda(y, x, n, dtype, cuda_stream(ctx)));
#ifndef COLOSSAL_NN_LAYERS_TENSOR_UTIL_H_
#define COLOSSAL_NN_LAYERS_TENSOR_UTIL_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "nn/module/module.h"

#if COLOSSAL_WITH_CUDA
#define COLOSSAL_NN_ON_DEVICE(ctx, cpu_call, cuda_call) \
  ((ctx).device().is_cpu() ? (cpu_call) : (cuda_call))
#else
#define COLOSSAL_NN_ON_DEVICE(ctx, cpu_call, cuda_call) (cpu_call)
#endif

namespace colossal::nn {

#if COLOSSAL_WITH_CUDA
// ctx's compute stream as a cudaStream_t.
inline CUstream_st* cuda_stream(const core::Context& ctx) {
  return ctx.compute_stream().handle();
}
#endif

// InvalidArgumentError (naming `what`) unless `x` is defined and on ctx's device.
absl::Status require_device(const core::Context& ctx, const core::Tensor& x, absl::string_view what);

// A new uninitialised tensor on ctx's device (compute stream).
absl::StatusOr<core::Tensor> empty(core::Context& ctx, const core::Shape& shape, core::DType dtype);

// `bytes` of uninitialised uint8 scratch on ctx's device; an undefined tensor
// (raw_data() null) when bytes is 0.
absl::StatusOr<core::Tensor> scratch(core::Context& ctx, size_t bytes);

// `x` viewed as [numel / cols, cols]. InvalidArgumentError (naming `what`)
// unless x has rank >= 1 and its last dimension is `cols`.
absl::StatusOr<core::Tensor> as_rows(const core::Tensor& x, int64_t cols, absl::string_view what);

// InvalidArgumentError unless `x` has dtype `dtype` (naming `what`).
absl::Status require_dtype(const core::Tensor& x, core::DType dtype, absl::string_view what);

// InvalidArgumentError (naming `what` and `like_what`) unless `x` is on
// ctx's device with dtype `dtype` and the shape of `like`: a second operand
// (a residual, its gradient) checked against the tensor it goes with.
absl::Status require_like(const core::Context& ctx, const core::Tensor& x, core::DType dtype, absl::string_view what,
                          const core::Shape& like, absl::string_view like_what);

// module.forward(x) with `residual` added to its output after: the unfused
// path of the layers' forward_add entry points (which add a residual as
// their last kernel writes).
absl::StatusOr<ForwardResult> forward_then_add(core::Context& ctx, Module& module,
                                               const core::Tensor& x, const core::Tensor& residual);


// dbias[j] += sum_i dy[i, j]; dy [rows, n], dbias [n] (a GEMM with a ones vector).
absl::Status accumulate_column_sums(core::Context& ctx, const core::Tensor& dy, core::Tensor& dbias);

// Copies `height` rows of `width` bytes from src (rows `src_pitch` bytes
// apart) to dst (rows `dst_pitch` apart), both in ctx's device memory
// (kernels/copy: cudaMemcpy2DAsync's contract as a kernel, which moves narrow rows at
// memory bandwidth). Used for splitting and merging attention heads.
absl::Status copy_2d(core::Context& ctx, void* dst, size_t dst_pitch, const void* src,
                     size_t src_pitch, size_t width, size_t height);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_TENSOR_UTIL_H_
