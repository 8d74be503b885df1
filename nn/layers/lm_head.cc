#include "nn/layers/lm_head.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/gemm/gemm.h"
#include "core/status/status.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {
namespace {

struct LmHeadSaved : Saved {
  SavedStats stats() const override { return saved_stats({x}); }
  core::Tensor x;  // the input [B, T, C]
};

}  // namespace

LmHead::LmHead(std::string name, std::string weight_name, int64_t vocab, int64_t channels,
               core::DType dtype, bool declare_weight, const TensorParallel& tp)
    : Module(std::move(name)),
      weight_name_(std::move(weight_name)),
      vocab_(vocab),
      channels_(channels),
      dtype_(dtype),
      declare_weight_(declare_weight),
      tp_(tp) {}

absl::Status LmHead::declare_own(ParameterTable& table) {
  if (!declare_weight_) return absl::OkStatus();
  return table.add(weight_name_, {vocab_, channels_}, dtype_, InitRule::normal(kDefaultInitStd),
                   tp_.split(0));
}

absl::Status LmHead::bind_own(const ParameterStore& store) {
  COLOSSAL_ASSIGN_OR_RETURN(weight_, store.handle(weight_name_));
  return absl::OkStatus();
}

absl::StatusOr<ForwardResult> LmHead::forward_impl(core::Context& ctx, const core::Tensor& input) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, input, "input"));
  COLOSSAL_RETURN_IF_ERROR(require_dtype(input, dtype_, "input"));
  if (input.rank() != 3 || input.dim(2) != channels_) {
    return absl::InvalidArgumentError(
        absl::StrCat("input is ", input.to_string(), "; expected [B, T, ", channels_, "]"));
  }
  if (tp_.enabled()) {
    // A region of its own: this rank's vocabulary rows of every position.
    COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor x, region_input(ctx, tp_, input));
    return project(ctx, x);
  }
  return project(ctx, input);
}

absl::StatusOr<ForwardResult> LmHead::project(core::Context& ctx, const core::Tensor& input) {
  const int64_t B = input.dim(0), T = input.dim(1);
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor x2, input.reshape({B * T, channels_}));
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor w, weight_.value());
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor logits, core::gemm::matmul(ctx, x2, w, {.trans_b = true}));
  COLOSSAL_ASSIGN_OR_RETURN(logits, logits.reshape({B, T, w.dim(0)}));
  auto saved = std::make_unique<LmHeadSaved>();
  saved->x = input;
  return ForwardResult{logits, std::move(saved)};
}

absl::StatusOr<core::Tensor> LmHead::backward_impl(core::Context& ctx, Saved& saved,
                                                   const core::Tensor& grad_output) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, grad_output, "dlogits"));
  COLOSSAL_RETURN_IF_ERROR(require_dtype(grad_output, dtype_, "dlogits"));
  COLOSSAL_ASSIGN_OR_RETURN(LmHeadSaved * s, saved_as<LmHeadSaved>(saved));
  const int64_t B = s->x.dim(0), T = s->x.dim(1);
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor w, weight_.value());
  if (grad_output.shape() != core::Shape{B, T, w.dim(0)}) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dlogits are ", grad_output.to_string(), "; expected [", B, ", ", T, ", ", w.dim(0), "]"));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dlogits, grad_output.reshape({B * T, w.dim(0)}));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor x2, s->x.reshape({B * T, channels_}));
  // logits = x W^T: dx = dlogits W, then dW += dlogits^T x while dx's
  // reduction over the group runs.
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dx, core::gemm::matmul(ctx, dlogits, w));
  COLOSSAL_ASSIGN_OR_RETURN(dx, dx.reshape({B, T, channels_}));
  RegionGrad reduction(tp_, 1);
  COLOSSAL_RETURN_IF_ERROR(reduction.contributed(ctx, dx));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dw, weight_.grad());
  COLOSSAL_RETURN_IF_ERROR(core::gemm::gemm(ctx, dlogits, x2, dw, {.trans_a = true, .beta = 1.0}));
  return reduction.finish(ctx);
}

}  // namespace colossal::nn
