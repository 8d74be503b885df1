// colossal.optim and colossal.lr_scheduler, with Colossal-AI's names and
// parameters:
//
//   local opt = colossal.optim.hybrid_adam(model, { lr = 6e-4, betas = {0.9, 0.95},
//                                                   weight_decay = 0.1, adamw_mode = true })
//   local sched = colossal.lr_scheduler.cosine_annealing_warmup(opt,
//                    { warmup_steps = 700, total_steps = 19073, eta_min = 6e-5 })
//   opt:zero_grad(); ...; opt:clip_grad_by_norm(1.0); opt:step(); sched:step()
//
// Weight decay applies to weights only: biases and LayerNorm parameters are
// in a group without decay (nn::split_decay_groups), as GPT-2 recipes do.
// clip_grad_by_norm / clip_grad_by_value take effect in the next step():
// nothing reads the gradients in between, and the step (or the booster's
// plugin, which owns the reduced gradients) folds the clipping in.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "nn/optim/adam.h"
#include "nn/optim/module_params.h"
#include "nn/optim/param.h"
#include "nn/optim/sgd.h"
#include "lua/api/lua_util.h"
#include "lua/api/objects.h"

namespace colossal::lua {
namespace {

using MakeFn = decltype(Optim::make);

// nn::split_decay_groups splits the parameters into two groups (decay, no
// decay), each starting at the optimizer's lr.
constexpr size_t kGroups = 2;

// The optimizer is built over the parameters when they have memory: now for
// a model already materialized, else at boost (or at first use without one).
void PushOptimizer(lua_State* L, std::shared_ptr<Model> model, const std::string& name,
                   double lr, double weight_decay, MakeFn make) {
  auto optim = std::make_shared<Optim>();
  optim->rt = model->rt;
  optim->model = model;
  optim->name = name;
  optim->weight_decay = weight_decay;
  optim->pending_lrs.assign(kGroups, lr);
  optim->make = std::move(make);
  if (model->net->store().materialized()) BuiltOptimizer(L, *optim);
  PushHandle(L, std::move(optim));
}

// colossal.optim.{adamw,hybrid_adam,cpu_adam}(model, {lr, betas, eps, weight_decay, adamw_mode,
// bias_correction})
template <int kVariant>
int MakeAdam(lua_State* L) {
  static constexpr const char* kNames[] = {"adamw", "hybrid_adam", "cpu_adam"};
  const std::string name = kNames[kVariant];
  std::shared_ptr<Model> model = CheckHandle<Model>(L, 1);
  OptionTable o(L, 2, absl::StrCat("colossal.optim.", name));
  nn::AdamOptions a = kVariant == 0 ? nn::AdamOptions::adamw_defaults() : nn::AdamOptions{};
  a.lr = o.number("lr", a.lr);
  if (auto betas = o.numbers("betas", 2)) {
    a.beta1 = (*betas)[0];
    a.beta2 = (*betas)[1];
  }
  a.eps = o.number("eps", a.eps);
  a.weight_decay = o.number("weight_decay", a.weight_decay);
  a.bias_correction = o.boolean("bias_correction", a.bias_correction);
  if (kVariant != 0) a.adamw_mode = o.boolean("adamw_mode", a.adamw_mode);
  o.finish();
  // Checked here, where the recipe wrote them, not when the plugin builds
  // the optimizer (which would blame the plugin).
  static constexpr nn::AdamVariant kVariants[] = {nn::AdamVariant::kAdamW,
                                                  nn::AdamVariant::kHybridAdam,
                                                  nn::AdamVariant::kCpuAdam};
  ThrowIfError(L, o.what(), nn::check_adam_hyper(nn::adam_hyper(a), kVariants[kVariant]));
  PushOptimizer(L, model, name, a.lr, a.weight_decay,
                [a](std::vector<nn::ParamRef> params, const core::Stream& stream)
                    -> absl::StatusOr<std::unique_ptr<nn::Optimizer>> {
                  std::vector<nn::ParamGroup> groups =
                      nn::split_decay_groups(std::move(params), a.weight_decay);
                  absl::StatusOr<std::unique_ptr<nn::Adam>> opt =
                      kVariant == 0   ? nn::make_adamw(std::move(groups), a, stream)
                      : kVariant == 1 ? nn::make_hybrid_adam(std::move(groups), a, stream)
                                      : nn::make_cpu_adam(std::move(groups), a);
                  if (!opt.ok()) return opt.status();
                  return std::unique_ptr<nn::Optimizer>(*std::move(opt));
                });
  return 1;
}

// colossal.optim.sgd(model, {lr, momentum, dampening, weight_decay, nesterov})
int MakeSgd(lua_State* L) {
  std::shared_ptr<Model> model = CheckHandle<Model>(L, 1);
  OptionTable o(L, 2, "colossal.optim.sgd");
  nn::SgdOptions s;
  s.lr = o.number("lr", s.lr);
  s.momentum = o.number("momentum", s.momentum);
  s.dampening = o.number("dampening", s.dampening);
  s.weight_decay = o.number("weight_decay", s.weight_decay);
  s.nesterov = o.boolean("nesterov", s.nesterov);
  o.finish();
  ThrowIfError(L, o.what(), nn::check_sgd_hyper(nn::sgd_hyper(s)));
  PushOptimizer(L, model, "sgd", s.lr, s.weight_decay,
                [s](std::vector<nn::ParamRef> params, const core::Stream& stream)
                    -> absl::StatusOr<std::unique_ptr<nn::Optimizer>> {
                  std::vector<nn::ParamGroup> groups =
                      nn::split_decay_groups(std::move(params), s.weight_decay);
                  absl::StatusOr<std::unique_ptr<nn::Sgd>> opt =
                      nn::Sgd::create(std::move(groups), s, stream);
                  if (!opt.ok()) return opt.status();
                  return std::unique_ptr<nn::Optimizer>(*std::move(opt));
                });
  return 1;
}

int ZeroGrad(lua_State* L) {
  std::shared_ptr<Optim> optim = CheckHandle<Optim>(L, 1);
  if (std::shared_ptr<BoosterObject> b = optim->booster.lock(); b && b->booster) {
    ThrowIfError(L, "optimizer:zero_grad", b->booster->zero_grad());
  } else {
    ThrowIfError(L, "optimizer:zero_grad", BuiltOptimizer(L, *optim).zero_grad());
  }
  return 0;
}

float PositiveFinite(lua_State* L, int index, const char* what) {
  int ok = 0;
  const double v = lua_tonumberx(L, index, &ok);
  if (!ok || !(v > 0) || !std::isfinite(static_cast<float>(v))) {  // 1e300 would become inf
    RaiseError(L, absl::StrCat(what, ": wants a positive number, finite as a float32"), kErrorUsage);
  }
  return static_cast<float>(v);
}

int ClipByNorm(lua_State* L) {
  std::shared_ptr<Optim> optim = CheckHandle<Optim>(L, 1);
  optim->max_norm = PositiveFinite(L, 2, "optimizer:clip_grad_by_norm(max_norm)");
  return 0;
}

int ClipByValue(lua_State* L) {
  std::shared_ptr<Optim> optim = CheckHandle<Optim>(L, 1);
  optim->clip_value = PositiveFinite(L, 2, "optimizer:clip_grad_by_value(clip_value)");
  return 0;
}

// optimizer:step() -> {grad_norm, clip_coef, loss_scale, skipped}
int Step(lua_State* L) {
  std::shared_ptr<Optim> optim = CheckHandle<Optim>(L, 1);
  const nn::MixedPrecisionStepResult r = StepOptimizer(L, *optim);
  PushNumberTable(L, {{"grad_norm", r.grad_norm},
                      {"clip_coef", r.clip_coef},
                      {"loss_scale", r.loss_scale}});
  lua_pushboolean(L, r.skipped);
  lua_setfield(L, -2, "skipped");
  return 1;
}

// optimizer:get_lr() -> the first group's learning rate
int GetLr(lua_State* L) {
  lua_pushnumber(L, OptimizerLrs(*CheckHandle<Optim>(L, 1)).at(0));
  return 1;
}

// optimizer:set_lr(lr): every group's; lr >= 0 as in a recipe (0 holds the
// weights still), kept as the double given (the optimizer checks it against
// float32's range).
int SetLr(lua_State* L) {
  std::shared_ptr<Optim> optim = CheckHandle<Optim>(L, 1);
  int ok = 0;
  const double lr = lua_tonumberx(L, 2, &ok);
  if (!ok) RaiseError(L, "optimizer:set_lr(lr): wants a number", kErrorUsage);
  std::vector<double> lrs(OptimizerLrs(*optim).size(), lr);
  ThrowIfError(L, "optimizer:set_lr", SetOptimizerLrs(*optim, lrs));
  return 0;
}

// colossal.lr_scheduler.<kind>(optimizer, {...}) with Colossal-AI's names:
//   cosine_annealing_warmup {warmup_steps, total_steps, eta_min}  (CosineAnnealingWarmupLR)
//   linear_warmup {warmup_steps, total_steps, eta_min}           (LinearWarmupLR + linear decay)
//   constant {warmup_steps}
template <int kKind>
int MakeScheduler(lua_State* L) {
  static constexpr const char* kNames[] = {"cosine_annealing_warmup", "linear_warmup", "constant"};
  const std::string name = kNames[kKind];
  std::shared_ptr<Optim> optim = CheckHandle<Optim>(L, 1);
  OptionTable o(L, 2, absl::StrCat("colossal.lr_scheduler.", name));
  nn::LrScheduleOptions s;
  s.kind = kKind == 0 ? nn::LrScheduleKind::kCosine
           : kKind == 1 ? nn::LrScheduleKind::kLinear
                        : nn::LrScheduleKind::kConstant;
  s.warmup_steps = o.integer("warmup_steps", 0);
  bool has_total = false;  // constant takes no total_steps: left unread, finish() names it
  if (kKind != 2) {
    has_total = o.has("total_steps");
    s.total_steps = o.integer("total_steps", 0);
    s.eta_min = o.number("eta_min", 0.0);
  }
  o.finish();
  if (kKind != 2 && !has_total) o.fail("total_steps", "is required");
  auto sched = std::make_shared<Scheduler>();
  sched->optim = optim;
  sched->name = name;
  // The schedule's checks name the recipe's field (the error carries it).
  ThrowIfError(L, o.what(), nn::validate_lr_schedule(s, OptimizerLrs(*optim)));
  absl::StatusOr<nn::LrScheduler> made = nn::LrScheduler::create(s, OptimizerLrs(*optim));
  ThrowIfError(L, o.what(), made.status());
  sched->schedule = *std::move(made);
  ThrowIfError(L, o.what(), SetOptimizerLrs(*optim, sched->schedule->lrs()));
  PushHandle(L, std::move(sched));
  return 1;
}

int SchedulerStep(lua_State* L) {
  std::shared_ptr<Scheduler> sched = CheckHandle<Scheduler>(L, 1);
  sched->schedule->step();
  ThrowIfError(L, "lr_scheduler:step", SetOptimizerLrs(*sched->optim, sched->schedule->lrs()));
  return 0;
}

int SchedulerLr(lua_State* L) {
  lua_pushnumber(L, CheckHandle<Scheduler>(L, 1)->schedule->lrs().at(0));
  return 1;
}

}  // namespace

nn::Optimizer& BuiltOptimizer(lua_State* L, Optim& optim) {
  if (optim.opt != nullptr) return *optim.opt;
  MaterializeModel(L, *optim.model);
  const std::string what = absl::StrCat("colossal.optim.", optim.name);
  const core::Stream& stream = optim.rt->ctx->compute_stream();
  // A model whose memory a plugin keeps (gemini's chunks, ZeRO-2's
  // gradients), or whose plugin steps the optimizer itself, gets declared
  // parameters: groups and hyper-parameters, the plugin steps them.
  const nn::ParameterStore& store = optim.model->net->store();
  absl::StatusOr<std::vector<nn::ParamRef>> params =
      optim.model->declared_optimizer ? nn::declared_params(store.table())
                                      : nn::model_optimizer_params(store, stream);
  ThrowIfError(L, what, params.status());
  absl::StatusOr<std::unique_ptr<nn::Optimizer>> opt = optim.make(*std::move(params), stream);
  ThrowIfError(L, what, opt.status());
  ThrowIfError(L, what, (*opt)->set_lrs(optim.pending_lrs));
  optim.opt = *std::move(opt);
  return *optim.opt;
}

std::vector<double> OptimizerLrs(const Optim& optim) {
  return optim.opt != nullptr ? optim.opt->lrs() : optim.pending_lrs;
}

absl::Status SetOptimizerLrs(Optim& optim, const std::vector<double>& lrs) {
  if (optim.opt != nullptr) return optim.opt->set_lrs(lrs);
  if (lrs.size() != optim.pending_lrs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(lrs.size(), " learning rates for ",
                                                   optim.pending_lrs.size(), " groups"));
  }
  // Checked now as the built optimizer would, not when it is built.
  for (double lr : lrs) COLOSSAL_RETURN_IF_ERROR(nn::require_float_hyper("lr", lr));
  optim.pending_lrs = lrs;
  return absl::OkStatus();
}

