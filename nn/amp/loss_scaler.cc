#include "nn/amp/loss_scaler.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "nlohmann/json.hpp"

namespace colossal::nn {
namespace {

absl::Status bad_option(absl::string_view name, double value, absl::string_view rule) {
  return core::option_error(name, absl::StrCat(rule, ", got ", value));
}

bool valid_scale(float s) { return std::isfinite(s) && s > 0.0f; }

}  // namespace

absl::StatusOr<DynamicLossScaler> DynamicLossScaler::create(const DynamicLossScalerOptions& o) {
  COLOSSAL_RETURN_IF_ERROR(core::annotate(validate_dynamic_loss_scaler(o), "dynamic loss scaler"));
  return DynamicLossScaler(o);
}

absl::Status validate_dynamic_loss_scaler(const DynamicLossScalerOptions& o) {
  if (!std::isfinite(o.initial_scale) || !(o.initial_scale > 0) ||
      o.initial_scale > std::numeric_limits<float>::max()) {
    return bad_option("initial_scale", o.initial_scale, "must be a positive finite float32");
  }
  if (!std::isfinite(o.growth_factor) || !(o.growth_factor > 1)) {
    return bad_option("growth_factor", o.growth_factor, "must be > 1");
  }
  if (!std::isfinite(o.backoff_factor) || !(o.backoff_factor > 0) || !(o.backoff_factor < 1)) {
    return bad_option("backoff_factor", o.backoff_factor, "must be in (0, 1)");
  }
  if (o.growth_interval < 1) {
    return bad_option("growth_interval", static_cast<double>(o.growth_interval), "must be >= 1");
  }
  if (o.hysteresis < 0) {
    return bad_option("hysteresis", static_cast<double>(o.hysteresis), "must be >= 0");
  }
  if (!std::isfinite(o.min_scale) || o.min_scale < 0) {
    return bad_option("min_scale", o.min_scale, "must be >= 0 (0: no minimum)");
  }
  if (!std::isfinite(o.max_scale) || o.max_scale < 0) {
    return bad_option("max_scale", o.max_scale, "must be >= 0 (0: no maximum)");
  }
  if (o.min_scale > 0 && o.max_scale > 0 && o.min_scale > o.max_scale) {
    return core::option_error("min_scale", absl::StrCat("(", o.min_scale, ") is above max_scale (",
                                                        o.max_scale, ")"));
  }
  return absl::OkStatus();
}

DynamicLossScaler::DynamicLossScaler(const DynamicLossScalerOptions& options)
    : options_(options), scale_(static_cast<float>(options.initial_scale)) {}

void DynamicLossScaler::update(bool overflow) {
  if (overflow) {
    ++hysteresis_step_;
    growth_step_ = 0;
    if (hysteresis_step_ >= options_.hysteresis) {
      scale_ = scale_ * static_cast<float>(options_.backoff_factor);
      const float lo = static_cast<float>(options_.min_scale);
      if (options_.min_scale > 0 && scale_ < lo) scale_ = lo;
    }
    return;
  }
  ++growth_step_;
  if (growth_step_ == options_.growth_interval) {
    growth_step_ = 0;
    hysteresis_step_ = 0;
    scale_ = scale_ * static_cast<float>(options_.growth_factor);
    const float hi = static_cast<float>(options_.max_scale);
    if (options_.max_scale > 0 && scale_ > hi) scale_ = hi;
  }
}

absl::Status DynamicLossScaler::load_state(const LossScalerState& s) {
  if (!valid_scale(s.scale) || s.growth_step < 0 || s.hysteresis_step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dynamic loss scaler: load_state needs a positive finite scale and counters >= 0, got "
        "scale ", s.scale, ", growth_step ", s.growth_step, ", hysteresis_step ", s.hysteresis_step));
  }
  scale_ = s.scale;
  growth_step_ = s.growth_step;
  hysteresis_step_ = s.hysteresis_step;
  return absl::OkStatus();
}

std::string loss_scaler_state_to_json(const LossScalerState& state) {
  nlohmann::json j = nlohmann::json::object();
  j["scale"] = static_cast<double>(state.scale);
  j["growth_step"] = state.growth_step;
  j["hysteresis_step"] = state.hysteresis_step;
  return j.dump();
}

absl::StatusOr<LossScalerState> loss_scaler_state_from_json(absl::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("loss scaler state JSON: ", e.what()));
  }
  if (!j.is_object()) return absl::InvalidArgumentError("loss scaler state JSON: expected an object");
  LossScalerState s;
  const auto scale = j.find("scale");
  if (scale == j.end() || !scale->is_number()) {
    return absl::InvalidArgumentError("loss scaler state JSON: missing number \"scale\"");
  }
  s.scale = static_cast<float>(scale->get<double>());
  for (const char* key : {"growth_step", "hysteresis_step"}) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("loss scaler state JSON: missing integer \"", key, "\""));
    }
    (std::string(key) == "growth_step" ? s.growth_step : s.hysteresis_step) = it->get<int64_t>();
  }
  if (!valid_scale(s.scale) || s.growth_step < 0 || s.hysteresis_step < 0) {
    return absl::InvalidArgumentError(
        "loss scaler state JSON: \"scale\" must be positive and finite, counters >= 0");
  }
  return s;
}

}  // namespace colossal::nn
