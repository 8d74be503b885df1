// colossal.plugin and colossal.booster: Colossal-AI's Booster API over
// parallel/: one process without a plugin, or colossal.plugin.<name> for every
// plugin in parallel/registry (torch_ddp, low_level_zero, gemini,
// hybrid_parallel), pipeline stages through booster:execute_pipeline. The
// checkpoint methods are in checkpoint.cc.
//
//   local plugin = colossal.plugin.low_level_zero{ stage = 1, max_norm = 1.0 }
//   local booster = colossal.booster{ plugin = plugin }        -- or mixed_precision = "bf16"
//   model, optimizer, loader, sched = booster:boost(model, optimizer, loader, sched)
//   optimizer:zero_grad()
//   for i = 1, n do
//     local loss = model(loader:next()) / n
//     if i < n then
//       local _ <close> = booster:no_sync(model)   -- accumulate locally (ddp, stage 1; stage 2 refuses it)
//       booster:backward(loss, optimizer)
//     else
//       booster:backward(loss, optimizer)
//     end
//   end
//   optimizer:step()                                -- through the plugin
//   booster:save_checkpoint("checkpoints/run", { step = step })
//
// Precision: "fp32", "bf16" or "fp16" (Booster's mixed_precision, or the
// plugin's `precision`): boost converts a float32 model to 16 bits (its
// optimizer is rebuilt over the new parameters with float32 masters); fp16
// adds a dynamic loss scaler with the plugin's initial_scale, growth_factor,
// backoff_factor, growth_interval, hysteresis, min_scale and max_scale.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/ops/elementwise.h"
#include "core/status/status.h"
#include "io/checkpoint/checkpoint.h"
#include "lua/api/lua_util.h"
#include "lua/api/objects.h"
#include "nn/optim/grad_clip.h"
#include "parallel/booster/pipeline.h"
#include "parallel/registry/plugin_registry.h"

namespace colossal::lua {
namespace {

struct NoSyncGuard {
  static constexpr char kMetatable[] = "colossal.NoSync";
  static constexpr char kTypeName[] = "a no_sync guard";
  std::shared_ptr<BoosterObject> owner;
  std::optional<parallel::Booster::NoSync> guard;
};

std::string CheckPrecision(lua_State* L, OptionTable& o, const char* key, const char* fallback) {
  const std::string p = o.string(key, fallback);
  if (p != "fp32" && p != "bf16" && p != "fp16") {
    o.fail(key, absl::StrCat("must be \"fp32\", \"bf16\" or \"fp16\", got \"", p, "\""));
  }
  return p;
}

// A recipe's option table as the plugin packages read it (type errors raise,
// naming the key's line).
class LuaOptions : public parallel::OptionSource {
 public:
  explicit LuaOptions(OptionTable& o) : o_(o) {}
  bool has(absl::string_view key) override { return o_.has(std::string(key).c_str()); }
  double number(absl::string_view key, double fallback) override {
    return o_.number(std::string(key).c_str(), fallback);
  }
  int64_t integer(absl::string_view key, int64_t fallback) override {
    return o_.integer(std::string(key).c_str(), fallback);
  }
  bool boolean(absl::string_view key, bool fallback) override {
    return o_.boolean(std::string(key).c_str(), fallback);
  }
  std::string string(absl::string_view key, absl::string_view fallback) override {
    return o_.string(std::string(key).c_str(), std::string(fallback));
  }
  std::optional<std::vector<int64_t>> integers(absl::string_view key) override {
    return o_.integers(std::string(key).c_str());
  }

