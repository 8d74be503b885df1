// colossal::lua — the C++ objects behind the `colossal` module's userdata.
//
// Each type names its metatable and how errors describe it. Objects keep
// shared_ptrs to what they use (an optimizer its model, a booster everything
// it boosted, all of them the Runtime), never the other way round, so there
// are no cycles and Lua may collect them in any order.
#ifndef COLOSSAL_LUA_API_OBJECTS_H_
#define COLOSSAL_LUA_API_OBJECTS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"
#include "io/loader/data_loader.h"
#include "lua/api/runtime.h"
#include "nn/amp/loss_scaler.h"
#include "nn/amp/mixed_precision_step.h"
#include "nn/models/causal_lm/causal_lm.h"
#include "nn/module/module.h"
#include "nn/optim/optimizer.h"
#include "nn/schedule/lr_schedule.h"
#include "parallel/booster/booster.h"
#include "parallel/registry/plugin_spec.h"

namespace colossal::lua {

struct BoosterObject;

// colossal.model.gpt2 / colossal.model.llama declare the model (no parameter memory). Its memory
// comes from booster:boost (the plugin's layout, in the boost's precision), or,
// for a model used without a booster, from MaterializeModel on the runtime's
// device at first use.
struct Model {
  static constexpr char kMetatable[] = "colossal.Model";
  static constexpr char kTypeName[] = "a model (colossal.model.gpt2 or .llama)";
  std::shared_ptr<Runtime> rt;
  std::unique_ptr<nn::CausalLM> net;
  uint64_t seed = 0;  // the initial values' Philox seed
  // from_pretrained: a Hugging Face directory whose weights replace the
  // initial values once the model has memory (MaterializeModel, or boost).
  std::string pretrained_dir;
  bool pretrained_loaded = false;
  bool boosted = false;
  // The plugin keeps the parameters in memory of its own (gemini's chunks):
  // the store has no views, and nothing must allocate the replicated layout.
  bool plugin_memory = false;
  // Set by booster:boost when its plugin steps an optimizer of declared
  // parameters (Plugin::steps_declared_optimizer): the optimizer built then
  // has no tensors (no float32 masters made only to be dropped).
  bool declared_optimizer = false;
  // Set by booster:boost: forward, evaluate and generate run through it.
  std::weak_ptr<BoosterObject> booster;
};

// Gives a declared model its memory on the runtime's device and its initial
// values (the one-device layout, then from_pretrained's weights); nothing
// when it has memory already.
void MaterializeModel(lua_State* L, Model& model);

// from_pretrained's weights, once per model: into a store with its memory
// (the one-device layout, or a plugin's replicated one) before boost, so that
// a plugin's fp32 master weights start from them; or, with `booster` (boosted,
// its plugin keeping the memory: gemini), through the plugin.
void LoadPretrainedWeights(lua_State* L, Model& model, parallel::Booster* booster = nullptr);

// A forward pass waiting for its backward: the activations and dlogits of
// d(mean loss)/d(logits). Released by the backward.
struct LossState {
  std::unique_ptr<nn::Saved> saved;
  core::Tensor dlogits;
  // The batch's packed documents (null: none): set again for the backward,
  // whose activation-checkpointing recompute reads them.
  std::shared_ptr<const nn::Documents> documents;
  float value = 0.0f;
  bool consumed = false;
};

struct Loss {
  static constexpr char kMetatable[] = "colossal.Loss";
  static constexpr char kTypeName[] = "a loss (model(batch))";
  std::shared_ptr<Model> model;
  std::shared_ptr<LossState> state;
  double scale = 1.0;  // loss / n  ->  scale 1/n, applied to dlogits in backward
};

struct Batch {
  static constexpr char kMetatable[] = "colossal.Batch";
  static constexpr char kTypeName[] = "a batch (loader:next())";
  io::Batch batch;
};

struct Loader {
  static constexpr char kMetatable[] = "colossal.DataLoader";
  static constexpr char kTypeName[] = "a data loader (colossal.data.loader)";
  io::DataLoaderOptions options;
  std::unique_ptr<io::DataLoader> loader;
};

struct Optim {
  static constexpr char kMetatable[] = "colossal.Optimizer";
  static constexpr char kTypeName[] = "an optimizer (colossal.optim.*)";
  std::shared_ptr<Runtime> rt;
  std::shared_ptr<Model> model;
  // Built over the model's parameters once they have memory (BuiltOptimizer):
  // null while the model is only declared.
  std::unique_ptr<nn::Optimizer> opt;
  // The groups' learning rates while `opt` is null (set_lr and LR schedulers
  // work before boost); handed to `opt` when it is built.
  std::vector<double> pending_lrs;
  // Builds `opt` over a model's parameters (BuiltOptimizer gives them):
  // booster:boost calls it again when it converts the model to 16-bit (the
  // parameters are new tensors).
  std::function<absl::StatusOr<std::unique_ptr<nn::Optimizer>>(std::vector<nn::ParamRef>,
                                                               const core::Stream&)>
      make;
  std::string name;
  double weight_decay = 0.0;
  // clip_grad_by_norm / clip_grad_by_value set these for the next step().
  float max_norm = 0.0f;
  float clip_value = 0.0f;
  // Set by booster:boost: step() goes through the booster.
  std::weak_ptr<BoosterObject> booster;
  nn::MixedPrecisionStepResult last;
};

struct Scheduler {
  static constexpr char kMetatable[] = "colossal.LRScheduler";
  static constexpr char kTypeName[] = "an LR scheduler (colossal.lr_scheduler.*)";
  std::shared_ptr<Optim> optim;
  std::string name;
  std::optional<nn::LrScheduler> schedule;
};

// A plugin as constructed in Lua (its options read and validated by the
// plugin's package: parallel/registry); the parallel::Plugin itself is made by
// booster:boost (it needs the process group, made then).
struct PluginObject {
  static constexpr char kMetatable[] = "colossal.Plugin";
  static constexpr char kTypeName[] = "a plugin (colossal.plugin.*)";
  std::shared_ptr<const parallel::PluginSpec> spec;
};

struct BoosterObject {
  static constexpr char kMetatable[] = "colossal.Booster";
  static constexpr char kTypeName[] = "a booster (colossal.booster)";
  std::shared_ptr<Runtime> rt;
  std::shared_ptr<const parallel::PluginSpec> spec;  // null: one process, no plugin
  std::string precision = "fp32";    // "fp32", "bf16" or "fp16"
  std::unique_ptr<parallel::Booster> booster;
  std::optional<nn::DynamicLossScaler> scaler;  // fp16
  std::shared_ptr<Model> model;
  std::shared_ptr<Optim> optim;
  std::shared_ptr<Loader> loader;
  std::shared_ptr<Scheduler> scheduler;
  int no_sync_depth = 0;
};

// A batch tensor (host) on the runtime's device; raises on failure.
core::Tensor ToDevice(lua_State* L, Runtime& rt, const core::Tensor& host);
// The batch's packed documents on the runtime's device (null when the loader
// gave no positions); raises on failure.
std::shared_ptr<const nn::Documents> BatchDocuments(lua_State* L, Runtime& rt, const Batch& batch);

// Module pieces: each pushes its table of functions (and registers its
// metatables). module.cc assembles them into `colossal`.
int OpenModel(lua_State* L);      // colossal.model
int OpenData(lua_State* L);       // colossal.data
int OpenOptim(lua_State* L);      // colossal.optim
int OpenScheduler(lua_State* L);  // colossal.lr_scheduler
int OpenBooster(lua_State* L);    // colossal.plugin; sets colossal.booster on the table at -2
// Adds launch, env, clock, memory, reset_peak_memory, device_info,
// trace_start, trace_stop, jsonl, term, settings and _key_line to the table
// on top of the stack.
int OpenUtil(lua_State* L);

// The command line's `--set key=value` list, which colossal.settings(t)
// applies (util.cc); OverridesApplied says whether a script called it.
void SetOverrides(lua_State* L, const std::vector<std::string>& assignments);
bool OverridesApplied(lua_State* L);

// booster:save_checkpoint / load_checkpoint / save_model / load_model /
// save_optimizer / load_optimizer (checkpoint.cc).
int BoosterSaveCheckpoint(lua_State* L);
int BoosterLoadCheckpoint(lua_State* L);
int BoosterSaveModel(lua_State* L);
int BoosterLoadModel(lua_State* L);
int BoosterSaveOptimizer(lua_State* L);
int BoosterLoadOptimizer(lua_State* L);
int LatestCheckpoint(lua_State* L);  // colossal.checkpoint.latest(root) -> path or nil

// The optimizer, built first if the model had no memory yet (which gives the
// model its memory on the runtime's device: used without a booster).
nn::Optimizer& BuiltOptimizer(lua_State* L, Optim& optim);
// The groups' learning rates, and setting them, whether or not `opt` is built.
std::vector<double> OptimizerLrs(const Optim& optim);
absl::Status SetOptimizerLrs(Optim& optim, const std::vector<double>& lrs);

// The optimizer's step through its booster when boosted, else directly
// (booster.cc); used by optimizer:step().
nn::MixedPrecisionStepResult StepOptimizer(lua_State* L, Optim& optim);

}  // namespace colossal::lua

#endif  // COLOSSAL_LUA_API_OBJECTS_H_
