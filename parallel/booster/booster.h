// colossal::parallel — Booster: one training loop, any parallel plugin.
//
// Colossal-AI's Booster in C++. A Booster is made with a plugin (how ranks
// share the work: parallel/ddp for data parallelism), boosts the model and
// optimizer (the plugin takes them over: DDP broadcasts rank 0's weights and
// hooks gradient reduction into the model's backward), and then runs the
// backward and the optimizer step through the plugin:
//
//   COLOSSAL_ASSIGN_OR_RETURN(auto ddp, DdpPlugin::create(pg, {.bucket_cap_mb = 25}));
//   Booster booster(std::move(ddp));
//   COLOSSAL_ASSIGN_OR_RETURN(auto model, nn::GPT2::declare(config, DType::kF32));  // no memory
//   COLOSSAL_RETURN_IF_ERROR(booster.materialize(model->store(), seed, stream));    // the plugin's layout
//   ... optimizer over model->store().parameters() ...
//   COLOSSAL_RETURN_IF_ERROR(booster.boost(*model, model->store(), *optimizer));
//   // io::DataLoaderOptions: rank = booster.plugin().dp_rank(), world_size = dp_size()
//   for (int step = 0; step < steps; ++step) {
//     COLOSSAL_RETURN_IF_ERROR(booster.zero_grad());
//     for (int i = 0; i < n_micro; ++i) {
//       std::optional<Booster::NoSync> no_sync;
//       if (i + 1 < n_micro) no_sync.emplace(booster.no_sync());  // reduce only on the last
//       ... out = booster.forward(ctx, *model, tokens_i); ce = cross_entropy(..., {.dloss = 1.0f / n_micro})
//       COLOSSAL_RETURN_IF_ERROR(booster.backward(ctx, *model, *out.saved, ce.dlogits).status());
//     }
//     COLOSSAL_ASSIGN_OR_RETURN(nn::MixedPrecisionStepResult r, booster.step({.max_norm = 1.0f}));
//   }
// (this loop is ddp_rank_run in parallel/ddp/ddp_test_util.cc, run by ddp_test.cc)
//
// Contracts:
//   * materialize (optional, before boost): a model that was only declared
//     gets its parameter memory and initial values from the plugin; a model
//     made with its memory (GPT2::create) skips it.
//   * boost once; the model, store and optimizer must outlive the Booster's
//     use of them. The optimizer's gradients must be the store's gradient
//     views (nn/optim/module_params.h's optimizer_params does that).
//   * forward() and backward() are the model's Module::forward / backward
//     with the plugin around them; calling the model directly bypasses the
//     plugin (no reduction, no gathering). Evaluation and generation use
//     forward() too.
//   * no_sync(): while the returned guard lives, backward() only accumulates
//     gradients locally; the next backward() outside it reduces the
//     accumulated sum. step() after a backward under no_sync (before any
//     synced one) is a FailedPreconditionError: the gradients differ by rank.
//   * step(): waits for the plugin's reductions, then nn::mixed_precision_step
//     (global-norm clipping on the reduced gradients, so the norm is the same
//     on every rank; optional fp16 loss scaler); plugins that shard the
//     optimizer state (low_level_zero, Plugin::owns_step) do the step
//     themselves with the same semantics.
//   * model_state_dict() / load_model_state_dict(): the model's parameters as
//     one process holds them, through the plugin (a plugin that shards them
//     gathers: call them on every rank).
//   * optimizer_state_dict() / load_optimizer_state_dict(): the optimizer
//     state as one process's nn::Optimizer::state_dict() would hold it, also
//     when the plugin shards it (low_level_zero gathers: call it on every
//     rank); a dict saved at one world size loads at another.
//   * Not here: file I/O (io/), dataloader and LR scheduler wrapping (make the
//     DataLoader with dp_rank()/dp_size(); step the scheduler yourself).
#ifndef COLOSSAL_PARALLEL_BOOSTER_BOOSTER_H_
#define COLOSSAL_PARALLEL_BOOSTER_BOOSTER_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "nn/amp/loss_scaler.h"
#include "nn/amp/mixed_precision_step.h"
#include "nn/module/module.h"
#include "nn/module/parameter.h"
#include "nn/optim/optimizer.h"
#include "parallel/booster/plugin.h"

namespace colossal::parallel {

struct BoosterStepOptions {
  float max_norm = 0.0f;                  // clip by global L2 norm; 0: off
  nn::DynamicLossScaler* scaler = nullptr;  // fp16 loss scaling; null: none
};

class Booster {
 public:
  // `plugin` must not be null (aborts).
  explicit Booster(std::unique_ptr<Plugin> plugin);
  Booster(const Booster&) = delete;
  Booster& operator=(const Booster&) = delete;

  Plugin& plugin() { return *plugin_; }
  bool boosted() const { return model_ != nullptr; }

  // The plugin's materialize (plugin.h) of a declared model's store, before
  // boost. Errors: after boost (FailedPrecondition); the plugin's.
  [[nodiscard]] absl::Status materialize(nn::ParameterStore& store, uint64_t seed,
                                         const core::Stream& stream);

