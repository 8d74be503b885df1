#include "nn/layers/tensor_util.h"

#include "absl/strings/str_cat.h"
#include "core/gemm/gemm.h"
#include "core/ops/elementwise.h"
#include "core/status/status.h"
#include "kernels/copy/copy.h"

namespace colossal::nn {

absl::Status require_device(const core::Context& ctx, const core::Tensor& x,
                            absl::string_view what) {
  if (!x.defined()) return absl::InvalidArgumentError(absl::StrCat(what, " is undefined"));
  if (x.device() == ctx.device()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " is ", x.to_string(),
                                                 " but the context runs on ",
                                                 ctx.device().to_string()));
}

absl::StatusOr<core::Tensor> empty(core::Context& ctx, const core::Shape& shape, core::DType dtype) {
  return core::Tensor::empty(shape, dtype, ctx.compute_stream());
}

absl::StatusOr<core::Tensor> scratch(core::Context& ctx, size_t bytes) {
  if (bytes == 0) return core::Tensor();
  return empty(ctx, {static_cast<int64_t>(bytes)}, core::DType::kU8);
}

absl::StatusOr<core::Tensor> as_rows(const core::Tensor& x, int64_t cols, absl::string_view what) {
  if (!x.defined() || x.rank() < 1 || x.dim(-1) != cols) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is ", x.to_string(),
                                                   "; its last dimension must be ", cols));
  }
  return x.reshape({-1, cols});
}

absl::Status require_dtype(const core::Tensor& x, core::DType dtype, absl::string_view what) {
  if (x.defined() && x.dtype() == dtype) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " is ", x.to_string(), "; expected dtype ", core::dtype_name(dtype)));
}

absl::Status require_like(const core::Context& ctx, const core::Tensor& x, core::DType dtype, absl::string_view what,
                          const core::Shape& like, absl::string_view like_what) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, x, what));
  COLOSSAL_RETURN_IF_ERROR(require_dtype(x, dtype, what));
  if (x.shape() == like) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", x.shape().to_string(), " does not match ", like_what, " ", like.to_string()));
}

absl::StatusOr<ForwardResult> forward_then_add(core::Context& ctx, Module& module,
                                               const core::Tensor& x, const core::Tensor& residual) {
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult r, module.forward(ctx, x));
  COLOSSAL_ASSIGN_OR_RETURN(r.output, core::ops::add(ctx, r.output, residual));
  return r;
}

absl::Status accumulate_column_sums(core::Context& ctx, const core::Tensor& dy,
                                    core::Tensor& dbias) {
  const int64_t rows = dy.dim(0), n = dy.dim(1);
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor ones, empty(ctx, {1, rows}, dy.dtype()));
  COLOSSAL_RETURN_IF_ERROR(core::ops::fill(ctx, ones, 1.0));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor db2, dbias.reshape({1, n}));
  return core::gemm::gemm(ctx, ones, dy, db2, {.beta = 1.0});
}

absl::Status copy_2d(core::Context& ctx, void* dst, size_t dst_pitch, const void* src,
                     size_t src_pitch, size_t width, size_t height) {
  return core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx, kernels::copy::copy_2d_cpu(dst, dst_pitch, src, src_pitch, width, height),
          kernels::copy::copy_2d_cuda(dst, dst_pitch, src, src_pitch, width, height,
                                      cuda_stream(ctx))),
      "copy_2d");
}

}  // namespace colossal::nn