 private:
  OptionTable& o_;
};

// colossal.plugin.<name>{...}: the registered plugin named by upvalue 1.
int MakePluginSpec(lua_State* L) {
  const std::string name = lua_tostring(L, lua_upvalueindex(1));
  OptionTable o(L, 1, absl::StrCat("colossal.plugin.", name));
  LuaOptions options(o);
  absl::StatusOr<std::unique_ptr<parallel::PluginSpec>> spec =
      parallel::make_plugin_spec(name, options);
  o.finish();  // unknown keys first, then the values (an error naming its key)
  ThrowIfError(L, o.what(), spec.status());
  auto object = std::make_shared<PluginObject>();
  object->spec = *std::move(spec);
  PushHandle(L, std::move(object));
  return 1;
}

// plugin:capabilities() -> {name, owns_precision, supports_no_sync, clips_by_value, precision}
int PluginCapabilities(lua_State* L) {
  const parallel::PluginSpec& spec = *CheckHandle<PluginObject>(L, 1)->spec;
  const parallel::PluginCapabilities c = spec.capabilities();
  lua_newtable(L);
  lua_pushstring(L, spec.name());
  lua_setfield(L, -2, "name");
  lua_pushboolean(L, c.owns_precision);
  lua_setfield(L, -2, "owns_precision");
  lua_pushboolean(L, c.supports_no_sync);
  lua_setfield(L, -2, "supports_no_sync");
  lua_pushboolean(L, c.clips_by_value);
  lua_setfield(L, -2, "clips_by_value");
  lua_pushboolean(L, c.pipeline);
  lua_setfield(L, -2, "pipeline");
  lua_pushinteger(L, c.pipeline_micro_batch_multiple);
  lua_setfield(L, -2, "pipeline_micro_batch_multiple");
  lua_pushinteger(L, c.pipeline_num_micro_batches);
  lua_setfield(L, -2, "pipeline_num_micro_batches");
  lua_pushinteger(L, c.pipeline_micro_batch_size);
  lua_setfield(L, -2, "pipeline_micro_batch_size");
  if (c.owns_precision) {
    lua_pushstring(L, spec.precision().c_str());
    lua_setfield(L, -2, "precision");
  }
  return 1;
}

// colossal.booster{plugin, mixed_precision}
int MakeBooster(lua_State* L) {
  OptionTable o(L, 1, "colossal.booster");
  auto booster = std::make_shared<BoosterObject>();
  booster->rt = GetRuntime(L);
  if (o.push("plugin") != LUA_TNIL) booster->spec = CheckHandle<PluginObject>(L, -1)->spec;
  lua_pop(L, 1);
  booster->precision = CheckPrecision(L, o, "mixed_precision", "fp32");
  o.finish();
  if (booster->spec && booster->spec->capabilities().owns_precision) {
    // As in Colossal-AI, the ZeRO plugin's own precision decides.
    booster->precision = booster->spec->precision();
  }
  if (!booster->spec && booster->rt->rank.world_size > 1) {
    RaiseError(L,
               absl::StrCat("colossal.booster: this job has ", booster->rt->rank.world_size,
                            " processes; give a plugin (colossal.plugin.",
                            absl::StrJoin(parallel::plugin_names(), "{}, colossal.plugin."),
                            "{}) to train them together"),
               kErrorUsage);
  }
  PushHandle(L, std::move(booster));
  return 1;
}

// Gives the model `dtype`: a declared model is declared again in `dtype` (its
// memory comes later, in that dtype only); a model with memory is copied,
// rounded, into a new `dtype` model. The optimizer is rebuilt at boost's end.
absl::Status ConvertModel(Model& model, Optim& optim, core::DType dtype) {
  Runtime& rt = *model.rt;
  const core::Stream& stream = rt.ctx->compute_stream();
  optim.pending_lrs = OptimizerLrs(optim);
  optim.opt.reset();
  if (!model.net->store().materialized()) {
    COLOSSAL_ASSIGN_OR_RETURN(model.net, model.net->redeclare(dtype));
    return absl::OkStatus();
  }
  COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<nn::CausalLM> net, model.net->redeclare(dtype));
  COLOSSAL_RETURN_IF_ERROR(net->store().allocate(stream));
  core::Tensor out = net->store().flat_values(dtype);
  COLOSSAL_RETURN_IF_ERROR(
      core::ops::cast(*rt.ctx, out, model.net->store().flat_values(model.net->dtype())));
  model.net = std::move(net);
  return absl::OkStatus();
}

// Declares the model anew as the plugin splits it (tensor-parallel pieces,
// pipeline stages, sequence pieces); the optimizer is rebuilt at boost's end.
// A model with memory (used before boost) cannot be split: an error says so.
absl::Status SplitModel(Model& model, Optim& optim, const nn::ModelSplit& split) {
  if (model.net->store().materialized()) {
    return absl::FailedPreconditionError(
        "the plugin splits the model over tensor-parallel ranks or pipeline stages, but it "
        "already has memory (it was run or saved before boost); boost the model before using it");
  }
  optim.pending_lrs = OptimizerLrs(optim);
  optim.opt.reset();
  COLOSSAL_ASSIGN_OR_RETURN(model.net, model.net->redeclare(model.net->dtype(), split));
  return absl::OkStatus();
}

// booster:dp_size() -> the number of data-parallel copies after boost: the
// world without tensor or pipeline splits, world / (tp_size x pp_size) with
// them, 1 without a plugin. Tokens per step count each copy's batch once.
int BoosterDpSize(lua_State* L) {
  std::shared_ptr<BoosterObject> b = CheckHandle<BoosterObject>(L, 1);
  if (b->spec && !b->booster) RaiseError(L, "booster:dp_size: boost first", kErrorUsage);
  lua_pushinteger(L, b->booster ? b->booster->plugin().dp_size() : 1);
  return 1;
}

// booster:boost(model, optimizer[, dataloader[, lr_scheduler]]) -> the four, as the plugin
// wraps them (the loader reopened for its data-parallel rank and size if they differ)
int Boost(lua_State* L) {
  std::shared_ptr<BoosterObject> b = CheckHandle<BoosterObject>(L, 1);
  std::shared_ptr<Model> model = CheckHandle<Model>(L, 2);
  std::shared_ptr<Optim> optim = CheckHandle<Optim>(L, 3);
  if (!lua_isnoneornil(L, 4)) b->loader = CheckHandle<Loader>(L, 4);
  if (!lua_isnoneornil(L, 5)) b->scheduler = CheckHandle<Scheduler>(L, 5);
  if (b->model) RaiseError(L, "booster:boost: this booster has boosted a model already", kErrorUsage);
  if (model->boosted) RaiseError(L, "booster:boost: this model is boosted already", kErrorUsage);
  if (optim->model != model) {
    RaiseError(L, "booster:boost: the optimizer was made for another model", kErrorUsage);
  }
  if (b->scheduler && b->scheduler->optim != optim) {
    RaiseError(L, "booster:boost: the LR scheduler belongs to another optimizer", kErrorUsage);
  }
  if (b->precision != "fp32") {
    const core::DType dtype = b->precision == "bf16" ? core::DType::kBF16 : core::DType::kF16;
    if (!b->rt->device.is_cuda()) {
      RaiseError(L,
                 absl::StrCat("booster:boost: precision ", b->precision,
                              " needs a CUDA device; this process runs on the CPU (use fp32)"),
                 kErrorUsage);
    }
    ThrowIfError(L, "booster:boost", ConvertModel(*model, *optim, dtype));
  }
  if (b->precision == "fp16") {
    const nn::DynamicLossScalerOptions so =
        b->spec ? b->spec->loss_scaler() : nn::DynamicLossScalerOptions{};
    absl::StatusOr<nn::DynamicLossScaler> scaler = nn::DynamicLossScaler::create(so);
    ThrowIfError(L, "booster:boost", scaler.status());
    b->scaler.emplace(*std::move(scaler));
  }
  const std::string what =
      b->spec ? absl::StrCat("booster:boost: ", b->spec->name()) : "booster:boost";
  if (b->spec) {
    absl::StatusOr<std::shared_ptr<comm::ProcessGroup>> pg = b->rt->process_group();
    ThrowIfError(L, what, pg.status());
    parallel::PluginEnv env;
    env.local_world_size = b->rt->rank.local_world_size;
    env.host_cores = static_cast<int>(std::thread::hardware_concurrency());
    absl::StatusOr<std::unique_ptr<parallel::Plugin>> plugin = b->spec->make(*pg, env);
    ThrowIfError(L, what, plugin.status());
    b->booster = std::make_unique<parallel::Booster>(*std::move(plugin));
    absl::StatusOr<nn::ModelSplit> split = b->booster->plugin().model_split(*model->net);
    ThrowIfError(L, what, split.status());
    if (split->splits()) ThrowIfError(L, what, SplitModel(*model, *optim, *split));
    // A declared model gets its memory where the plugin puts it.
    if (!model->net->store().materialized()) {
      ThrowIfError(L, what,
                   b->booster->materialize(model->net->store(), model->seed,
                                           b->rt->ctx->compute_stream()));
      model->plugin_memory = !model->net->store().materialized();
    }
    // from_pretrained's weights go in now, before boost builds the plugin's
    // master weights from the model's (ZeRO's fp32 master slice); a plugin
    // keeping its own memory (gemini) takes them after boost, below.
    // A split model takes its pieces through the plugin.
    if (!model->plugin_memory && model->net->store().materialized()) {
      LoadPretrainedWeights(L, *model, split->splits() ? b->booster.get() : nullptr);
    }
  }
  // (An optimizer built before boost keeps its tensors: the plugins take both.)
  if (b->booster) model->declared_optimizer = b->booster->plugin().steps_declared_optimizer();
  nn::Optimizer& opt = BuiltOptimizer(L, *optim);  // materializes a model left declared
  if (b->booster) ThrowIfError(L, what, b->booster->boost(*model->net, model->net->store(), opt));
  // from_pretrained's weights into a plugin's own memory (gemini: its shards
  // are the fp32 masters), through the plugin (each rank takes its part).
  if (b->booster && model->plugin_memory) LoadPretrainedWeights(L, *model, b->booster.get());
  // The loader reads this rank's share of the plugin's data-parallel group
  // (Colossal-AI's prepare_dataloader): its rank and size differ from the
  // world's under tensor or pipeline parallelism. A loader made for another
  // split is reopened at the same point of the data, and boost returns it.
  if (b->loader && b->booster) {
    const parallel::Plugin& plugin = b->booster->plugin();
    const io::DataLoaderOptions& mine = b->loader->options;
    if (mine.rank != plugin.dp_rank() || mine.world_size != plugin.dp_size()) {
      auto reopened = std::make_shared<Loader>();
      reopened->options = mine;
      reopened->options.rank = plugin.dp_rank();
      reopened->options.world_size = plugin.dp_size();
      absl::StatusOr<std::unique_ptr<io::DataLoader>> opened = io::DataLoader::Open(reopened->options);
      ThrowIfError(L, absl::StrCat(what, ": the data loader"), opened.status());
      ThrowIfError(L, absl::StrCat(what, ": the data loader"),
                   (*opened)->set_state(b->loader->loader->state()));
      reopened->loader = *std::move(opened);
      b->loader = reopened;
      PushHandle(L, std::move(reopened));
      lua_replace(L, 4);
    }
  }
  model->boosted = true;
  model->booster = b;
  b->model = model;
  b->optim = optim;
  optim->booster = b;
  lua_settop(L, 5);
  lua_remove(L, 1);
  return 4;
}

// booster:backward(loss, optimizer)
int Backward(lua_State* L) {
  std::shared_ptr<BoosterObject> b = CheckHandle<BoosterObject>(L, 1);
  std::shared_ptr<Loss> loss = CheckHandle<Loss>(L, 2);
  std::shared_ptr<Optim> optim = CheckHandle<Optim>(L, 3);
  if (!b->model) RaiseError(L, "booster:backward: boost the model first", kErrorUsage);
  if (loss->model != b->model || optim != b->optim) {
    RaiseError(L, "booster:backward: the loss or optimizer is not the boosted one", kErrorUsage);
  }
  LossState& state = *loss->state;
  if (state.consumed) {
    RaiseError(L, "booster:backward: this loss went through backward already", kErrorUsage);
  }
  Runtime& rt = *b->rt;
  const double factor = loss->scale * (b->scaler ? b->scaler->scale() : 1.0);
  if (factor != 1.0) {
    ThrowIfError(L, "booster:backward",
                 core::ops::scale(*rt.ctx, state.dlogits, state.dlogits, factor));
  }
  state.consumed = true;
  ThrowIfError(L, "booster:backward", b->model->net->set_documents(state.documents));
  absl::Status status =
      b->booster ? b->booster->backward(*rt.ctx, *b->model->net, *state.saved, state.dlogits).status()
                 : b->model->net->backward(*rt.ctx, *state.saved, state.dlogits).status();
  state.saved.reset();
  state.dlogits = core::Tensor();
  ThrowIfError(L, "booster:backward", status);
  return 0;
}

// booster:execute_pipeline(model, {batch, ...} [, {weight, ...}]) -> the step's
// loss: one step's micro-batches through the plugin's pipeline stages (1F1B or
// interleaved, parallel/booster/pipeline.h), forward and backward; every stage
// gets the loss. Without weights each micro-batch counts 1 / n and the loss is
// their mean; with them (one a batch, finite, >= 0) micro-batch i's gradient is
// scaled by weight i and the loss is the weighted sum (the recipe loop's
// token-weighted steps).
int ExecutePipeline(lua_State* L) {
  std::shared_ptr<BoosterObject> b = CheckHandle<BoosterObject>(L, 1);
  std::shared_ptr<Model> model = CheckHandle<Model>(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  if (!b->booster || b->model != model) {
    RaiseError(L, "booster:execute_pipeline: boost the model first", kErrorUsage);
  }
  if (b->booster->plugin().pipeline() == nullptr) {
    RaiseError(L, absl::StrCat("booster:execute_pipeline: plugin ", b->spec->name(),
                               " has no pipeline stages (pp_size 1): use model(batch) and "
                               "booster:backward"),
               kErrorUsage);
  }
  Runtime& rt = *b->rt;
  std::vector<nn::MicroBatch> mbs;
  const lua_Integer n = luaL_len(L, 3);
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_geti(L, 3, i);
    std::shared_ptr<Batch> batch = CheckHandle<Batch>(L, -1);
    mbs.push_back({ToDevice(L, rt, batch->batch.inputs), ToDevice(L, rt, batch->batch.targets),
                   BatchDocuments(L, rt, *batch)});
    lua_pop(L, 1);
  }
  parallel::PipelineStepOptions o;
  o.loss_scale = b->scaler ? b->scaler->scale() : 1.0f;
  if (!lua_isnoneornil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    if (luaL_len(L, 4) != n) {
      RaiseError(L, absl::StrCat("booster:execute_pipeline: ", luaL_len(L, 4), " weights for ", n,
                                 " micro-batches"),
                 kErrorUsage);
    }
    for (lua_Integer i = 1; i <= n; ++i) {
      lua_geti(L, 4, i);
      int ok = 0;
      const double w = lua_tonumberx(L, -1, &ok);
      lua_pop(L, 1);
      if (!ok || !(w >= 0) || !std::isfinite(w)) {
        RaiseError(L, absl::StrCat("booster:execute_pipeline: weight ", i, " must be a finite number >= 0"),
                   kErrorUsage);
      }
      o.weights.push_back(w);
    }
  }
  absl::StatusOr<parallel::PipelineStepResult> r =
      parallel::execute_pipeline(*rt.ctx, *b->booster, *model->net, mbs, o);
  ThrowIfError(L, "booster:execute_pipeline", r.status());
  lua_pushnumber(L, r->loss);
  return 1;
}

int EndNoSync(lua_State* L) {
  void* memory = luaL_testudata(L, 1, NoSyncGuard::kMetatable);
  if (memory != nullptr) {
    auto& guard = *static_cast<std::shared_ptr<NoSyncGuard>*>(memory);
    if (guard) guard->guard.reset();
  }
  return 0;
}

// booster:no_sync(model) -> a to-be-closed guard: `local _ <close> = booster:no_sync(model)`
int NoSync(lua_State* L) {
  std::shared_ptr<BoosterObject> b = CheckHandle<BoosterObject>(L, 1);
  std::shared_ptr<Model> model = CheckHandle<Model>(L, 2);
  if (model != b->model) RaiseError(L, "booster:no_sync: not the boosted model", kErrorUsage);
  auto guard = std::make_shared<NoSyncGuard>();
  guard->owner = b;
  // One process without a plugin has nothing to synchronise.
  if (b->booster) guard->guard.emplace(b->booster->no_sync());
  PushHandle(L, std::move(guard));
  return 1;
}

}  // namespace

