// colossal::io — training checkpoints: GPT-2 weights Hugging Face can load,
// optimizer, schedule, loss scaler, RNG and data-loader state; atomic saves.
//
// A save writes one step directory under a checkpoint root:
//
//   ckpt/step_000100/
//     model.safetensors                 GPT-2 tensors under Hugging Face names and
//                                       layouts (transformer.h.0.attn.c_attn.weight
//                                       [C, 3C], Conv1D [in, out]); wte without its
//                                       padding rows: [vocab_size, C]. Or, above
//                                       max_shard_bytes, model-0000i-of-0000N.safetensors
//                                       + model.safetensors.index.json
//     config.json                       Hugging Face GPT2Config (GPT2LMHeadModel)
//     optimizer.safetensors             OptimizerStateDict tensors (if given)
//     optimizer.json                    its OptimizerMeta (nn/optim/state_dict.h)
//     trainer_state.json                {"step", "lr_scheduler", "loss_scaler",
//                                        "rng": {"seed", "offset"}, "data_loader"}
//   ckpt/latest                         "step_000100\n"
//
// so `transformers.GPT2LMHeadModel.from_pretrained("ckpt/step_000100")` loads
// the model.
//
//   colossal::io::CheckpointToSave save;
//   save.step = 100;
//   save.config = &config;                 // nn::GPT2Config
//   save.model = &model->store();          // nn::ParameterStore (HF names)
//   save.optimizer = &optimizer_state;     // optional: nn::OptimizerStateDict
//   save.trainer.lr_scheduler = scheduler.state();
//   save.trainer.loss_scaler = scaler.state();
//   save.trainer.rng = ctx.rng_state();
//   save.trainer.data_loader = loader->state();
//   absl::StatusOr<std::string> dir = colossal::io::SaveCheckpoint("ckpt", save, {.keep_last = 3});
//
//   absl::StatusOr<std::string> dir = colossal::io::ResolveCheckpoint("ckpt");  // via `latest`
//   absl::Status s = colossal::io::LoadGPT2Model(*dir, config, model->store());
//   absl::StatusOr<colossal::io::TrainerState> t = colossal::io::LoadTrainerState(*dir);
//   absl::StatusOr<colossal::nn::OptimizerStateDict> o = colossal::io::LoadOptimizerState(*dir);
//
// Nothing is lost (DESIGN principle 8):
//  * The step directory is written as `step_000100.tmp-<pid>`; every file in
//    it is written to a temporary name, fsynced and renamed; then the
//    directory is renamed to `step_000100` and the root fsynced; then
//    `latest` is replaced atomically, last. A crash at any point leaves
//    `latest` naming a complete step directory (or absent on the first save).
//  * Each save first removes leftover `step_*.tmp-<pid>` directories whose
//    process is gone (a crashed save), and after `latest` has moved, removes
//    step directories beyond the newest keep_last (0: keep all); the one
//    `latest` names is never removed.
//  * Saving a step whose directory exists replaces it atomically
//    (renameat2 RENAME_EXCHANGE), then removes the old one.
//
// Loading validates the model tensors against the model's table: every
// parameter present (NotFound with a did-you-mean for a near name), no
// unexpected tensor, shape (Hugging Face shape: GPT2::hugging_face_shape) and
// dtype equal; each error names the checkpoint and the tensor. wte's padding
// rows are set to zero. Only host (CPU) parameter stores are loaded and
// saved directly; device stores are copied through the host.
//
// Layering note: this package reads nn/ types (GPT2Config, ParameterStore,
// OptimizerStateDict, scheduler and scaler states).
#ifndef COLOSSAL_IO_CHECKPOINT_CHECKPOINT_H_
#define COLOSSAL_IO_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "io/checkpoint/step_dirs.h"
#include "io/loader/data_loader.h"
#include "nn/amp/loss_scaler.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/module/parameter.h"
#include "nn/optim/state_dict.h"
#include "nn/schedule/lr_schedule.h"

namespace colossal::io {

// The small state of a training run, saved as trainer_state.json. Absent
// parts are left out of the file and read back as nullopt.
struct TrainerState {
  int64_t step = 0;
  std::optional<nn::LrSchedulerState> lr_scheduler;
  std::optional<nn::LossScalerState> loss_scaler;
  std::optional<core::RngState> rng;
  std::optional<DataLoaderState> data_loader;
};

std::string TrainerStateToJson(const TrainerState& state);
// InvalidArgument naming the key for malformed JSON or a missing/mistyped key.
absl::StatusOr<TrainerState> TrainerStateFromJson(std::string_view json);

struct CheckpointToSave {
  int64_t step = 0;                                 // >= 0; names the directory
  const nn::GPT2Config* config = nullptr;           // required
  const nn::ParameterStore* model = nullptr;        // required
  const nn::OptimizerStateDict* optimizer = nullptr;  // optional
  TrainerState trainer;                             // trainer.step is set to `step`
};

struct CheckpointOptions {
  // Step directories kept after a save (the newest by step); 0 keeps all.
  int keep_last = 3;
  // Model tensor bytes per safetensors file before the save is sharded.
  uint64_t max_shard_bytes = 5'000'000'000;
};

// Saves as described above; returns the step directory's path. `root` is
// created if missing. Errors name the file or tensor; on error `latest` and
// the existing step directories are as they were.
absl::StatusOr<std::string> SaveCheckpoint(const std::string& root, const CheckpointToSave& save,
                                           const CheckpointOptions& options = {});

// `path` if it is a step directory (holds config.json), else the directory
// that `path`/latest names. NotFound saying what was looked for.
absl::StatusOr<std::string> ResolveCheckpoint(const std::string& path);

// Hugging Face's config.json for `config`.
std::string GPT2ConfigToHuggingFaceJson(const nn::GPT2Config& config, core::DType dtype);
// The GPT2Config a config.json describes (n_layer, n_head, n_embd,
// vocab_size, n_positions; padded_vocab_multiple from our own
// "colossal_padded_vocab_multiple" key when present). InvalidArgument naming the key.
absl::StatusOr<nn::GPT2Config> GPT2ConfigFromHuggingFaceJson(std::string_view json);
// The weights' dtype that `dir`/config.json names ("torch_dtype").
absl::StatusOr<core::DType> ReadCheckpointDType(const std::string& dir);
// GPT2ConfigFromHuggingFaceJson of `dir`/config.json.
absl::StatusOr<nn::GPT2Config> ReadGPT2Config(const std::string& dir);

// Copies the model tensors of step directory `dir` into `store` (validated
// as described above).
absl::Status LoadGPT2Model(const std::string& dir, const nn::GPT2Config& config, nn::ParameterStore& store);

// Writes `state` as `dir`/optimizer.safetensors + optimizer.json (the files
// a step directory holds; `dir` is created if missing), each file atomically.
absl::Status SaveOptimizerState(const std::string& dir, const nn::OptimizerStateDict& state);

// optimizer.safetensors + optimizer.json as a state dict of host tensors.
// NotFound when the checkpoint has no optimizer state.
absl::StatusOr<nn::OptimizerStateDict> LoadOptimizerState(const std::string& dir);

// trainer_state.json.
absl::StatusOr<TrainerState> LoadTrainerState(const std::string& dir);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_CHECKPOINT_CHECKPOINT_H_