int OpenOptim(lua_State* L) {
  static const luaL_Reg kMethods[] = {{"zero_grad", Protected<ZeroGrad>},
                                      {"step", Protected<Step>},
                                      {"clip_grad_by_norm", Protected<ClipByNorm>},
                                      {"clip_grad_by_value", Protected<ClipByValue>},
                                      {"get_lr", Protected<GetLr>},
                                      {"set_lr", Protected<SetLr>},
                                      {nullptr, nullptr}};
  RegisterType<Optim>(L, kMethods);
  static const luaL_Reg kFunctions[] = {{"adamw", Protected<MakeAdam<0>>},
                                        {"hybrid_adam", Protected<MakeAdam<1>>},
                                        {"cpu_adam", Protected<MakeAdam<2>>},
                                        {"sgd", Protected<MakeSgd>},
                                        {nullptr, nullptr}};
  luaL_newlib(L, kFunctions);
  return 1;
}

int OpenScheduler(lua_State* L) {
  static const luaL_Reg kMethods[] = {{"step", Protected<SchedulerStep>},
                                      {"get_last_lr", Protected<SchedulerLr>},
                                      {nullptr, nullptr}};
  RegisterType<Scheduler>(L, kMethods);
  static const luaL_Reg kFunctions[] = {
      {"cosine_annealing_warmup", Protected<MakeScheduler<0>>},
      {"linear_warmup", Protected<MakeScheduler<1>>},
      {"constant", Protected<MakeScheduler<2>>},
      {nullptr, nullptr}};
  luaL_newlib(L, kFunctions);
  return 1;
}

}  // namespace colossal::lua