nn::MixedPrecisionStepResult StepOptimizer(lua_State* L, Optim& optim) {
  std::shared_ptr<BoosterObject> b = optim.booster.lock();
  nn::DynamicLossScaler* scaler = b && b->scaler ? &*b->scaler : nullptr;
  float max_norm = optim.max_norm;
  if (max_norm == 0 && b && b->spec) max_norm = b->spec->max_norm();
  const float clip_value = optim.clip_value;
  optim.max_norm = 0;
  optim.clip_value = 0;
  if (clip_value > 0) {
    if (scaler != nullptr) {
      RaiseError(L, "optimizer:step: clip_grad_by_value with fp16 loss scaling is not supported",
                 kErrorUsage);
    }
    if (b && b->spec && !b->spec->capabilities().clips_by_value) {
      // The plugin reduces (and may shard) the gradients inside its step.
      RaiseError(L,
                 absl::StrCat("optimizer:step: clip_grad_by_value is not supported with the ",
                              b->booster->plugin().name(), " plugin (use clip_grad_by_norm)"),
                 kErrorUsage);
    }
    ThrowIfError(L, "optimizer:clip_grad_by_value",
                 nn::clip_grad_by_value(BuiltOptimizer(L, optim).grads(), clip_value,
                                        optim.opt->stream()));
  }
  absl::StatusOr<nn::MixedPrecisionStepResult> r =
      b && b->booster ? b->booster->step({.max_norm = max_norm, .scaler = scaler})
                      : nn::mixed_precision_step(BuiltOptimizer(L, optim), scaler,
                                                 {.max_norm = max_norm});
  ThrowIfError(L, "optimizer:step", r.status());
  optim.last = *r;
  return *r;
}

