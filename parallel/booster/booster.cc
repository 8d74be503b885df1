#include "parallel/booster/booster.h"

#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/check.h"
#include "core/status/status.h"
#include "core/trace/trace.h"
#include "nn/models/causal_lm/causal_lm.h"

namespace colossal::parallel {

Booster::Booster(std::unique_ptr<Plugin> plugin) : plugin_(std::move(plugin)) {
  COLOSSAL_CHECK(plugin_ != nullptr);
}

absl::Status Booster::check_model(const nn::Module& model, const char* what) const {
  if (model_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("Booster::", what, " before Booster::boost"));
  }
  // A pipeline stage's model chunks run as modules of their own.
  const auto* lm = dynamic_cast<const nn::CausalLM*>(model_);
  if (&model != model_ && (lm == nullptr || !lm->is_chunk(model))) {
    return absl::InvalidArgumentError(absl::StrCat("Booster::", what, ": ", model.description(),
                                                   " is not the boosted model ",
                                                   model_->description()));
  }
  return absl::OkStatus();
}

absl::Status Booster::materialize(nn::ParameterStore& store, uint64_t seed,
                                  const core::Stream& stream) {
  if (model_ != nullptr) {
    return absl::FailedPreconditionError("Booster::materialize after Booster::boost");
  }
  return core::annotate(plugin_->materialize(store, seed, stream),
                        absl::StrCat("plugin ", plugin_->name(), ": materialize"));
}

absl::Status Booster::boost(nn::Module& model, const nn::ParameterStore& store,
                            nn::Optimizer& optimizer) {
  if (model_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("Booster::boost: already boosted ", model_->description(),
                     "; make one Booster per model"));
  }
  if (!plugin_->materialized(store)) {
    return absl::FailedPreconditionError(
        absl::StrCat("Booster::boost: the parameters of ", model.description(),
                     " have no memory; materialize them first (Booster::materialize)"));
  }
  COLOSSAL_RETURN_IF_ERROR(core::annotate(plugin_->boost(model, store, optimizer),
                                          absl::StrCat("plugin ", plugin_->name(), ": boost")));
  model_ = &model;
  store_ = store;
  optimizer_ = &optimizer;
  return absl::OkStatus();
}

absl::StatusOr<nn::ForwardResult> Booster::forward(core::Context& ctx, nn::Module& model,
                                                   const core::Tensor& input) {
  COLOSSAL_RETURN_IF_ERROR(check_model(model, "forward"));
  COLOSSAL_RETURN_IF_ERROR(core::annotate(plugin_->begin_forward(ctx),
                                          absl::StrCat("plugin ", plugin_->name())));
  absl::StatusOr<nn::ForwardResult> result = model.forward(ctx, input);
  const absl::Status end = plugin_->end_forward(result.ok());
  if (!result.ok()) return result.status();
  COLOSSAL_RETURN_IF_ERROR(core::annotate(end, absl::StrCat("plugin ", plugin_->name())));
  return result;
}

absl::StatusOr<core::Tensor> Booster::backward(core::Context& ctx, nn::Module& model,
                                               nn::Saved& saved, const core::Tensor& grad_output) {
  COLOSSAL_RETURN_IF_ERROR(check_model(model, "backward"));
  const bool sync = sync_enabled();
  COLOSSAL_RETURN_IF_ERROR(core::annotate(plugin_->begin_backward(ctx, sync),
                                          absl::StrCat("plugin ", plugin_->name())));
  absl::StatusOr<core::Tensor> result = model.backward(ctx, saved, grad_output);
  const absl::Status end = plugin_->end_backward(result.ok());
  if (!result.ok()) return result.status();
  COLOSSAL_RETURN_IF_ERROR(core::annotate(end, absl::StrCat("plugin ", plugin_->name())));
  unsynced_ = !sync;
  return result;
}

