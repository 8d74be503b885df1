#include "nn/train/checkpoint.h"

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"

namespace colossal::nn {
namespace {

constexpr char kLrScheduler[] = "lr_scheduler";
constexpr char kLossScaler[] = "loss_scaler";

io::OptimizerFiles optimizer_files(const OptimizerStateDict& state) {
  return io::OptimizerFiles{state.tensors, optimizer_meta_to_json(state.meta), {}};
}

// `write`'s pieces as sink writes; a piece of another dtype than its
// tensor's fails the save.
std::function<absl::Status(io::TensorSink&)> to_sink(std::function<absl::Status(const StatePieceFn&)> write,
                                                     std::vector<io::TensorLayout> layout) {
  return [write = std::move(write), layout = std::move(layout)](io::TensorSink& sink) {
    return write([&](size_t index, int64_t offset, const core::Tensor& piece) {
      if (index < layout.size() && piece.dtype() != layout[index].dtype) {
        sink.fail(absl::InvalidArgumentError(absl::StrCat("a piece ", piece.to_string(), " of tensor '",
                                                          layout[index].name, "', which is ",
                                                          core::dtype_name(layout[index].dtype))));
        return;
      }
      sink.write(index, offset, piece.raw_data(), piece.numel());
    });
  };
}

io::OptimizerFiles streamed_optimizer_files(const StreamedOptimizerState& state) {
  io::OptimizerFiles files = optimizer_files(state.held);
  for (const StateTensorDecl& d : state.streamed) files.streamed.tensors.push_back({d.key, d.dtype, d.shape});
  files.streamed.write = to_sink(state.write, files.streamed.tensors);
  return files;
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
  if (save.architecture == nullptr || (save.model == nullptr) == !save.write_model ||
      (save.optimizer != nullptr && save.streamed_optimizer != nullptr)) {
    return absl::InvalidArgumentError(
        "SaveCheckpoint: an architecture and the model (held or streamed, not both) are required; "
        "the optimizer state is optional (held or streamed)");
  }
  if (save.model != nullptr && !save.model->materialized()) {
    return absl::FailedPreconditionError(
        "SaveCheckpoint: the model's parameters have no memory on this process");
  }
  io::CheckpointToSave files;
  files.step = save.step;
  core::DType dtype = save.architecture->dtype();
  if (save.model != nullptr) {
    files.model = HuggingFaceTensors(*save.architecture, *save.model);
    if (!save.model->parameters().empty()) dtype = save.model->parameters().back().value.dtype();
  } else {
    // The whole model's table (the architecture may be one rank's split of it).
    absl::StatusOr<std::unique_ptr<CausalLM>> redeclared =
        save.architecture->redeclare(save.architecture->dtype(), ModelSplit{});
    if (!redeclared.ok()) {
      // Streamed writers run exactly once, failed saves too: the other
      // ranks' gathers wait for this rank's part.
      const StatePieceFn drop = [](size_t, int64_t, const core::Tensor&) {};
      save.write_model(drop).IgnoreError();
      if (save.streamed_optimizer != nullptr) save.streamed_optimizer->write(drop).IgnoreError();
      return redeclared.status();
    }
    const std::unique_ptr<CausalLM> whole = *std::move(redeclared);
    for (const ParameterEntry& e : whole->table().entries()) {
      files.streamed_model.tensors.push_back({e.name, e.dtype, whole->hugging_face_shape(e)});
    }
    files.streamed_model.write = to_sink(save.write_model, files.streamed_model.tensors);
  }
  files.config_json = save.architecture->hugging_face_config_json(dtype);
  std::optional<io::OptimizerFiles> optimizer;
  if (save.optimizer != nullptr) optimizer = optimizer_files(*save.optimizer);
  if (save.streamed_optimizer != nullptr) optimizer = streamed_optimizer_files(*save.streamed_optimizer);
  if (optimizer) files.optimizer = &*optimizer;
  files.trainer = to_io(save.trainer);
  files.files_to_copy = save.files_to_copy;
  return io::SaveCheckpoint(root, files, options);
}

absl::Status SaveOptimizerState(const std::string& dir, const OptimizerStateDict& state) {
  return io::SaveOptimizerFiles(dir, optimizer_files(state));
}

absl::Status SaveOptimizerState(const std::string& dir, const StreamedOptimizerState& state) {
  return io::SaveOptimizerFiles(dir, streamed_optimizer_files(state));
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
