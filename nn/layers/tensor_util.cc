#include "nn/layers/tensor_util.h"

#include "absl/strings/str_cat.h"
#include "core/gemm/gemm.h"
#include "core/status/status.h"
#include "kernels/copy/copy.h"
#include "kernels/elementwise/elementwise.h"

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

absl::StatusOr<core::Tensor> add(core::Context& ctx, const core::Tensor& a, const core::Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("add: ", a.to_string(), " and ", b.to_string(), " differ"));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor out, empty(ctx, a.shape(), a.dtype()));
  using kernels::elementwise::BinaryOp;
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(ctx,
                            kernels::elementwise::binary_cpu(out.raw_data(), a.raw_data(),
                                                             b.raw_data(), a.numel(), a.dtype(),
                                                             BinaryOp::kAdd),
                            kernels::elementwise::binary_cuda(out.raw_data(), a.raw_data(),
                                                              b.raw_data(), a.numel(), a.dtype(),
                                                              BinaryOp::kAdd, cuda_stream(ctx))),
      "add"));
  return out;
}

absl::StatusOr<ForwardResult> forward_then_add(core::Context& ctx, Module& module,
                                               const core::Tensor& x, const core::Tensor& residual) {
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult r, module.forward(ctx, x));
  COLOSSAL_ASSIGN_OR_RETURN(r.output, add(ctx, r.output, residual));
  return r;
}

absl::Status fill(core::Context& ctx, core::Tensor& x, double value) {
  return core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx, kernels::elementwise::fill_cpu(x.raw_data(), value, x.numel(), x.dtype()),
          kernels::elementwise::fill_cuda(x.raw_data(), value, x.numel(), x.dtype(),
                                          cuda_stream(ctx))),
      "fill");
}

absl::Status accumulate_column_sums(core::Context& ctx, const core::Tensor& dy,
                                    core::Tensor& dbias) {
  const int64_t rows = dy.dim(0), n = dy.dim(1);
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor ones, empty(ctx, {1, rows}, dy.dtype()));
  COLOSSAL_RETURN_IF_ERROR(fill(ctx, ones, 1.0));
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