int OpenBooster(lua_State* L) {
  static const luaL_Reg kNoMethods[] = {{nullptr, nullptr}};
  static const luaL_Reg kGuardMeta[] = {{"__close", EndNoSync}, {nullptr, nullptr}};
  RegisterType<NoSyncGuard>(L, kNoMethods, kGuardMeta);
  static const luaL_Reg kPluginMethods[] = {{"capabilities", Protected<PluginCapabilities>},
                                             {nullptr, nullptr}};
  RegisterType<PluginObject>(L, kPluginMethods);
  static const luaL_Reg kMethods[] = {{"boost", Protected<Boost>},
                                      {"backward", Protected<Backward>},
                                      {"no_sync", Protected<NoSync>},
                                      {"dp_size", Protected<BoosterDpSize>},
                                      {"execute_pipeline", Protected<ExecutePipeline>},
                                      {"save_checkpoint", Protected<BoosterSaveCheckpoint>},
                                      {"load_checkpoint", Protected<BoosterLoadCheckpoint>},
                                      {"save_model", Protected<BoosterSaveModel>},
                                      {"load_model", Protected<BoosterLoadModel>},
                                      {"save_optimizer", Protected<BoosterSaveOptimizer>},
                                      {"load_optimizer", Protected<BoosterLoadOptimizer>},
                                      {nullptr, nullptr}};
  RegisterType<BoosterObject>(L, kMethods);
  lua_pushcfunction(L, Protected<MakeBooster>);
  lua_setfield(L, -2, "booster");
  // colossal.plugin.<name> for every registered plugin.
  lua_newtable(L);
  for (const std::string& name : parallel::plugin_names()) {
    lua_pushstring(L, name.c_str());
    lua_pushcclosure(L, Protected<MakePluginSpec>, 1);
    lua_setfield(L, -2, name.c_str());
  }
  return 1;
}

}  // namespace colossal::lua