absl::StatusOr<nn::MixedPrecisionStepResult> Booster::step(const BoosterStepOptions& options) {
  if (optimizer_ == nullptr) {
    return absl::FailedPreconditionError("Booster::step before Booster::boost");
  }
  std::optional<core::trace::Span> span;
  if (core::trace::enabled()) span.emplace("optimizer", "step", &optimizer_->stream());
  if (unsynced_) {
    return absl::FailedPreconditionError(
        "Booster::step: the last backward ran under no_sync, so the gradients were not reduced "
        "and differ by rank; run the last micro-batch's backward outside no_sync");
  }
  COLOSSAL_RETURN_IF_ERROR(core::annotate(plugin_->before_step(optimizer_->stream()),
                                          absl::StrCat("plugin ", plugin_->name())));
  if (plugin_->owns_step()) {
    if (!std::isfinite(options.max_norm) || options.max_norm < 0.0f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Booster::step: max_norm must be >= 0 (0: no clipping), got ", options.max_norm));
    }
    absl::StatusOr<nn::MixedPrecisionStepResult> r =
        plugin_->step(options.scaler, options.max_norm);
    if (!r.ok()) {
      return core::annotate(r.status(), absl::StrCat("plugin ", plugin_->name(), ": step"));
    }
    return r;
  }
  nn::MixedPrecisionStepOptions step;
  step.max_norm = options.max_norm;
  return nn::mixed_precision_step(*optimizer_, options.scaler, step);
}

absl::Status Booster::zero_grad() {
  if (optimizer_ == nullptr) {
    return absl::FailedPreconditionError("Booster::zero_grad before Booster::boost");
  }
  COLOSSAL_RETURN_IF_ERROR(optimizer_->zero_grad());
  return core::annotate(plugin_->zero_grad(), absl::StrCat("plugin ", plugin_->name()));
}

absl::Status Booster::sync_weights() {
  if (optimizer_ == nullptr) {
    return absl::FailedPreconditionError("Booster::sync_weights before Booster::boost");
  }
  return core::annotate(plugin_->sync_weights(), absl::StrCat("plugin ", plugin_->name()));
}

absl::StatusOr<nn::OptimizerStateDict> Booster::optimizer_state_dict(int to_rank) {
  if (optimizer_ == nullptr) {
    return absl::FailedPreconditionError("Booster::optimizer_state_dict before Booster::boost");
  }
  absl::StatusOr<nn::OptimizerStateDict> sd = plugin_->optimizer_state_dict(*optimizer_, to_rank);
  if (!sd.ok()) {
    return core::annotate(sd.status(),
                          absl::StrCat("plugin ", plugin_->name(), ": optimizer_state_dict"));
  }
  return sd;
}

absl::Status Booster::load_optimizer_state_dict(const nn::OptimizerStateDict& state) {
  if (optimizer_ == nullptr) {
    return absl::FailedPreconditionError(
        "Booster::load_optimizer_state_dict before Booster::boost");
  }
  return core::annotate(plugin_->load_optimizer_state_dict(*optimizer_, state),
                        absl::StrCat("plugin ", plugin_->name(), ": load_optimizer_state_dict"));
}

absl::StatusOr<nn::ParameterStore> Booster::model_state_dict(int to_rank,
                                                             const core::Stream& stream) {
  if (model_ == nullptr) {
    return absl::FailedPreconditionError("Booster::model_state_dict before Booster::boost");
  }
  return plugin_->model_state_dict(store_, to_rank, stream);
}

absl::Status Booster::load_model_state_dict(const nn::ParameterStore& state,
                                            const core::Stream& stream) {
  if (model_ == nullptr) {
    return absl::FailedPreconditionError("Booster::load_model_state_dict before Booster::boost");
  }
  return plugin_->load_model_state_dict(store_, state, stream);
}

absl::Status Booster::stream_model_state(int to_rank, const nn::StatePieceFn& piece) {
  if (model_ == nullptr) {
    return absl::FailedPreconditionError("Booster::stream_model_state before Booster::boost");
  }
  return plugin_->stream_model_state(store_, to_rank, piece);
}

absl::StatusOr<nn::StreamedOptimizerState> Booster::stream_optimizer_state(int to_rank) {
  if (optimizer_ == nullptr) {
    return absl::FailedPreconditionError("Booster::stream_optimizer_state before Booster::boost");
  }
  absl::StatusOr<nn::StreamedOptimizerState> sd = plugin_->stream_optimizer_state(*optimizer_, to_rank);
  if (!sd.ok()) {
    return core::annotate(sd.status(), absl::StrCat("plugin ", plugin_->name(), ": stream_optimizer_state"));
  }
  return sd;
}

}  // namespace colossal::parallel
