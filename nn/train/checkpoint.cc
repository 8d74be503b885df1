#include "nn/train/checkpoint.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"

namespace colossal::nn {
namespace {

constexpr char kLrScheduler[] = "lr_scheduler";
constexpr char kLossScaler[] = "loss_scaler";

io::OptimizerFiles optimizer_files(const OptimizerStateDict& state) {
  return io::OptimizerFiles{state.tensors, optimizer_meta_to_json(state.meta)};
}

io::TrainerState to_io(const TrainerState& t) {
  io::TrainerState out;
  out.step = t.step;
  out.rng = t.rng;
  out.data_loader = t.data_loader;
  if (t.lr_scheduler) out.sections[kLrScheduler] = lr_scheduler_state_to_json(*t.lr_scheduler);
  if (t.loss_scaler) out.sections[kLossScaler] = loss_scaler_state_to_json(*t.loss_scaler);
  return out;
}

// A section's parse error, named as trainer_state.json's key.
absl::Status section_error(const std::string& path, const char* key, const absl::Status& s) {
  return absl::Status(s.code(),
                      absl::StrCat("'", path, "': trainer_state.json: '", key, "': ", s.message()));
}

}  // namespace

absl::StatusOr<std::string> SaveCheckpoint(const std::string& root, const CheckpointToSave& save,
                                           const io::CheckpointOptions& options) {
  if (save.architecture == nullptr || save.model == nullptr) {
    return absl::InvalidArgumentError("SaveCheckpoint: architecture and model are required");
  }
  if (!save.model->materialized()) {
    return absl::FailedPreconditionError(
        "SaveCheckpoint: the model's parameters have no memory on this process");
  }
  io::CheckpointToSave files;
  files.step = save.step;
  files.model = HuggingFaceTensors(*save.architecture, *save.model);
  const core::DType dtype =
      save.model->parameters().empty() ? core::DType::kF32 : save.model->parameters().back().value.dtype();
  files.config_json = save.architecture->hugging_face_config_json(dtype);
  std::optional<io::OptimizerFiles> optimizer;
  if (save.optimizer != nullptr) {
    optimizer = optimizer_files(*save.optimizer);
    files.optimizer = &*optimizer;
  }
  files.trainer = to_io(save.trainer);
  return io::SaveCheckpoint(root, files, options);
}

absl::Status SaveOptimizerState(const std::string& dir, const OptimizerStateDict& state) {
  return io::SaveOptimizerFiles(dir, optimizer_files(state));
}

absl::StatusOr<OptimizerStateDict> LoadOptimizerState(const std::string& dir) {
  COLOSSAL_ASSIGN_OR_RETURN(io::OptimizerFiles files, io::LoadOptimizerFiles(dir));
  OptimizerStateDict sd;
  absl::StatusOr<OptimizerMeta> meta = optimizer_meta_from_json(files.meta_json);
  if (!meta.ok()) {
    return absl::Status(meta.status().code(), absl::StrCat("'", dir, "/optimizer.json': ",
                                                           meta.status().message()));
  }
  sd.meta = *std::move(meta);
  sd.tensors = std::move(files.tensors);
  return sd;
}

absl::StatusOr<TrainerState> LoadTrainerState(const std::string& dir) {
  COLOSSAL_ASSIGN_OR_RETURN(io::TrainerState t, io::LoadTrainerState(dir));
  const std::string path = dir + "/trainer_state.json";
  TrainerState out;
  out.step = t.step;
  out.rng = t.rng;
  out.data_loader = t.data_loader;
  if (auto it = t.sections.find(kLrScheduler); it != t.sections.end()) {
    absl::StatusOr<LrSchedulerState> v = lr_scheduler_state_from_json(it->second);
    if (!v.ok()) return section_error(path, kLrScheduler, v.status());
    // The schedule steps once per optimizer step: no run gets further.
    if (absl::Status r = io::CheckStepRange(v->step, "\"step\""); !r.ok()) {
      return section_error(path, kLrScheduler, r);
    }
    out.lr_scheduler = *v;
  }
  if (auto it = t.sections.find(kLossScaler); it != t.sections.end()) {
    absl::StatusOr<LossScalerState> v = loss_scaler_state_from_json(it->second);
    if (!v.ok()) return section_error(path, kLossScaler, v.status());
    out.loss_scaler = *v;
  }
  return out;
}

}  // namespace colossal::nn
