// Elementwise ops: validation, then kernels/elementwise on the CPU or on
// ctx.compute_stream().
#include "core/ops/elementwise.h"

#include <cstdint>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "core/ops/ops_internal.h"
#include "kernels/elementwise/elementwise.h"

namespace colossal::core::ops {
namespace {

namespace ke = kernels::elementwise;
using internal::check_alias;
using internal::check_floating;
using internal::check_operand;
using internal::check_out;
using internal::invalid;

// The checks on the inputs of add/sub/mul/axpby: defined, on ctx's device,
// one dtype, one shape.
absl::Status check_pair(const Context& ctx, const char* op, const Tensor& a, const Tensor& b) {
  COLOSSAL_RETURN_IF_ERROR(check_operand(ctx, op, "a", a));
  COLOSSAL_RETURN_IF_ERROR(check_operand(ctx, op, "b", b));
  if (a.dtype() != b.dtype()) {
    return invalid(op, absl::StrCat("dtypes ", dtype_name(a.dtype()), " and ",
                                    dtype_name(b.dtype()), " differ"));
  }
  if (a.shape() != b.shape()) {
    return invalid(op, absl::StrCat("shapes ", a.shape().to_string(), " and ",
                                    b.shape().to_string(), " differ"));
  }
  return absl::OkStatus();
}

// ... and out: defined, on ctx's device, a's dtype and shape, in place or disjoint.
absl::Status check_pair_out(const Context& ctx, const char* op, const Tensor& out, const Tensor& a,
                            const Tensor& b) {
  COLOSSAL_RETURN_IF_ERROR(check_pair(ctx, op, a, b));
  COLOSSAL_RETURN_IF_ERROR(check_operand(ctx, op, "out", out));
  COLOSSAL_RETURN_IF_ERROR(check_out(op, out, a.dtype(), a.shape()));
  COLOSSAL_RETURN_IF_ERROR(check_alias(op, out, a, "a"));
  return check_alias(op, out, b, "b");
}

absl::Status binary(Context& ctx, const char* op, ke::BinaryOp kind, Tensor& out, const Tensor& a,
                    const Tensor& b) {
  COLOSSAL_RETURN_IF_ERROR(check_pair_out(ctx, op, out, a, b));
  return COLOSSAL_OPS_LAUNCH(ctx, op, ke::binary_cpu, ke::binary_cuda, out.raw_data(), a.raw_data(),
                             b.raw_data(), out.numel(), out.dtype(), kind);
}

absl::StatusOr<Tensor> empty_like(Context& ctx, const Tensor& t) {
  return Tensor::empty(t.shape(), t.dtype(), ctx.compute_stream());
}

absl::StatusOr<Tensor> binary(Context& ctx, const char* op, ke::BinaryOp kind, const Tensor& a,
                              const Tensor& b) {
  COLOSSAL_RETURN_IF_ERROR(check_pair(ctx, op, a, b));
  COLOSSAL_ASSIGN_OR_RETURN(Tensor out, empty_like(ctx, a));
  COLOSSAL_RETURN_IF_ERROR(binary(ctx, op, kind, out, a, b));
  return out;
}

}  // namespace

absl::Status add(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  return binary(ctx, "add", ke::BinaryOp::kAdd, out, a, b);
}
absl::Status sub(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  return binary(ctx, "sub", ke::BinaryOp::kSub, out, a, b);
}
absl::Status mul(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  return binary(ctx, "mul", ke::BinaryOp::kMul, out, a, b);
}
absl::StatusOr<Tensor> add(Context& ctx, const Tensor& a, const Tensor& b) {
  return binary(ctx, "add", ke::BinaryOp::kAdd, a, b);
}
absl::StatusOr<Tensor> sub(Context& ctx, const Tensor& a, const Tensor& b) {
  return binary(ctx, "sub", ke::BinaryOp::kSub, a, b);
}
absl::StatusOr<Tensor> mul(Context& ctx, const Tensor& a, const Tensor& b) {
  return binary(ctx, "mul", ke::BinaryOp::kMul, a, b);
}

absl::Status scale(Context& ctx, Tensor& out, const Tensor& a, double alpha) {
  constexpr const char* op = "scale";
  COLOSSAL_RETURN_IF_ERROR(check_operand(ctx, op, "a", a));
  COLOSSAL_RETURN_IF_ERROR(check_floating(op, a.dtype()));
  COLOSSAL_RETURN_IF_ERROR(check_operand(ctx, op, "out", out));
  COLOSSAL_RETURN_IF_ERROR(check_out(op, out, a.dtype(), a.shape()));
  COLOSSAL_RETURN_IF_ERROR(check_alias(op, out, a, "a"));
  return COLOSSAL_OPS_LAUNCH(ctx, op, ke::scale_cpu, ke::scale_cuda, out.raw_data(), a.raw_data(),
                             alpha, out.numel(), out.dtype());
}

absl::StatusOr<Tensor> scale(Context& ctx, const Tensor& a, double alpha) {
  COLOSSAL_RETURN_IF_ERROR(check_operand(ctx, "scale", "a", a));
  COLOSSAL_RETURN_IF_ERROR(check_floating("scale", a.dtype()));
  COLOSSAL_ASSIGN_OR_RETURN(Tensor out, empty_like(ctx, a));
  COLOSSAL_RETURN_IF_ERROR(scale(ctx, out, a, alpha));
  return out;
}

absl::Status axpby(Context& ctx, Tensor& out, const Tensor& a, const Tensor& b, double alpha,
                   double beta) {
  constexpr const char* op = "axpby";
  COLOSSAL_RETURN_IF_ERROR(check_pair_out(ctx, op, out, a, b));
  COLOSSAL_RETURN_IF_ERROR(check_floating(op, a.dtype()));
  return COLOSSAL_OPS_LAUNCH(ctx, op, ke::axpby_cpu, ke::axpby_cuda, out.raw_data(), a.raw_data(),
                             b.raw_data(), alpha, beta, out.numel(), out.dtype());
}

absl::StatusOr<Tensor> axpby(Context& ctx, const Tensor& a, const Tensor& b, double alpha,
                             double beta) {
  COLOSSAL_RETURN_IF_ERROR(check_pair(ctx, "axpby", a, b));
  COLOSSAL_RETURN_IF_ERROR(check_floating("axpby", a.dtype()));
  COLOSSAL_ASSIGN_OR_RETURN(Tensor out, empty_like(ctx, a));
  COLOSSAL_RETURN_IF_ERROR(axpby(ctx, out, a, b, alpha, beta));
  return out;
}

absl::Status cast(Context& ctx, Tensor& out, const Tensor& in) {
  constexpr const char* op = "cast";
  COLOSSAL_RETURN_IF_ERROR(check_operand(ctx, op, "in", in));
  COLOSSAL_RETURN_IF_ERROR(check_operand(ctx, op, "out", out));
  if (out.shape() != in.shape()) {
    return invalid(op, absl::StrCat("shapes ", in.shape().to_string(), " (in) and ",
                                    out.shape().to_string(), " (out) differ"));
  }
  if (internal::overlaps(out, in) && !internal::same_memory(out, in)) {
    return invalid(op, absl::StrCat("out (", internal::describe(out), ") overlaps in (",
                                    internal::describe(in),
                                    ") without being the same memory; in place needs dtypes of "
                                    "the same size, otherwise use disjoint tensors"));
  }
  return COLOSSAL_OPS_LAUNCH(ctx, op, ke::cast_cpu, ke::cast_cuda, out.raw_data(), in.raw_data(),
                             out.numel(), out.dtype(), in.dtype());
}

absl::StatusOr<Tensor> cast(Context& ctx, const Tensor& in, DType dtype) {
  COLOSSAL_RETURN_IF_ERROR(check_operand(ctx, "cast", "in", in));
  COLOSSAL_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(in.shape(), dtype, ctx.compute_stream()));
  COLOSSAL_RETURN_IF_ERROR(cast(ctx, out, in));
  return out;
}

