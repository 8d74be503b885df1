#include "parallel/checkpoint/run_checkpoint.h"

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "core/status/status.h"
#include "io/checkpoint/checkpoint.h"
#include "nlohmann/json.hpp"
#include "nn/models/causal_lm/hugging_face.h"
#include "nn/train/checkpoint.h"

namespace colossal::parallel {
namespace {

absl::Status check_parts(const RunParts& run, const char* what, bool optimizer) {
  if (run.architecture == nullptr || run.model == nullptr || run.stream == nullptr ||
      (optimizer && run.optimizer == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the run's architecture, model store, stream", optimizer ? " and optimizer" : "",
        " are required"));
  }
  return absl::OkStatus();
}

// Before a save's first collective: every rank of the group announces
// itself in the job's store and waits for the others (RunParts::store).
// Saves of one kind count their arrivals, so the n-th save of every rank
// meets the n-th of the others.
absl::Status every_rank_enters(const RunParts& run, const char* what) {
  if (run.store == nullptr || run.group == nullptr || run.group->size() == 1) return absl::OkStatus();
  comm::Store& store = *run.store;
  const int world = run.group->size();
  const std::string base = absl::StrCat("colossal/", what, "/");
  COLOSSAL_ASSIGN_OR_RETURN(int64_t arrival, store.add(base + "arrivals", 1));
  absl::StatusOr<comm::ExchangeRound> round = comm::exchange_round(
      store, base, (arrival - 1) / world, run.rank, world, "1", store.timeout());
  if (!round.ok()) return core::annotate(round.status(), absl::StrCat(what, ": waiting for every rank"));
  if (round->missing.empty()) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat(
      what, ": rank(s) ", absl::StrJoin(round->missing, ", "), " of ", world,
      " did not start this save within ", absl::FormatDuration(store.timeout()),
      "; every rank must save together (as the recipe loop does): a rank that skips a save "
      "would leave the others waiting in its gathers"));
}

// After rank 0 wrote (`written`: its outcome there, OK elsewhere): every
// rank learns it from rank 0, so a save that failed there fails on every
// rank, in step, instead of leaving the others waiting for it.
absl::Status agree_with_rank0(const RunParts& run, const absl::Status& written) {
  if (run.group == nullptr || run.group->size() == 1) return written;
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor flag,
                            core::Tensor::empty({1}, core::DType::kI32, core::Stream::cpu()));
  *flag.data<int32_t>() = written.ok() ? 0 : 1;
  const core::Stream& stream = *run.stream;
  core::Tensor buf = flag;
  comm::CollectiveOptions o;
  if (stream.is_cuda()) {  // NCCL broadcasts device memory
    COLOSSAL_ASSIGN_OR_RETURN(buf, flag.to(stream.device(), stream));
    o.stream = stream;
  }
  absl::StatusOr<comm::WorkPtr> work = run.group->broadcast(buf, /*root=*/0, o);
  const absl::Status shared = work.ok() ? (*work)->wait() : work.status();
  if (!written.ok()) return written;  // this rank's own failure names the cause
  COLOSSAL_RETURN_IF_ERROR(core::annotate(shared, "waiting for rank 0"));
  if (stream.is_cuda()) {
    COLOSSAL_RETURN_IF_ERROR(flag.copy_from(buf, stream));
    stream.synchronize();
  }
  if (run.rank == 0 || *flag.data<int32_t>() == 0) return absl::OkStatus();
  return absl::AbortedError("rank 0 could not write the checkpoint (its log says why)");
}

// The whole model's values on the host for rank 0 (the plugin gathers what
// it shards; every rank must call it). Other ranks may get a store without memory.
absl::StatusOr<nn::ParameterStore> model_state(const RunParts& run) {
  if (run.booster != nullptr) return run.booster->model_state_dict(/*to_rank=*/0, *run.stream);
  return replicated_model_state(*run.model, *run.stream);
}

