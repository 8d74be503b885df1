// colossal::nn — the fp16 dynamic loss scaler, with Colossal-AI's parameters
// and semantics (colossalai.amp.naive_amp.grad_scaler.DynamicGradScaler).
//
// fp16 gradients underflow unless the loss is multiplied by a large scale
// before backward; the scale must come down when gradients overflow and goes
// back up after a stretch of good steps. Each step reports whether any
// gradient was inf/NaN:
//
//   overflow:   hysteresis_step += 1; growth_step = 0;
//               if hysteresis_step >= hysteresis: scale = max(scale * backoff_factor, min_scale)
//   no overflow: growth_step += 1;
//               if growth_step == growth_interval:
//                 growth_step = 0; hysteresis_step = 0; scale = min(scale * growth_factor, max_scale)
//
// So `hysteresis` overflows are tolerated before the first back-off, counted
// since the last growth (good steps in between do not reset the count, and
// once it is reached every further overflow backs off until the next growth),
// and growth needs growth_interval consecutive good steps. Defaults are
// Colossal-AI's booster plugins' (initial_scale 2^16, growth_factor 2,
// backoff_factor 0.5, growth_interval 1000, hysteresis 2, min_scale 1,
// max_scale 2^32). The scale is a float32 and every update is one float32
// multiply, as Colossal-AI's scale tensor; min_scale = 0 or max_scale = 0
// means no bound (Colossal-AI's None). The initial scale is not clamped.
//
// A step whose gradients overflowed must be skipped: Optimizer::step with
// StepOptions::found_inf, or nn/amp/mixed_precision_step.h, which does the
// whole sequence (norm, update, skip or step with the right unscale).
//
//   COLOSSAL_ASSIGN_OR_RETURN(DynamicLossScaler scaler, DynamicLossScaler::create());
//   const float scale = scaler.scale();       // multiply the loss by it, then backward
//   ... bool overflow = !grad_norm(grads, stream)->finite; ...
//   scaler.update(overflow);
//   if (!overflow) opt->step({.grad_scale = scale});  // the scale the loss was multiplied by
//
// State (for checkpoints): the scale and both counters, so a resumed run
// continues exactly (Colossal-AI saves only the scale and the options).
#ifndef COLOSSAL_NN_AMP_LOSS_SCALER_H_
#define COLOSSAL_NN_AMP_LOSS_SCALER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace colossal::nn {

struct DynamicLossScalerOptions {
  double initial_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 1000;
  int64_t hysteresis = 2;
  double min_scale = 1.0;           // 0: no minimum
  double max_scale = 4294967296.0;  // 2^32; 0: no maximum
};

// What a scaler saves.
struct LossScalerState {
  float scale = 65536.0f;
  int64_t growth_step = 0;
  int64_t hysteresis_step = 0;
  friend bool operator==(const LossScalerState&, const LossScalerState&) = default;
};

// {"scale": 65536.0, "growth_step": 12, "hysteresis_step": 1}
std::string loss_scaler_state_to_json(const LossScalerState& state);
// InvalidArgument naming the key for malformed JSON, a missing or mistyped
// key, a non-positive scale or negative counters.
absl::StatusOr<LossScalerState> loss_scaler_state_from_json(absl::string_view json);

// create's checks: InvalidArgument naming the option (core::option_error:
// the message starts with the key, which it carries).
absl::Status validate_dynamic_loss_scaler(const DynamicLossScalerOptions& options);

class DynamicLossScaler {
 public:
  // Errors (InvalidArgument naming the option), as Colossal-AI's sanity
  // checks: initial_scale not positive and finite, growth_factor <= 1,
  // backoff_factor outside (0, 1), growth_interval < 1, hysteresis < 0,
  // min_scale or max_scale negative or not finite, min_scale > max_scale
  // (both set), initial_scale not representable as a float32.
  // The messages are validate_dynamic_loss_scaler's after "dynamic loss scaler: ".
  static absl::StatusOr<DynamicLossScaler> create(const DynamicLossScalerOptions& options = {});

  // The current scale: multiply the loss by it before backward.
  float scale() const { return scale_; }
  // 1 / scale, computed in double and rounded to float (as Colossal-AI).
  float inv_scale() const { return static_cast<float>(1.0 / static_cast<double>(scale_)); }

  // Feeds one step's result (the file comment's state machine).
  void update(bool overflow);

  int64_t growth_step() const { return growth_step_; }
  int64_t hysteresis_step() const { return hysteresis_step_; }
  const DynamicLossScalerOptions& options() const { return options_; }

  LossScalerState state() const { return LossScalerState{scale_, growth_step_, hysteresis_step_}; }
  // Errors: a scale not positive and finite, negative counters.
  absl::Status load_state(const LossScalerState& state);

 private:
  explicit DynamicLossScaler(const DynamicLossScalerOptions& options);
  DynamicLossScalerOptions options_;
  float scale_;
  int64_t growth_step_ = 0;
  int64_t hysteresis_step_ = 0;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_AMP_LOSS_SCALER_H_
