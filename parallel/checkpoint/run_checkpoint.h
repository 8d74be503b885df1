// colossal::parallel — saving and loading a training run on every rank: who
// gathers, who writes, who waits.
//
// Every rank calls these functions. Saving: the plugin gathers what it shards
// (model parameters, optimizer state) for rank 0; rank 0 writes the step
// directory (nn/train/checkpoint.h: GPT-2 under Hugging Face names, the
// optimizer state, trainer_state.json); then rank 0 tells every rank whether
// it wrote, so a failed write fails the save on every rank, in step. A
// plugin that streams its state (Plugin::streams_state: gemini,
// low_level_zero, hybrid_parallel) is
// never gathered whole: rank 0 lays the files out and writes each chunk's
// pieces as every rank gathers them, one chunk at a time, so a model that
// fills the host is saved too. Loading: every rank reads the files (the
// optimizer's as views of the file mapping) and hands each part to the plugin,
// which keeps its share. Without a booster (one process, no plugin) the same
// happens with the model's store and the optimizer directly.
//
//   RunParts run;
//   run.architecture = model.get();  run.model = &model->store();  run.optimizer = opt.get();
//   run.booster = &booster;  run.group = pg.get();  run.rank = pg->rank();
//   run.stream = &ctx->compute_stream();  run.scheduler = &schedule;  run.context = ctx.get();
//   COLOSSAL_ASSIGN_OR_RETURN(std::string dir, save_run_checkpoint("ckpt", 100, run));
//   COLOSSAL_ASSIGN_OR_RETURN(int64_t step, load_run_checkpoint(dir, run));
#ifndef COLOSSAL_PARALLEL_CHECKPOINT_RUN_CHECKPOINT_H_
#define COLOSSAL_PARALLEL_CHECKPOINT_RUN_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/process_group/process_group.h"
#include "comm/store/store.h"
#include "core/context/context.h"
#include "io/checkpoint/checkpoint.h"
#include "io/loader/data_loader.h"
#include "nn/amp/loss_scaler.h"
#include "nn/models/causal_lm/causal_lm.h"
#include "nn/module/parameter.h"
#include "nn/optim/optimizer.h"
#include "nn/schedule/lr_schedule.h"
#include "parallel/booster/booster.h"

namespace colossal::parallel {

// The parts of a run a checkpoint holds. Null parts are left out (saving) or
// not restored (loading).
struct RunParts {
  const nn::CausalLM* architecture = nullptr;  // required: names, shapes, config.json
  nn::ParameterStore* model = nullptr;     // required: the (boosted) model's store
  nn::Optimizer* optimizer = nullptr;      // required by the optimizer functions
  Booster* booster = nullptr;              // null: one process without a plugin
  comm::ProcessGroup* group = nullptr;     // null: one process (no barrier)
  // The job's store (null: no check). Every rank must take part in a save;
  // with a store each rank first announces itself there and waits (the
  // store's timeout) for the others, so a rank that skips a save (a script
  // saving on rank 0 only) fails it on the ranks that came, naming the
  // missing ones, instead of leaving them in the plugin's gathers or pairing
  // its next collectives with theirs.
  comm::Store* store = nullptr;
  int rank = 0;                            // this process's rank; rank 0 writes
  const core::Stream* stream = nullptr;    // required: the model's stream
  nn::LrScheduler* scheduler = nullptr;
  nn::DynamicLossScaler* scaler = nullptr;
  core::Context* context = nullptr;  // its RNG state
  io::DataLoader* loader = nullptr;
  // Copied into each step directory by rank 0 (a from_pretrained folder's
  // tokenizer files: io::TokenizerFilesIn).
  std::vector<std::string> files_to_copy;
};

// Saves step `step` under `root` (model, optimizer, scheduler, scaler, RNG,
// data loader); returns the step directory (on every rank). Errors: missing
// required parts (InvalidArgument); a rank that did not take part
// (DeadlineExceeded naming it, with RunParts::store); the plugin's; rank 0's
// write (there; on the other ranks Aborted: rank 0 could not write).
absl::StatusOr<std::string> save_run_checkpoint(const std::string& root, int64_t step,
                                                const RunParts& run,
                                                const io::CheckpointOptions& options = {});
// Restores everything step directory `dir` holds into the non-null parts and
// returns its step. A scheduler given when the checkpoint has no schedule
// state continues from the checkpoint's step (one schedule step per step). Errors: a checkpoint of another model (InvalidArgument
// naming both shapes); the files' (io, nn); the plugin's.
absl::StatusOr<int64_t> load_run_checkpoint(const std::string& dir, const RunParts& run);

// The model alone: a step_000000 directory under `root` (rank 0 writes), and
// its load (any step directory, or a Hugging Face model directory; weights of
// another dtype are converted).
absl::StatusOr<std::string> save_run_model(const std::string& root, const RunParts& run);
absl::Status load_run_model(const std::string& dir, const RunParts& run);

// The optimizer state alone: `dir`/optimizer.{safetensors,json} (rank 0
// writes), and its load (such a folder or a step directory).
absl::Status save_run_optimizer(const std::string& dir, const RunParts& run);
absl::Status load_run_optimizer(const std::string& dir, const RunParts& run);

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_CHECKPOINT_RUN_CHECKPOINT_H_