namespace {

// The stream ops' checks: `out` and each input defined, on one device, with
// as many elements, in place or disjoint; a CUDA device the stream's.
absl::Status check_on_stream(const char* op, const Stream& stream, const Tensor& out,
                             std::initializer_list<const Tensor*> inputs) {
  if (!out.defined()) return invalid(op, "out is undefined");
  for (const Tensor* in : inputs) {
    if (!in->defined()) return invalid(op, "an input is undefined");
    if (in->device() != out.device() || in->numel() != out.numel()) {
      return invalid(op, absl::StrCat("in (", internal::describe(*in), ") and out (", internal::describe(out),
                                      ") must be on one device with as many elements"));
    }
    if (internal::overlaps(out, *in) && !internal::same_memory(out, *in)) {
      return invalid(op, absl::StrCat("out (", internal::describe(out), ") overlaps in (",
                                      internal::describe(*in), ") without being the same memory"));
    }
  }
  if (out.device().is_cuda() && stream.device() != out.device()) {
    return invalid(op, absl::StrCat("the tensors are on ", out.device().to_string(), ", the stream on ",
                                    stream.device().to_string()));
  }
  return absl::OkStatus();
}

#if !COLOSSAL_WITH_CUDA
absl::Status no_cuda(const char* op) {
  return absl::FailedPreconditionError(absl::StrCat(op, ": CUDA tensors in a build without CUDA"));
}
#endif

}  // namespace

