#include "parallel/registry/plugin_spec.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"

namespace colossal::parallel {

absl::StatusOr<nn::DynamicLossScalerOptions> read_loss_scaler(OptionSource& options,
                                                              double initial_scale) {
  nn::DynamicLossScalerOptions s;
  s.initial_scale = options.number("initial_scale", initial_scale);
  s.min_scale = options.number("min_scale", s.min_scale);
  s.max_scale = options.number("max_scale", s.max_scale);
  s.growth_factor = options.number("growth_factor", s.growth_factor);
  s.backoff_factor = options.number("backoff_factor", s.backoff_factor);
  s.growth_interval = options.integer("growth_interval", s.growth_interval);
  s.hysteresis = options.integer("hysteresis", s.hysteresis);
  COLOSSAL_RETURN_IF_ERROR(nn::validate_dynamic_loss_scaler(s));  // naming the key
  return s;
}

absl::StatusOr<int> int_option(OptionSource& options, absl::string_view key, int fallback) {
  const int64_t value = options.integer(key, fallback);
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
    return option_error(key, absl::StrCat("= ", value, " is out of range (at most ",
                                          std::numeric_limits<int>::max(), " in magnitude)"));
  }
  return static_cast<int>(value);
}

}  // namespace colossal::parallel