// The optimizer state rank 0 writes, on the host. Every rank calls it (ZeRO
// gathers its shards: a collective); only rank 0 builds the whole dict, the
// others get the meta alone and never hold the whole state.
absl::StatusOr<nn::OptimizerStateDict> optimizer_state(const RunParts& run) {
  COLOSSAL_ASSIGN_OR_RETURN(nn::OptimizerStateDict sd,
                            run.booster != nullptr ? run.booster->optimizer_state_dict(/*to_rank=*/0)
                                                   : run.optimizer->state_dict());
  if (run.rank != 0) {
    sd.tensors.clear();  // ddp's are views of the optimizer: nothing to copy
    return sd;
  }
  for (auto& [name, tensor] : sd.tensors) {
    if (tensor.device().is_cuda()) {
      COLOSSAL_ASSIGN_OR_RETURN(tensor, tensor.to(core::Device::cpu(), *run.stream));
    }
  }
  run.stream->synchronize();
  return sd;
}

bool streams(const RunParts& run) { return run.booster != nullptr && run.booster->streams_state(); }

// What a save writes: the model and (optionally) the optimizer state, held
// on rank 0 (gathered whole) or, from a plugin that streams its state
// (gemini, low_level_zero), to be gathered piece by piece as rank 0 writes.
struct SaveState {
  bool streamed = false;
  nn::ParameterStore model;
  std::optional<nn::OptimizerStateDict> optimizer;
  std::function<absl::Status(const nn::StatePieceFn&)> write_model;
  std::optional<nn::StreamedOptimizerState> streamed_optimizer;

  // Rank 0's save gets the parts.
  void fill(nn::CheckpointToSave& save) const {
    if (streamed) {
      save.write_model = write_model;
      if (streamed_optimizer) save.streamed_optimizer = &*streamed_optimizer;
    } else {
      save.model = &model;
      if (optimizer) save.optimizer = &*optimizer;
    }
  }
  // Other ranks run the gathers rank 0's save runs, in its order (the model,
  // then the optimizer state), as partners of its collectives.
  absl::Status take_part() const {
    if (!streamed) return absl::OkStatus();
    const nn::StatePieceFn drop = [](size_t, int64_t, const core::Tensor&) {};
    COLOSSAL_RETURN_IF_ERROR(write_model(drop));
    return streamed_optimizer ? streamed_optimizer->write(drop) : absl::OkStatus();
  }
};

// The state to save (every rank calls it: a plugin that shards gathers).
absl::StatusOr<SaveState> state_to_save(const RunParts& run, bool with_optimizer) {
  SaveState st;
  st.streamed = streams(run);
  if (st.streamed) {
    st.write_model = [booster = run.booster](const nn::StatePieceFn& piece) {
      return booster->stream_model_state(/*to_rank=*/0, piece);
    };
    if (with_optimizer) {
      absl::StatusOr<nn::StreamedOptimizerState> o = run.booster->stream_optimizer_state(/*to_rank=*/0);
      if (!o.ok()) return core::annotate(o.status(), "optimizer state");
      st.streamed_optimizer = *std::move(o);
    }
    return st;
  }
  if (with_optimizer) {
    absl::StatusOr<nn::OptimizerStateDict> o = optimizer_state(run);
    if (!o.ok()) return core::annotate(o.status(), "optimizer state");
    st.optimizer = *std::move(o);
  }
  COLOSSAL_ASSIGN_OR_RETURN(st.model, model_state(run));
  return st;
}

absl::Status load_optimizer_state(const nn::OptimizerStateDict& state, const RunParts& run) {
  return run.booster != nullptr ? run.booster->load_optimizer_state_dict(state)
                                : run.optimizer->load_state_dict(state);
}

