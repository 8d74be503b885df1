#include "core/ops/ops_internal.h"

#include "absl/strings/str_cat.h"

namespace colossal::core::ops::internal {

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return absl::StrCat(dtype_name(t.dtype()), " ", t.shape().to_string(), " on ",
                      t.device().to_string());
}

absl::Status invalid(absl::string_view op, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", why));
}

absl::Status check_operand(const Context& ctx, absl::string_view op, absl::string_view name,
                           const Tensor& t) {
  if (!t.defined()) return invalid(op, absl::StrCat(name, " is undefined"));
  if (t.device() != ctx.device()) {
    return invalid(op, absl::StrCat(name, " is ", describe(t), ", not on the context's device ",
                                    ctx.device().to_string()));
  }
  return absl::OkStatus();
}

absl::Status check_out(absl::string_view op, const Tensor& out, DType dtype, const Shape& shape) {
  if (out.dtype() == dtype && out.shape() == shape) return absl::OkStatus();
  return invalid(op,
                 absl::StrCat("out is ", dtype_name(out.dtype()), " ", out.shape().to_string(),
                              ", but the result is ", dtype_name(dtype), " ", shape.to_string()));
}

absl::Status check_floating(absl::string_view op, DType dtype) {
  if (dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 ||
      dtype == DType::kF64) {
    return absl::OkStatus();
  }
  return invalid(op, absl::StrCat("dtype ", dtype_name(dtype),
                                  " is not supported (float32, float16, bfloat16, float64)"));
}

bool overlaps(const Tensor& x, const Tensor& y) {
  if (x.storage() != y.storage() || x.nbytes() == 0 || y.nbytes() == 0) return false;
  return x.byte_offset() < y.byte_offset() + y.nbytes() &&
         y.byte_offset() < x.byte_offset() + x.nbytes();
}

bool same_memory(const Tensor& x, const Tensor& y) {
  return x.storage() == y.storage() && x.byte_offset() == y.byte_offset() &&
         x.nbytes() == y.nbytes();
}

absl::Status check_alias(absl::string_view op, const Tensor& out, const Tensor& in,
                         absl::string_view name) {
  if (!overlaps(out, in) || same_memory(out, in)) return absl::OkStatus();
  return invalid(op, absl::StrCat("out (", describe(out), ") partially overlaps ", name, " (",
                                  describe(in), "); out must be the same tensor or disjoint"));
}

absl::Status built_without_cuda(const Context& ctx, absl::string_view op) {
  return absl::FailedPreconditionError(absl::StrCat(
      op, ": the context is on ", ctx.device().to_string(), " in a build without CUDA"));
}

}  // namespace colossal::core::ops::internal
