// colossal::parallel — the Plugin interface a Booster drives.
//
// A plugin (Colossal-AI's `Plugin`) decides how a model trains on several
// ranks and where its parameters live: `ddp` (parallel/ddp/ddp_plugin.h)
// replicates the model and averages gradients; `low_level_zero`
// (parallel/zero/low_level_zero_plugin.h) also shards the optimizer state and,
// at stage 2, the gradients. Users never call these methods: the Booster
// (parallel/booster/booster.h) calls them in this order:
//
//   materialize(store, seed, stream)               once, for a model only declared
//   boost(model, store, optimizer)                 once
//   { begin_forward(ctx) -> model.forward -> end_forward(ok) }     per micro-batch,
//   { begin_backward(ctx, sync) -> model.backward -> end_backward(ok) }  evaluation too
//   before_step(stream)                            gradients final -> optimizer.step()
//                                                  (or the plugin's step() when owns_step())
//   model_state_dict / load_model_state_dict,
//   optimizer_state_dict / load_optimizer_state_dict  checkpoints, between steps
//
// Per-module work (gather a module's parameters before it runs, release them
// after, reduce its gradients as its backward ends) goes into Module hooks,
// which boost() installs (nn/module/module.h).
//
//   class MyPlugin : public Plugin { ... };
//   Booster booster(std::make_unique<MyPlugin>());  // see booster.h
#ifndef COLOSSAL_PARALLEL_BOOSTER_PLUGIN_H_
#define COLOSSAL_PARALLEL_BOOSTER_PLUGIN_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "core/device/stream.h"
#include "nn/amp/loss_scaler.h"
#include "nn/amp/mixed_precision_step.h"
#include "comm/process_group/process_group.h"
#include "nn/layers/tensor_parallel.h"
#include "nn/models/causal_lm/causal_lm.h"
#include "nn/module/module.h"
#include "nn/module/parameter.h"
#include "nn/optim/optimizer.h"
#include "nn/optim/state_dict.h"

namespace colossal::parallel {

// The whole model's values as a new host store of `store`'s table (copied on
// `stream`, waited for), and the copy of such a state into `store`: what
// plugins whose ranks hold the whole model do for model_state_dict, and what
// one process without a plugin does.
absl::StatusOr<nn::ParameterStore> replicated_model_state(const nn::ParameterStore& store,
                                                          const core::Stream& stream);
absl::Status load_replicated_model_state(nn::ParameterStore& store, const nn::ParameterStore& state,
                                         const core::Stream& stream);
// The whole model as a plugin streams it (Plugin::stream_model_state, run by
// `stream` on every rank: a collective), collected: a host store of `table`
// holding every piece where `hold`, declared only (no memory) elsewhere.
// InvalidArgument for a piece outside its parameter or of another dtype.
absl::StatusOr<nn::ParameterStore> collected_model_state(
    const nn::ParameterTable& table, bool hold,
    const std::function<absl::Status(const nn::StatePieceFn&)>& stream);

class Plugin {
 public:
  virtual ~Plugin() = default;
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  // The plugin's name as recipes write it ("ddp").
  virtual const char* name() const = 0;
  // This process's data-parallel rank and the number of data-parallel ranks:
  // what io::DataLoaderOptions::rank / world_size must be set to.
  virtual int dp_rank() const = 0;
  virtual int dp_size() const = 0;
  // How `model` must be split on this rank (hybrid_parallel: its tp group
  // and its pipeline stage). Whoever boosts a model declares it so first
  // (nn::CausalLM::redeclare), before materialize. Default: whole.
  // Errors: a model that does not split so (too few layers: InvalidArgument).
  virtual absl::StatusOr<nn::ModelSplit> model_split(const nn::CausalLM& model) const {
    return nn::ModelSplit{};
  }
  // Pipeline parallelism: the group of this rank's stages, in stage order,
  // and this rank's stage; null without pipeline stages. With one, a step's
  // micro-batches run through execute_pipeline (parallel/booster/pipeline.h),
  // not one forward and backward at a time.
  struct Pipeline {
    // Rank i of both runs stage i: `p2p` carries the point-to-point sends,
    // `group` the collectives (stages send different numbers of messages, so
    // one group's operation counts would differ between them).
    std::shared_ptr<comm::ProcessGroup> group, p2p;
    int stage = 0;
    int stages = 1;
    // Model chunks per stage (nn::PipelineStage::chunks): > 1 runs the
    // interleaved schedule.
    int chunks = 1;
  };
  virtual const Pipeline* pipeline() const { return nullptr; }

