// colossal::io — checkpoint files: named tensors and JSON in atomic step
// directories. What the tensors and JSON mean (a GPT-2 under Hugging Face
// names, an optimizer's state, a scheduler's) is the caller's: nn/train/
// checkpoint.h builds a training checkpoint from these pieces.
//
// A save writes one step directory under a checkpoint root:
//
//   ckpt/step_000100/
//     model.safetensors                 the model tensors, each written with its
//                                       own shape (the leading elements of the
//                                       tensor); above max_shard_bytes,
//                                       model-0000i-of-0000N.safetensors
//                                       + model.safetensors.index.json
//     config.json                       the caller's JSON (Hugging Face's config)
//     optimizer.safetensors             optimizer tensors (if given)
//     optimizer.json                    their JSON description
//     trainer_state.json                {"step", "rng": {"seed", "offset"},
//                                        "data_loader", <sections>}
//   ckpt/latest                         "step_000100\n"
//
//   colossal::io::CheckpointToSave save;
//   save.step = 100;
//   save.model = {{"w", weights, weights.shape()}};
//   save.config_json = "{...}";
//   save.trainer.sections["lr_scheduler"] = R"({"last_step": 17})";
//   absl::StatusOr<std::string> dir = colossal::io::SaveCheckpoint("ckpt", save, {.keep_last = 3});
//
//   absl::StatusOr<std::string> dir = colossal::io::ResolveCheckpoint("ckpt");  // via `latest`
//   absl::Status s = colossal::io::LoadModelTensors(*dir, {{"w", DType::kF32, {4, 3}, weights}});
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
//  * A model tensor holding NaN or inf (a run that diverged) is not saved:
//    FailedPrecondition naming the tensor, nothing published or pruned, so
//    the last good step directories stay (keep_last would otherwise rotate
//    them out with every diverged save).
//
// Loading model tensors validates them against what the caller expects:
// every name present (NotFound with a did-you-mean for a near name), no
// unexpected tensor, shape and dtype equal, and every value finite (a file
// holding NaN or inf, from a version that saved diverged runs, is refused
// naming the tensor and its file); each error names the checkpoint and the
// tensor. Tensors on a CUDA device are written and read through host
// copies.
#ifndef COLOSSAL_IO_CHECKPOINT_CHECKPOINT_H_
#define COLOSSAL_IO_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/context/context.h"
#include "core/dtype/dtype.h"
#include "core/tensor/shape.h"
#include "core/tensor/tensor.h"
#include "io/checkpoint/step_dirs.h"
#include "io/loader/data_loader.h"