// The checkpoint's config.json describes this model: every key of ours
// (model_type, sizes, vocabulary, context...) but the weights' dtype has the
// same value there. The first difference is named.
absl::Status check_same_model(const std::string& dir, const nn::CausalLM& mine) {
  COLOSSAL_ASSIGN_OR_RETURN(const std::string text, io::ReadCheckpointConfig(dir));
  const nlohmann::json theirs = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!theirs.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("'", dir, "/config.json' is not a JSON object"));
  }
  const nlohmann::json ours = nlohmann::json::parse(mine.hugging_face_config_json(mine.dtype()));
  for (const auto& [key, value] : ours.items()) {
    if (key == "torch_dtype") continue;
    const auto it = theirs.find(key);
    if (it == theirs.end() || *it != value) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the checkpoint's model is not this one: '", dir, "/config.json' has ", key, " = ",
          it == theirs.end() ? std::string("(missing)") : it->dump(), ", this model ", value.dump(),
          " (this model: ", mine.describe(), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> save_run_checkpoint(const std::string& root, int64_t step,
                                                const RunParts& run,
                                                const io::CheckpointOptions& options) {
  COLOSSAL_RETURN_IF_ERROR(check_parts(run, "save_run_checkpoint", /*optimizer=*/true));
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("save_run_checkpoint: step ", step, " < 0"));
  }
  COLOSSAL_RETURN_IF_ERROR(every_rank_enters(run, "save_run_checkpoint"));
  COLOSSAL_ASSIGN_OR_RETURN(const SaveState state, state_to_save(run, /*with_optimizer=*/true));
  std::string path;
  absl::Status written;
  if (run.rank == 0) {
    nn::CheckpointToSave save;
    save.step = step;
    save.architecture = run.architecture;
    state.fill(save);
    if (run.scheduler != nullptr) save.trainer.lr_scheduler = run.scheduler->state();
    if (run.scaler != nullptr) save.trainer.loss_scaler = run.scaler->state();
    if (run.context != nullptr) save.trainer.rng = run.context->rng_state();
    if (run.loader != nullptr) save.trainer.data_loader = run.loader->state();
    save.files_to_copy = run.files_to_copy;
    absl::StatusOr<std::string> saved = nn::SaveCheckpoint(root, save, options);
    written = saved.status();
    if (saved.ok()) path = *std::move(saved);
  } else {
    written = state.take_part();
  }
  COLOSSAL_RETURN_IF_ERROR(agree_with_rank0(run, written));
  if (path.empty()) path = absl::StrCat(root, "/", io::StepDirName(step));  // what rank 0 wrote
  return path;
}

absl::StatusOr<int64_t> load_run_checkpoint(const std::string& dir, const RunParts& run) {
  COLOSSAL_RETURN_IF_ERROR(check_parts(run, "load_run_checkpoint", /*optimizer=*/true));
  COLOSSAL_RETURN_IF_ERROR(check_same_model(dir, *run.architecture));
  // The small file first: a damaged one is reported before the weights load.
  COLOSSAL_ASSIGN_OR_RETURN(nn::TrainerState trainer, nn::LoadTrainerState(dir));
  COLOSSAL_RETURN_IF_ERROR(load_run_model(dir, run));
  COLOSSAL_ASSIGN_OR_RETURN(nn::OptimizerStateDict optimizer, nn::LoadOptimizerState(dir));
  COLOSSAL_RETURN_IF_ERROR(core::annotate(load_optimizer_state(optimizer, run), "optimizer state"));
  if (run.scheduler != nullptr) {
    // A checkpoint saved by a run without a schedule: the schedule goes on
    // from the checkpoint's step (a schedule steps once per optimizer step),
    // where a run of this recipe from the start would be, instead of
    // restarting its warm-up.
    const nn::LrSchedulerState state =
        trainer.lr_scheduler ? *trainer.lr_scheduler : nn::LrSchedulerState{.step = trainer.step};
    COLOSSAL_RETURN_IF_ERROR(run.scheduler->load_state(state));
    COLOSSAL_RETURN_IF_ERROR(run.optimizer->set_lrs(run.scheduler->lrs()));
  }
  if (run.scaler != nullptr && trainer.loss_scaler) {
    COLOSSAL_RETURN_IF_ERROR(run.scaler->load_state(*trainer.loss_scaler));
  }
  if (run.context != nullptr && trainer.rng) run.context->set_rng_state(*trainer.rng);
  if (run.loader != nullptr && trainer.data_loader) {
    COLOSSAL_RETURN_IF_ERROR(
        core::annotate(run.loader->set_state(*trainer.data_loader), "data loader"));
  }
  return trainer.step;
}