  // Gives the declared parameters of `store` (nn::ParameterStore::declare)
  // their memory as this plugin lays them out, and their initial values
  // (each entry's init rule drawn from `seed`, by flat offset, so every layout
  // holds the same values), on `stream`'s device. The default, for plugins
  // where every rank holds the whole model (ddp, low_level_zero): the
  // replicated flat buffers (ParameterStore::allocate), then initialize().
  // Errors: the store has memory already (FailedPrecondition); the device
  // is too small (ResourceExhausted naming the bytes).
  [[nodiscard]] virtual absl::Status materialize(nn::ParameterStore& store, uint64_t seed,
                                                 const core::Stream& stream);
  // Whether `store`'s parameters have their memory as this plugin lays them
  // out (what Booster::boost requires). Default: store.materialized() (every
  // parameter has a view); plugins that keep parameters in memory of their
  // own (gemini's chunks) answer for it.
  virtual bool materialized(const nn::ParameterStore& store) const { return store.materialized(); }
  // Takes over `model`, whose parameters are the views of `store`, trained by
  // `optimizer` (whose gradients must be the store's gradient views). Called
  // once, by Booster::boost. Errors are the plugin's (InvalidArgument naming
  // the mismatch; a collective's failure).
  [[nodiscard]] virtual absl::Status boost(nn::Module& model, const nn::ParameterStore& store,
                                           nn::Optimizer& optimizer) = 0;
  // Around the model's forward (training, evaluation and generation alike):
  // a plugin that does not keep every parameter resident gathers or
  // prefetches here. `ok` is false when the forward failed. Defaults: nothing.
  [[nodiscard]] virtual absl::Status begin_forward(core::Context& ctx) { return absl::OkStatus(); }
  [[nodiscard]] virtual absl::Status end_forward(bool ok) { return absl::OkStatus(); }
  // Before the model's backward of one micro-batch. `sync` is false inside a
  // no_sync scope: gradients must only accumulate locally.
  [[nodiscard]] virtual absl::Status begin_backward(core::Context& ctx, bool sync) = 0;
  // After the model's backward returned (`ok` false when it failed).
  [[nodiscard]] virtual absl::Status end_backward(bool ok) = 0;
  // Before the optimizer step: every gradient is final and ready for work
  // enqueued on `stream` (the optimizer's).
  [[nodiscard]] virtual absl::Status before_step(const core::Stream& stream) = 0;

  // Plugins that shard the optimizer state (low_level_zero) update the
  // parameters themselves: owns_step() true, and Booster::step calls step()
  // after before_step() instead of nn::mixed_precision_step on the optimizer
  // (same result fields and clipping semantics: global norm over every rank).
  virtual bool owns_step() const { return false; }
  // A plugin that owns the step and keeps its own masters and state may
  // take an optimizer of declared parameters (nn::declared_params: groups,
  // hyper-parameters, names and shapes, no tensors): whoever builds the
  // optimizer for it then makes no float32 masters the plugin would only
  // drop at boost (4 bytes a parameter of a 16-bit model). Default: false.
  virtual bool steps_declared_optimizer() const { return false; }
  // After the optimizer's zero_grad (Booster::zero_grad): plugins keeping
  // gradients of their own (ZeRO-2's gradient shard), or stepping a
  // declared optimizer, clear them.
  [[nodiscard]] virtual absl::Status zero_grad() { return absl::OkStatus(); }
  // Makes the weights in the model's store current for reads other than the
  // forward's (tests, direct copies): a plugin that finishes the step's
  // weights only as the next forward reaches each module (low_level_zero's
  // overlap_allgather) waits for them here, on the host.
  [[nodiscard]] virtual absl::Status sync_weights() { return absl::OkStatus(); }
  virtual absl::StatusOr<nn::MixedPrecisionStepResult> step(nn::DynamicLossScaler* scaler,
                                                            float max_norm) {
    return absl::UnimplementedError("this plugin leaves the step to the optimizer");
  }

