#include "nn/layers/rotary.h"

#include "absl/strings/str_cat.h"
#include "core/status/status.h"

namespace colossal::nn {

absl::StatusOr<std::shared_ptr<RotaryTable>> RotaryTable::create(
    int64_t head_dim, double theta, const std::optional<kernels::rope::Llama3RopeScaling>& llama3) {
  if (head_dim <= 0 || head_dim % 2 != 0 || !(theta > 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat("rotary embedding: head_dim ", head_dim,
                                                   " (must be even and positive), rope_theta ",
                                                   theta, " (must be positive)"));
  }
  std::shared_ptr<RotaryTable> table(new RotaryTable());
  table->head_dim_ = head_dim;
  COLOSSAL_ASSIGN_OR_RETURN(table->host_, core::Tensor::empty({head_dim / 2}, core::DType::kF32,
                                                              core::Stream::cpu()));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      kernels::rope::rope_inv_freq(table->host_.data<float>(), head_dim, theta,
                                   llama3.has_value() ? &*llama3 : nullptr),
      "rotary embedding frequencies"));
  return table;
}

absl::StatusOr<core::Tensor> RotaryTable::on_device(core::Context& ctx) {
  if (ctx.device().is_cpu()) return host_;
  std::lock_guard<std::mutex> lock(mu_);
  for (const core::Tensor& t : device_) {
    if (t.device() == ctx.device()) return t;
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor copy, host_.to(ctx.device(), ctx.compute_stream()));
  device_.push_back(copy);
  return copy;
}

}  // namespace colossal::nn
