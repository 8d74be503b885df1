// colossal::nn — the training checkpoint of a run (any CausalLM: GPT-2,
// Llama): weights Hugging Face
// can load, optimizer, schedule, loss scaler, RNG and data-loader state, in
// io/checkpoint's atomic step directories (the file layout and the crash
// guarantees are described there).
//
//   step_000100/model.safetensors     the model under Hugging Face names and shapes
//                                     (nn/models/causal_lm/hugging_face.h)
//   step_000100/config.json           Hugging Face's config (GPT2Config, LlamaConfig)
//   step_000100/optimizer.safetensors OptimizerStateDict tensors (if given)
//   step_000100/optimizer.json        its OptimizerMeta (nn/optim/state_dict.h)
//   step_000100/trainer_state.json    {"step", "lr_scheduler", "loss_scaler",
//                                      "rng": {"seed", "offset"}, "data_loader"}
//
//   colossal::nn::CheckpointToSave save;
//   save.step = 100;
//   save.architecture = model.get();       // names, shapes, config.json
//   save.model = &model->store();          // materialized, any device
//   save.optimizer = &optimizer_state;     // optional
//   save.trainer.lr_scheduler = scheduler.state();
//   save.trainer.loss_scaler = scaler.state();
//   save.trainer.rng = ctx.rng_state();
//   save.trainer.data_loader = loader->state();
//   absl::StatusOr<std::string> dir = SaveCheckpoint("ckpt", save, {.keep_last = 3});
//
//   absl::StatusOr<std::string> dir = io::ResolveCheckpoint("ckpt");  // via `latest`
//   absl::Status s = LoadHuggingFaceModel(*dir, *model, model->store());  // hugging_face.h
//   absl::StatusOr<TrainerState> t = LoadTrainerState(*dir);
//   absl::StatusOr<OptimizerStateDict> o = LoadOptimizerState(*dir);
#ifndef COLOSSAL_NN_TRAIN_CHECKPOINT_H_
#define COLOSSAL_NN_TRAIN_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "io/checkpoint/checkpoint.h"
#include "io/loader/data_loader.h"
#include "nn/amp/loss_scaler.h"
#include "nn/models/causal_lm/causal_lm.h"
#include "nn/models/causal_lm/hugging_face.h"
#include "nn/module/parameter.h"
#include "nn/optim/state_dict.h"
#include "nn/schedule/lr_schedule.h"

namespace colossal::nn {

// The small state of a training run (trainer_state.json). Absent parts are
// left out of the file and read back as nullopt.
struct TrainerState {
  int64_t step = 0;
  std::optional<LrSchedulerState> lr_scheduler;
  std::optional<LossScalerState> loss_scaler;
  std::optional<core::RngState> rng;
  std::optional<io::DataLoaderState> data_loader;
};

struct CheckpointToSave {
  int64_t step = 0;                               // >= 0; names the directory
  // Required: the model whose names, Hugging Face shapes and config.json the
  // files take; `model` holds the values (a store of its table, e.g. gathered
  // on the host by a plugin).
  const CausalLM* architecture = nullptr;
  const ParameterStore* model = nullptr;          // materialized; or, instead:
  // The values streamed (a plugin's gather, one chunk at a time): calls its
  // argument with every element of every parameter, by index in the whole
  // model's table (the architecture's, or the whole model's where the
  // architecture is one rank's split of it; nn/optim/state_dict.h's
  // StatePieceFn; called exactly once per save, as io::StreamedTensors says).
  std::function<absl::Status(const StatePieceFn&)> write_model;
  const OptimizerStateDict* optimizer = nullptr;               // optional
  const StreamedOptimizerState* streamed_optimizer = nullptr;  // or this
  TrainerState trainer;                           // trainer.step is set to `step`
  // Copied into the step directory as they are (io::CheckpointToSave's).
  std::vector<std::string> files_to_copy;
};

// Saves as described above; returns the step directory's path (see
// io::SaveCheckpoint for the errors and what a failure leaves).
absl::StatusOr<std::string> SaveCheckpoint(const std::string& root, const CheckpointToSave& save,
                                           const io::CheckpointOptions& options = {});

// Writes `state` as `dir`/optimizer.safetensors + optimizer.json.
absl::Status SaveOptimizerState(const std::string& dir, const OptimizerStateDict& state);
absl::Status SaveOptimizerState(const std::string& dir, const StreamedOptimizerState& state);
// optimizer.safetensors + optimizer.json as a state dict of host tensors.
// NotFound when the checkpoint has no optimizer state; InvalidArgument naming
// the file and key for a malformed optimizer.json.
absl::StatusOr<OptimizerStateDict> LoadOptimizerState(const std::string& dir);

// trainer_state.json (InvalidArgument naming the file and key).
absl::StatusOr<TrainerState> LoadTrainerState(const std::string& dir);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_TRAIN_CHECKPOINT_H_
