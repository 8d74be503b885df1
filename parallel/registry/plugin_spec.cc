#include "parallel/registry/plugin_spec.h"

#include <cstdint>
#include <limits>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace colossal::parallel {
namespace {
constexpr char kOptionKeyUrl[] = "colossal.dev/option_key";
}

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
  absl::Status valid = nn::DynamicLossScaler::create(s).status();
  if (!valid.ok()) return option_error_from(valid, "dynamic loss scaler: ");
  return s;
}

absl::Status option_error_from(const absl::Status& status, absl::string_view prefix) {
  absl::string_view message = status.message();
  if (status.ok() || !absl::ConsumePrefix(&message, prefix)) return status;
  const size_t space = message.find(' ');
  if (space == 0 || space == absl::string_view::npos) return status;
  return option_error(message.substr(0, space), message.substr(space + 1));
}

absl::StatusOr<int> int_option(OptionSource& options, absl::string_view key, int fallback) {
  const int64_t value = options.integer(key, fallback);
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
    return option_error(key, absl::StrCat("= ", value, " is out of range (at most ",
                                          std::numeric_limits<int>::max(), " in magnitude)"));
  }
  return static_cast<int>(value);
}

absl::Status option_error(absl::string_view key, absl::string_view message) {
  absl::Status s = absl::InvalidArgumentError(message);
  s.SetPayload(kOptionKeyUrl, absl::Cord(key));
  return s;
}

std::optional<std::string> option_key(const absl::Status& status) {
  absl::optional<absl::Cord> key = status.GetPayload(kOptionKeyUrl);
  if (!key.has_value()) return std::nullopt;
  return std::string(*key);
}

}  // namespace colossal::parallel