  // Hands `model` (parameters: views of `store`) and `optimizer` to the
  // plugin. Errors: boosting twice, a store without memory
  // (FailedPrecondition); the plugin's.
  [[nodiscard]] absl::Status boost(nn::Module& model, const nn::ParameterStore& store,
                                   nn::Optimizer& optimizer);

  // `model.forward(ctx, input)` between the plugin's begin_forward and
  // end_forward. Errors: not boosted, another model than the boosted one
  // (FailedPrecondition / InvalidArgument); the model's; the plugin's.
  absl::StatusOr<nn::ForwardResult> forward(core::Context& ctx, nn::Module& model,
                                            const core::Tensor& input);

  // `model.backward(ctx, saved, grad_output)` with the plugin's hooks (see
  // the file comment). Errors: not boosted, another model than the boosted
  // one (FailedPrecondition / InvalidArgument); the model's; the plugin's.
  absl::StatusOr<core::Tensor> backward(core::Context& ctx, nn::Module& model, nn::Saved& saved,
                                        const core::Tensor& grad_output);

  // Suppresses gradient reduction while alive (nestable; movable).
  class NoSync {
   public:
    NoSync(NoSync&& other) noexcept : booster_(other.booster_) { other.booster_ = nullptr; }
    NoSync& operator=(NoSync&&) = delete;
    NoSync(const NoSync&) = delete;
    ~NoSync() {
      if (booster_ != nullptr) --booster_->no_sync_depth_;
    }

   private:
    friend class Booster;
    explicit NoSync(Booster* booster) : booster_(booster) { ++booster_->no_sync_depth_; }
    Booster* booster_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(this); }
  bool sync_enabled() const { return no_sync_depth_ == 0; }

  // Waits for the gradient reductions, then one optimizer step (see the file
  // comment). Errors: not boosted; step after an unsynced backward
  // (FailedPrecondition); the plugin's and mixed_precision_step's.
  absl::StatusOr<nn::MixedPrecisionStepResult> step(const BoosterStepOptions& options = {});

  // The optimizer's zero_grad, then the plugin's (ZeRO-2 clears its gradient
  // shard). Errors: not boosted; the optimizer's; the plugin's.
  [[nodiscard]] absl::Status zero_grad();

  // After it the model's weights in its store are current for direct reads
  // (Plugin::sync_weights: a plugin may finish them only as the next forward
  // reaches each module, e.g. low_level_zero's overlap_allgather). Forward,
  // step and the state dicts need no call. Errors: not boosted; the plugin's.
  [[nodiscard]] absl::Status sync_weights();

  // The whole model's parameters on the host (Plugin::model_state_dict),
  // and their load into the boosted model's store; work on `stream` (the
  // model's). Call on every rank. Errors: not boosted (FailedPrecondition);
  // the plugin's.
  absl::StatusOr<nn::ParameterStore> model_state_dict(int to_rank, const core::Stream& stream);
  [[nodiscard]] absl::Status load_model_state_dict(const nn::ParameterStore& state,
                                                   const core::Stream& stream);

  // The boosted optimizer's whole state (nn/optim/state_dict.h), through the
  // plugin. With the default plugins (ddp) the tensors are views of the
  // optimizer's memory: write them out or copy them before the next step.
  // to_rank >= 0: only that rank is sure to get the tensors; the others may
  // get the meta alone (Plugin::optimizer_state_dict: ZeRO then builds the
  // whole state on that rank only). Call it on every rank either way.
  // Errors: not boosted (FailedPrecondition); the plugin's.
  absl::StatusOr<nn::OptimizerStateDict> optimizer_state_dict(int to_rank = -1);
  // Restores such a state (of the same parameter groups and names; any world
  // size). Errors: not boosted (FailedPrecondition); InvalidArgument naming
  // the mismatch (nn::Optimizer::load_state_dict's, the plugin's).
  [[nodiscard]] absl::Status load_optimizer_state_dict(const nn::OptimizerStateDict& state);

  // Whether the plugin streams its state for checkpoints (Plugin::streams_state),
  // and the streams: the model's parameters by table index, and the
  // optimizer state with its large tensors written by the result's `write`.
  // Collectives: call on every rank. Errors: not boosted; the plugin's.
  bool streams_state() const { return plugin_->streams_state(); }
  [[nodiscard]] absl::Status stream_model_state(int to_rank, const nn::StatePieceFn& piece);
  absl::StatusOr<nn::StreamedOptimizerState> stream_optimizer_state(int to_rank);

 private:
  // FailedPrecondition before boost, InvalidArgument for another model.
  absl::Status check_model(const nn::Module& model, const char* what) const;

  std::unique_ptr<Plugin> plugin_;
  nn::Module* model_ = nullptr;
  nn::ParameterStore store_;  // the boosted model's (shares its memory)
  nn::Optimizer* optimizer_ = nullptr;
  int no_sync_depth_ = 0;
  // The last backward ran under no_sync and no synced one followed.
  bool unsynced_ = false;
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_BOOSTER_BOOSTER_H_
