#include "nn/schedule/lr_schedule.h"

#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "core/status/suggest.h"
#include "nlohmann/json.hpp"

namespace colossal::nn {
namespace {

constexpr absl::string_view kNames[] = {"constant", "cosine", "linear"};
constexpr double kPi = 3.14159265358979323846;

}  // namespace

const char* lr_schedule_name(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::kConstant: return "constant";
    case LrScheduleKind::kCosine: return "cosine";
    case LrScheduleKind::kLinear: return "linear";
  }
  return "unknown";
}

absl::StatusOr<LrScheduleKind> parse_lr_schedule(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (lower == "constant") return LrScheduleKind::kConstant;
  if (lower == "cosine") return LrScheduleKind::kCosine;
  if (lower == "linear") return LrScheduleKind::kLinear;
  return absl::InvalidArgumentError(absl::StrCat("unknown lr schedule \"", text, "\"",
                                                 core::did_you_mean(lower, kNames),
                                                 " (accepted: constant, cosine, linear)"));
}

absl::Status validate_lr_schedule(const LrScheduleOptions& o, absl::Span<const double> base_lrs) {
  if (o.warmup_steps < 0) {
    return core::option_error("warmup_steps", absl::StrCat("must be >= 0, got ", o.warmup_steps));
  }
  if (o.kind != LrScheduleKind::kConstant && o.total_steps < o.warmup_steps) {
    return core::option_error("total_steps", absl::StrCat("(", o.total_steps, ") must be >= warmup_steps (",
                                                          o.warmup_steps, ")"));
  }
  if (o.kind != LrScheduleKind::kConstant && (!std::isfinite(o.eta_min) || o.eta_min < 0)) {
    return core::option_error("eta_min", absl::StrCat("must be >= 0, got ", o.eta_min));
  }
  for (size_t g = 0; g < base_lrs.size(); ++g) {
    const double lr = base_lrs[g];
    if (!std::isfinite(lr) || lr < 0) {
      return absl::InvalidArgumentError(absl::StrCat("the base lr of group ", g, " must be >= 0, got ", lr));
    }
    if (o.kind != LrScheduleKind::kConstant && lr < o.eta_min) {
      return core::option_error("eta_min", absl::StrCat("(", o.eta_min, ") is above the base lr of group ", g,
                                                        " (", lr, ")"));
    }
  }
  return absl::OkStatus();
}

double lr_at(const LrScheduleOptions& o, double base_lr, int64_t step) {
  if (step < 0) step = 0;
  const int64_t w = o.warmup_steps;
  if (step < w) return base_lr * static_cast<double>(step + 1) / static_cast<double>(w);
  if (o.kind == LrScheduleKind::kConstant) return base_lr;
  const int64_t t = o.total_steps;
  if (step >= t) return o.eta_min;
  const double span = static_cast<double>(t - w);
  if (o.kind == LrScheduleKind::kCosine) {
    const double progress = static_cast<double>(step - w) / span;
    return o.eta_min + (base_lr - o.eta_min) * 0.5 * (1.0 + std::cos(kPi * progress));
  }
  return o.eta_min + (base_lr - o.eta_min) * static_cast<double>(t - step) / span;
}

std::string lr_scheduler_state_to_json(const LrSchedulerState& state) {
  nlohmann::json j = nlohmann::json::object();
  j["step"] = state.step;
  return j.dump();
}

absl::StatusOr<LrSchedulerState> lr_scheduler_state_from_json(absl::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("lr scheduler state JSON: ", e.what()));
  }
  if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer() ||
      j["step"].get<int64_t>() < 0) {
    return absl::InvalidArgumentError(
        "lr scheduler state JSON: needs \"step\", an integer >= 0 (e.g. {\"step\": 100})");
  }
  return LrSchedulerState{j["step"].get<int64_t>()};
}

absl::StatusOr<LrScheduler> LrScheduler::create(const LrScheduleOptions& options,
                                                absl::Span<const double> base_lrs) {
  COLOSSAL_RETURN_IF_ERROR(core::annotate(validate_lr_schedule(options, base_lrs),
                                          absl::StrCat("lr schedule ", lr_schedule_name(options.kind))));
  return LrScheduler(options, std::vector<double>(base_lrs.begin(), base_lrs.end()));
}

std::vector<double> LrScheduler::lrs() const {
  std::vector<double> out;
  for (double base : base_lrs_) out.push_back(lr_at(options_, base, step_));
  return out;
}

absl::Status LrScheduler::load_state(const LrSchedulerState& state) {
  if (state.step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lr scheduler: a saved step must be >= 0, got ", state.step));
  }
  step_ = state.step;
  return absl::OkStatus();
}

}  // namespace colossal::nn