absl::Status add(const Stream& stream, const Tensor& out, const Tensor& a, const Tensor& b) {
  constexpr const char* op = "add";
  COLOSSAL_RETURN_IF_ERROR(check_on_stream(op, stream, out, {&a, &b}));
  if (a.dtype() != out.dtype() || b.dtype() != out.dtype()) {
    return invalid(op, absl::StrCat("dtypes ", dtype_name(a.dtype()), ", ", dtype_name(b.dtype()), " and ",
                                    dtype_name(out.dtype()), " (out) differ"));
  }
  if (out.device().is_cpu()) {
    return from_kernel_status(ke::binary_cpu(out.raw_data(), a.raw_data(), b.raw_data(), out.numel(),
                                             out.dtype(), ke::BinaryOp::kAdd),
                              op);
  }
#if COLOSSAL_WITH_CUDA
  DeviceGuard guard(out.device());
  return from_kernel_status(ke::binary_cuda(out.raw_data(), a.raw_data(), b.raw_data(), out.numel(),
                                            out.dtype(), ke::BinaryOp::kAdd, stream.handle()),
                            op);
#else
  return no_cuda(op);
#endif
}

absl::Status cast(const Stream& stream, const Tensor& out, const Tensor& in) {
  constexpr const char* op = "cast";
  COLOSSAL_RETURN_IF_ERROR(check_on_stream(op, stream, out, {&in}));
  if (out.device().is_cpu()) {
    return from_kernel_status(ke::cast_cpu(out.raw_data(), in.raw_data(), out.numel(), out.dtype(), in.dtype()),
                              op);
  }
#if COLOSSAL_WITH_CUDA
  DeviceGuard guard(out.device());
  return from_kernel_status(
      ke::cast_cuda(out.raw_data(), in.raw_data(), out.numel(), out.dtype(), in.dtype(), stream.handle()), op);
#else
  return no_cuda(op);
#endif
}

absl::Status fill(Context& ctx, Tensor& out, double value) {
  constexpr const char* op = "fill";
  COLOSSAL_RETURN_IF_ERROR(check_operand(ctx, op, "out", out));
  return COLOSSAL_OPS_LAUNCH(ctx, op, ke::fill_cpu, ke::fill_cuda, out.raw_data(), value,
                             out.numel(), out.dtype());
}

absl::StatusOr<Tensor> full(Context& ctx, const Shape& shape, DType dtype, double value) {
  COLOSSAL_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(shape, dtype, ctx.compute_stream()));
  COLOSSAL_RETURN_IF_ERROR(fill(ctx, out, value));
  return out;
}

}  // namespace colossal::core::ops