absl::StatusOr<std::string> save_run_model(const std::string& root, const RunParts& run) {
  COLOSSAL_RETURN_IF_ERROR(check_parts(run, "save_run_model", /*optimizer=*/false));
  COLOSSAL_RETURN_IF_ERROR(every_rank_enters(run, "save_run_model"));
  COLOSSAL_ASSIGN_OR_RETURN(const SaveState state, state_to_save(run, /*with_optimizer=*/false));
  std::string path;
  absl::Status written;
  if (run.rank == 0) {
    nn::CheckpointToSave save;
    save.architecture = run.architecture;
    state.fill(save);
    absl::StatusOr<std::string> saved = nn::SaveCheckpoint(root, save, {.keep_last = 0});
    written = saved.status();
    if (saved.ok()) path = *std::move(saved);
  } else {
    written = state.take_part();
  }
  COLOSSAL_RETURN_IF_ERROR(agree_with_rank0(run, written));
  return path;
}

absl::Status load_run_model(const std::string& dir, const RunParts& run) {
  COLOSSAL_RETURN_IF_ERROR(check_parts(run, "load_run_model", /*optimizer=*/false));
  // The whole model's parameters (every pipeline stage's, whole tensors),
  // whatever part of them the plugin then keeps.
  const nn::CausalLM& arch = *run.architecture;
  COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<nn::CausalLM> whole,
                            arch.redeclare(arch.dtype(), nn::ModelSplit{}));
  // A plugin that streams its state (a model that may fill the host) reads
  // views of the files instead of a copy of the whole model, when they hold
  // its dtype.
  if (streams(run)) {
    absl::StatusOr<core::DType> saved = io::ReadCheckpointDType(dir);
    if (saved.ok() && *saved == arch.dtype()) {
      COLOSSAL_ASSIGN_OR_RETURN(nn::ParameterStore mapped, nn::MapHuggingFaceModel(dir, *whole));
      return run.booster->load_model_state_dict(mapped, *run.stream);
    }
  }
  COLOSSAL_ASSIGN_OR_RETURN(nn::ParameterStore host,
                            nn::ParameterStore::create(whole->table(), core::Stream::cpu()));
  COLOSSAL_RETURN_IF_ERROR(nn::LoadHuggingFaceModelConverting(dir, *run.architecture, host));
  if (run.booster != nullptr) return run.booster->load_model_state_dict(host, *run.stream);
  return load_replicated_model_state(*run.model, host, *run.stream);
}

absl::Status save_run_optimizer(const std::string& dir, const RunParts& run) {
  COLOSSAL_RETURN_IF_ERROR(check_parts(run, "save_run_optimizer", /*optimizer=*/true));
  COLOSSAL_RETURN_IF_ERROR(every_rank_enters(run, "save_run_optimizer"));
  if (streams(run)) {
    absl::StatusOr<nn::StreamedOptimizerState> state = run.booster->stream_optimizer_state(/*to_rank=*/0);
    if (!state.ok()) return core::annotate(state.status(), "optimizer state");
    const absl::Status written = run.rank == 0
                                     ? nn::SaveOptimizerState(dir, *state)
                                     : state->write([](size_t, int64_t, const core::Tensor&) {});
    return agree_with_rank0(run, written);
  }
  COLOSSAL_ASSIGN_OR_RETURN(nn::OptimizerStateDict state, optimizer_state(run));
  return agree_with_rank0(run, run.rank == 0 ? nn::SaveOptimizerState(dir, state) : absl::OkStatus());
}

absl::Status load_run_optimizer(const std::string& dir, const RunParts& run) {
  COLOSSAL_RETURN_IF_ERROR(check_parts(run, "load_run_optimizer", /*optimizer=*/true));
  COLOSSAL_ASSIGN_OR_RETURN(nn::OptimizerStateDict state, nn::LoadOptimizerState(dir));
  return load_optimizer_state(state, run);
}

}  // namespace colossal::parallel
