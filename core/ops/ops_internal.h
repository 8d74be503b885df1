// Private to core/ops: the argument checks every op shares, so each op's
// messages name tensors the same way:
//   add: shapes [2, 3] and [3, 2] differ
//   add: b is float32 [2, 3] on cuda:0, not on the context's device cpu
//   scale: out (float32 [5] on cpu) partially overlaps a (float32 [5] on cpu); ...
#ifndef COLOSSAL_CORE_OPS_OPS_INTERNAL_H_
#define COLOSSAL_CORE_OPS_OPS_INTERNAL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "bazel/cuda_config.h"
#include "core/context/context.h"
#include "core/device/device.h"
#include "core/dtype/dtype.h"
#include "core/status/status.h"
#include "core/tensor/shape.h"
#include "core/tensor/tensor.h"

namespace colossal::core::ops::internal {

// "float32 [2, 3] on cpu", or "undefined".
std::string describe(const Tensor& t);

// InvalidArgumentError "<op>: <why>".
absl::Status invalid(absl::string_view op, absl::string_view why);

// OK when `t` (called `name` in messages) is defined and on ctx.device().
absl::Status check_operand(const Context& ctx, absl::string_view op, absl::string_view name,
                           const Tensor& t);

// OK when out is `dtype` `shape`; otherwise
// "<op>: out is bfloat16 [2, 3], but the result is float32 [2, 3]".
absl::Status check_out(absl::string_view op, const Tensor& out, DType dtype, const Shape& shape);

// OK when `dtype` is float32, float16, bfloat16 or float64; otherwise
// "<op>: dtype int32 is not supported (float32, float16, bfloat16, float64)".
absl::Status check_floating(absl::string_view op, DType dtype);

// Whether the two tensors share at least one byte.
bool overlaps(const Tensor& x, const Tensor& y);
// Whether the two tensors view exactly the same bytes.
bool same_memory(const Tensor& x, const Tensor& y);

// The kernels accept out == in (in place) or disjoint buffers, nothing in
// between: an error when `out` overlaps `in` (called `name`) without being it.
absl::Status check_alias(absl::string_view op, const Tensor& out, const Tensor& in,
                         absl::string_view name);

// FailedPreconditionError for a CUDA context in a build without CUDA (which
// cannot be created, so reaching this is unlikely; it is not a crash).
absl::Status built_without_cuda(const Context& ctx, absl::string_view op);

#if COLOSSAL_WITH_CUDA
// Calls kernel(stream) with ctx's compute stream under a DeviceGuard for
// ctx's device; the KernelStatus becomes an absl::Status prefixed by `op`.
template <typename Kernel>
absl::Status launch_cuda(const Context& ctx, absl::string_view op, Kernel&& kernel) {
  DeviceGuard guard(ctx.device());
  return from_kernel_status(kernel(ctx.compute_stream().handle()), op);
}
#endif

}  // namespace colossal::core::ops::internal

// Runs a kernel family's function on ctx's device: `cpu_fn(args...)` on a CPU
// context, `cuda_fn(args..., ctx.compute_stream())` on a CUDA one (enqueued,
// not synchronised), and returns the absl::Status of its KernelStatus with
// `op` before the message. For kernels whose CUDA function takes the CPU
// one's arguments plus the stream (elementwise, random). In a build without
// CUDA `cuda_fn` is not referenced.
#if COLOSSAL_WITH_CUDA
#define COLOSSAL_OPS_LAUNCH(ctx, op, cpu_fn, cuda_fn, ...)                                 \
  ((ctx).device().is_cpu() ? ::colossal::core::from_kernel_status(cpu_fn(__VA_ARGS__), op) \
                           : ::colossal::core::ops::internal::launch_cuda(                 \
                                 ctx, op, [&](CUstream_st* colossal_stream_) {             \
                                   return cuda_fn(__VA_ARGS__, colossal_stream_);          \
                                 }))
#else
#define COLOSSAL_OPS_LAUNCH(ctx, op, cpu_fn, cuda_fn, ...)                                 \
  ((ctx).device().is_cpu() ? ::colossal::core::from_kernel_status(cpu_fn(__VA_ARGS__), op) \
                           : ::colossal::core::ops::internal::built_without_cuda(ctx, op))
#endif

#endif  // COLOSSAL_CORE_OPS_OPS_INTERNAL_H_