namespace colossal::io {

// The largest step a checkpoint holds: 2^40 steps of a millisecond each
// would take 35 years, so a step past it is a damaged file (or a broken
// caller), never a run. Saves and loads refuse it.
inline constexpr int64_t kMaxCheckpointStep = int64_t{1} << 40;

// OK for a step in [0, kMaxCheckpointStep]; else InvalidArgumentError saying
// `subject` (what names the step, e.g. "SaveCheckpoint: step") must be in
// that range. Saves and loads share it, so no step is written that a load
// would refuse; a saved schedule's step count is held to the same range.
absl::Status CheckStepRange(int64_t step, absl::string_view subject);

// The small state of a training run, saved as trainer_state.json. Absent
// parts are left out of the file and read back as nullopt / no entry.
struct TrainerState {
  int64_t step = 0;
  std::optional<core::RngState> rng;
  std::optional<DataLoaderState> data_loader;
  // Other parts, each a flat JSON object of numbers (e.g. "lr_scheduler",
  // "loss_scaler": their owners' *_to_json), written under its key.
  std::map<std::string, std::string> sections;
};

std::string TrainerStateToJson(const TrainerState& state);
// InvalidArgument naming the key for malformed JSON, a missing/mistyped key,
// a step outside [0, kMaxCheckpointStep], a data loader state out of range
// (DataLoaderStateFromJson), or a section that is not a flat object of numbers.
absl::StatusOr<TrainerState> TrainerStateFromJson(std::string_view json);

// A tensor to write: its first shape.numel() elements (shape.numel() <=
// tensor.numel()), under `name`, with `shape`. On the CPU or a CUDA device.
struct TensorToSave {
  std::string name;
  core::Tensor tensor;
  core::Shape shape;
};

// A tensor whose data arrives after the files are laid out.
struct TensorLayout {
  std::string name;
  core::DType dtype = core::DType::kF32;
  core::Shape shape;
};

// Where a streamed tensor's data goes: `count` elements of the tensor's dtype
// at `data` (host memory, valid during the call) become elements [offset,
// offset + count) of tensor `index` of the layout, flattened; elements past
// its shape are dropped (a padded parameter's tail). A sink does not fail its
// caller: it keeps its first error (a full disk, elements written twice, a
// model value that is NaN or inf), drops every later write, and the save
// returns that error once the writer has returned. So a plugin gathering on
// every rank goes through all its collectives even when the saving rank's
// files fail, and no rank is left waiting.
class TensorSink {
 public:
  virtual ~TensorSink() = default;
  virtual void write(size_t index, int64_t offset, const void* data, int64_t count) = 0;
  // Keeps `error` as the sink's error unless it has one already: a writer's
  // own check (a piece of the wrong dtype) ends the save the same way.
  virtual void fail(absl::Status error) = 0;
};

// Tensors written piece by piece (a plugin's state too large to gather on
// one host): their layout and the function that writes every element of each
// of them into the sink. A save calls `write` exactly once, whatever fails
// before it (then with a sink that drops everything), so the ranks' calls
// stay matched; an error `write` returns itself (a collective's) ends the
// save at once.
struct StreamedTensors {
  std::vector<TensorLayout> tensors;
  std::function<absl::Status(TensorSink&)> write;
};

// An optimizer's state as files: its tensors and a JSON description.
struct OptimizerFiles {
  // Any device. Loaded ones are host tensors that view the file's mapping
  // where the file aligns them (no copy: the page cache holds them, not the
  // process), copies otherwise.
  std::map<std::string, core::Tensor> tensors;
  std::string meta_json;
  // Saving only: more tensors, streamed into the same file after `tensors`.
  StreamedTensors streamed;
};

struct CheckpointToSave {
  int64_t step = 0;                          // in [0, kMaxCheckpointStep]; names the directory
  // Required: at least one tensor, in `model` or in `streamed_model` (one of
  // the two): the model held, or streamed (each model tensor checked finite
  // as its pieces arrive).
  std::vector<TensorToSave> model;
  StreamedTensors streamed_model;
  std::string config_json;                   // required: config.json
  const OptimizerFiles* optimizer = nullptr;  // optional
  TrainerState trainer;                      // trainer.step is set to `step`
  // Files copied into the step directory under their own names, as they are
  // (a model folder's tokenizer files, so the step directory is a whole
  // Hugging Face folder). A name the checkpoint writes itself, or a file that
  // cannot be read, fails the save (naming it) before anything is published.
  std::vector<std::string> files_to_copy;
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
// that `path`/latest names. NotFound saying what was looked for; InvalidArgument
// when `path` is a file.
absl::StatusOr<std::string> ResolveCheckpoint(const std::string& path);

// `dir`/config.json's text.
absl::StatusOr<std::string> ReadCheckpointConfig(const std::string& dir);
// The weights' dtype that `dir`/config.json names ("torch_dtype", or
// transformers 5's "dtype").
absl::StatusOr<core::DType> ReadCheckpointDType(const std::string& dir);

// A model tensor a load expects: `name` with `dtype` and `shape`, copied into
// the first shape.numel() elements of `dst` (CPU or CUDA; the rest of `dst`
// is set to zero).
struct TensorToLoad {
  std::string name;
  core::DType dtype = core::DType::kF32;
  core::Shape shape;
  core::Tensor dst;
};
// Validates the model tensors of step directory `dir` against `expected`
// (all of them, before writing any) and copies them (see the file comment).
absl::Status LoadModelTensors(const std::string& dir, const std::vector<TensorToLoad>& expected);

// A model tensor a load expects, as MapModelTensors returns it: `shape` in
// the file, `as` in memory (as many elements or more: the rest are zero).
struct TensorToMap {
  std::string name;
  core::DType dtype = core::DType::kF32;
  core::Shape shape;
  core::Shape as;
};
// Validates the model tensors of `dir` as LoadModelTensors does and returns
// them as host tensors of the `as` shapes, in `expected`'s order: views of
// the files' mapping (no copy: the page cache holds a model that fills the
// host, not the process) where a tensor is as large as its file's and
// aligned to its element size; copies otherwise (padded rows).
absl::StatusOr<std::vector<core::Tensor>> MapModelTensors(const std::string& dir,
                                                          const std::vector<TensorToMap>& expected);

// Writes `files` as `dir`/optimizer.safetensors + optimizer.json (`dir` is
// created if missing), each file atomically.
absl::Status SaveOptimizerFiles(const std::string& dir, const OptimizerFiles& files);
// optimizer.safetensors (as host tensors) + optimizer.json. NotFound when the
// checkpoint has no optimizer state.
absl::StatusOr<OptimizerFiles> LoadOptimizerFiles(const std::string& dir);

// trainer_state.json.
absl::StatusOr<TrainerState> LoadTrainerState(const std::string& dir);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_CHECKPOINT_CHECKPOINT_H_