  // The whole model's parameters, as a store of the same table holding them
  // in one process's replicated layout, on the host. to_rank >= 0: only that
  // rank needs them (it writes the file; the others may get an empty store:
  // declared, no memory); -1: every rank. A collective for plugins that
  // shard the parameters: every rank calls it. The default (every rank holds
  // the whole model: ddp, low_level_zero) copies `store`'s values to the host
  // on `stream` (on to_rank only).
  virtual absl::StatusOr<nn::ParameterStore> model_state_dict(const nn::ParameterStore& store,
                                                              int to_rank,
                                                              const core::Stream& stream);
  // Writes `state` (a host store of the same table, e.g. read from a
  // checkpoint, on every rank) into `store` as this plugin lays it out. The
  // default copies the whole buffers on `stream` and waits for the copy.
  // Errors: another table (InvalidArgument); a copy's failure.
  [[nodiscard]] virtual absl::Status load_model_state_dict(nn::ParameterStore& store,
                                                           const nn::ParameterStore& state,
                                                           const core::Stream& stream);

  // The optimizer state of the whole model, in the format (keys, shapes,
  // meta) of nn::Optimizer::state_dict() of one process, and its restore (from
  // any world size). `optimizer` is the boosted one. The default forwards to
  // the optimizer (plugins whose optimizer holds the whole state: ddp); its
  // tensors are then views of the optimizer's memory. Plugins that shard the
  // state (low_level_zero) gather it: a collective, every rank must call it.
  // to_rank >= 0: only that rank needs the tensors (it writes the file); the
  // others may get the meta alone and so never hold the whole state (a
  // sharding plugin still runs the collective on every rank). -1: every rank.
  virtual absl::StatusOr<nn::OptimizerStateDict> optimizer_state_dict(
      const nn::Optimizer& optimizer, int to_rank = -1) {
    return optimizer.state_dict();
  }
  [[nodiscard]] virtual absl::Status load_optimizer_state_dict(
      nn::Optimizer& optimizer, const nn::OptimizerStateDict& state) {
    return optimizer.load_state_dict(state);
  }

  // Plugins whose state may not fit one host (gemini: models larger than the
  // GPU fill the host too) hand it out in pieces for checkpoints, which then
  // never hold the whole model or optimizer state at once: streams_state()
  // true, and saves call the two functions below instead of
  // model_state_dict / optimizer_state_dict.
  virtual bool streams_state() const { return false; }
  // Calls `piece` on `to_rank` with every element of every parameter of the
  // whole model (by index in its table: `store`'s, unless the plugin splits
  // the model: hybrid_parallel), in one process's layout, on the host.
  // A collective: every rank calls it; on other ranks `piece` is not called.
  [[nodiscard]] virtual absl::Status stream_model_state(const nn::ParameterStore& store, int to_rank,
                                                        const nn::StatePieceFn& piece) {
    return absl::UnimplementedError("this plugin does not stream its model state");
  }
  // The optimizer state of optimizer_state_dict, its large tensors declared
  // and streamed to `to_rank` by the result's `write` (a collective: every
  // rank calls it once).
  virtual absl::StatusOr<nn::StreamedOptimizerState> stream_optimizer_state(const nn::Optimizer& optimizer,
                                                                            int to_rank) {
    return absl::UnimplementedError("this plugin does not stream its optimizer state");
  }

 protected:
  Plugin() = default;
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_BOOSTER_PLUGIN_H_
