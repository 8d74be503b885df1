// colossal::nn — learning-rate schedules: constant, linear warmup + cosine
// decay to eta_min, linear warmup + linear decay to eta_min.
//
// A schedule is a pure function of the step: lr_at(options, base_lr, step) is
// the learning rate of the optimizer step taken after `step` earlier steps
// (0 for the first). With W = warmup_steps, T = total_steps, m = eta_min:
//
//   warmup (every kind)  step < W:   base_lr * (step + 1) / W
//   constant             step >= W:  base_lr
//   cosine               W <= step < T:  m + (base_lr - m) * (1 + cos(pi * (step - W) / (T - W))) / 2
//   linear               W <= step < T:  m + (base_lr - m) * (T - step) / (T - W)
//   cosine, linear       step >= T:  m
//
// This is llm.c's and Colossal-AI's CosineAnnealingWarmupLR's warmup (the
// first step already gets base_lr / W and step W - 1 reaches base_lr) and
// torch's cosine annealing to eta_min. Colossal-AI's
// LinearWarmupLR warms up as (step + 1) / (W + 1) instead and always decays
// to 0; set eta_min = 0 for its decay. eta_min is absolute, shared by every
// parameter group (as torch's), and may not exceed any group's base lr.
// Errors name the field first ("lr schedule[ kind]: <field> ..."), so a
// front end can point at the setting.
//
// An LrScheduler applies a schedule to an optimizer's groups and keeps its
// only state, the step count:
//
//   LrScheduleOptions s;
//   s.kind = LrScheduleKind::kCosine;
//   s.warmup_steps = 700;
//   s.total_steps = 18865;
//   s.eta_min = 6e-5;
//   COLOSSAL_ASSIGN_OR_RETURN(LrScheduler sched, LrScheduler::create(s, opt->lrs()));
//   for (...) {
//     COLOSSAL_RETURN_IF_ERROR(opt->set_lrs(sched.lrs()));
//     ... opt->step() ...
//     sched.step();
//   }
//
// Create the scheduler from the configured optimizer (before loading an
// optimizer checkpoint, whose saved lrs are scheduled values, not base lrs),
// then restore its step with load_state().
#ifndef COLOSSAL_NN_SCHEDULE_LR_SCHEDULE_H_
#define COLOSSAL_NN_SCHEDULE_LR_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace colossal::nn {

enum class LrScheduleKind { kConstant, kCosine, kLinear };

// "constant", "cosine", "linear".
const char* lr_schedule_name(LrScheduleKind kind);
// Parses lr_schedule_name's spellings (ASCII case-insensitive); anything else
// is InvalidArgument naming the input, with a suggestion and the accepted names.
absl::StatusOr<LrScheduleKind> parse_lr_schedule(absl::string_view text);

struct LrScheduleOptions {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // cosine and linear: where the decay reaches eta_min
  double eta_min = 0.0;     // cosine and linear
};

// InvalidArgument naming the option (core::option_error: the message starts
// with the key, which it carries): warmup_steps < 0; for cosine and linear,
// total_steps < warmup_steps, eta_min negative or not finite, or above a
// group's base lr in `base_lrs`. A base lr negative or not finite:
// InvalidArgument naming the group.
absl::Status validate_lr_schedule(const LrScheduleOptions& options,
                                  absl::Span<const double> base_lrs = {});

// The learning rate for the step after `step` earlier ones (the formulas
// above). `options` must be valid; a negative step counts as 0.
double lr_at(const LrScheduleOptions& options, double base_lr, int64_t step);

// What a scheduler saves: the number of steps taken.
struct LrSchedulerState {
  int64_t step = 0;
  friend bool operator==(const LrSchedulerState&, const LrSchedulerState&) = default;
};
// {"step": 123}
std::string lr_scheduler_state_to_json(const LrSchedulerState& state);
// InvalidArgument naming the key for malformed JSON, a missing, non-integer or
// negative "step".
absl::StatusOr<LrSchedulerState> lr_scheduler_state_from_json(absl::string_view json);

class LrScheduler {
 public:
  // A schedule over groups whose base (peak) learning rates are `base_lrs`.
  // Errors: validate_lr_schedule's (options, base_lrs), after "lr schedule
  // <kind>: ".
  static absl::StatusOr<LrScheduler> create(const LrScheduleOptions& options,
                                            absl::Span<const double> base_lrs);

  // Each group's lr for the next optimizer step.
  std::vector<double> lrs() const;
  // Advances by one optimizer step.
  void step() { ++step_; }
  int64_t step_count() const { return step_; }

  const LrScheduleOptions& options() const { return options_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  LrSchedulerState state() const { return LrSchedulerState{step_}; }
  // Errors: a negative step.
  absl::Status load_state(const LrSchedulerState& state);

 private:
  LrScheduler(const LrScheduleOptions& options, std::vector<double> base_lrs)
      : options_(options), base_lrs_(std::move(base_lrs)) {}
  LrScheduleOptions options_;
  std::vector<double> base_lrs_;
  int64_t step_ = 0;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_SCHEDULE_LR_SCHEDULE_H_
