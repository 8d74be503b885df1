#include "nn/optim/param.h"

#include <cmath>
#include <limits>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/ops/elementwise.h"
#include "core/status/status.h"
#include "nn/optim/device_util.h"

namespace colossal::nn {

absl::StatusOr<ParamRef> make_master_param(std::string name, const core::Tensor& model_weight,
                                           core::Tensor grad, const core::Stream& stream) {
  const std::string what = absl::StrCat("parameter \"", name, "\"");
  if (!model_weight.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": undefined weight"));
  }
  if (!grad.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": undefined gradient (a plugin that keeps only a shard of the gradients, such as "
              "low_level_zero stage 2, took them at boost: build the optimizer before boost)"));
  }
  const core::DType dt = model_weight.dtype();
  if (dt != core::DType::kF32 && dt != core::DType::kF16 && dt != core::DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": model weights must be float32, float16 or bfloat16, got ", model_weight.to_string()));
  }
  if (grad.shape() != model_weight.shape() || grad.device() != model_weight.device()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": gradient ", grad.to_string(),
                                                   " does not match the weight ",
                                                   model_weight.to_string()));
  }
  if (dt == core::DType::kF32) return ParamRef{std::move(name), model_weight, std::move(grad), {}, {}};
  COLOSSAL_ASSIGN_OR_RETURN(core::Stream s, internal::stream_for(model_weight.device(), stream, what));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor master,
                            core::Tensor::empty(model_weight.shape(), core::DType::kF32, s));
  COLOSSAL_RETURN_IF_ERROR(
      core::annotate(core::ops::cast(s, master, model_weight), absl::StrCat(what, ": master copy")));
  return ParamRef{std::move(name), std::move(master), std::move(grad), model_weight, {}};
}

GroupHyperParams resolve_group(const ParamGroup& group, const GroupHyperParams& defaults) {
  GroupHyperParams h = defaults;
  if (group.lr) h.lr = *group.lr;
  if (group.weight_decay) h.weight_decay = *group.weight_decay;
  if (group.beta1) h.beta1 = *group.beta1;
  if (group.beta2) h.beta2 = *group.beta2;
  if (group.eps) h.eps = *group.eps;
  if (group.momentum) h.momentum = *group.momentum;
  if (group.dampening) h.dampening = *group.dampening;
  if (group.nesterov) h.nesterov = *group.nesterov;
  return h;
}

ParamRef declared_param(std::string name, core::Shape shape) {
  ParamRef p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  return p;
}

bool is_no_decay(const ParamRef& param, const NoDecayRule& rule) {
  if (rule.low_rank) {
    const core::Shape& shape = param.master.defined() ? param.master.shape() : param.shape;
    if (shape.rank() <= 1) return true;
  }
  for (const std::string& s : rule.name_suffixes) {
    if (absl::EndsWith(param.name, s)) return true;
  }
  for (const std::string& s : rule.name_substrings) {
    if (absl::StrContains(param.name, s)) return true;
  }
  return false;
}

std::vector<ParamGroup> split_decay_groups(std::vector<ParamRef> params, double weight_decay,
                                           const NoDecayRule& rule) {
  std::vector<ParamGroup> groups(2);
  groups[0].weight_decay = weight_decay;
  groups[1].weight_decay = 0.0;
  for (ParamRef& p : params) {
    groups[is_no_decay(p, rule) ? 1 : 0].params.push_back(std::move(p));
  }
  return groups;
}

bool valid_float_hyper(double x) {
  return std::isfinite(x) && x >= 0 && x <= std::numeric_limits<float>::max();
}

absl::Status require_float_hyper(absl::string_view name, double value) {
  if (valid_float_hyper(value)) return absl::OkStatus();
  return core::option_error(name, absl::StrCat("must be >= 0 (a finite float32), got ", value));
}

}  // namespace colossal::nn
