// booster:save_checkpoint / load_checkpoint / save_model / load_model /
// save_optimizer / load_optimizer and colossal.checkpoint.latest: io/checkpoint's step directories (Hugging Face
// GPT-2 weights, optimizer state, trainer_state.json) for a boosted run.
//
//   local path = booster:save_checkpoint("checkpoints/run", { step = 100, keep = 3 })
//   local latest = colossal.checkpoint.latest("checkpoints/run")   -- nil when none
//   if latest then step = booster:load_checkpoint(latest) end      -- after boost
//
// save_checkpoint writes model, optimizer (through the plugin: ZeRO gathers
// its shards), LR scheduler, loss scaler, RNG and data-loader state; every
// process calls it (the gathering is collective), rank 0 writes, and the
// others wait for it. A save is atomic: a crash leaves the previous
// checkpoints and `latest` as they were. Weights are copied to the host to be
// written (and back when loaded), whatever the device.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "io/checkpoint/checkpoint.h"
#include "nn/train/checkpoint.h"
#include "lua/api/lua_util.h"
#include "lua/api/objects.h"

namespace colossal::lua {
namespace {

// A host copy of the model's parameters (the store itself on the CPU).
absl::StatusOr<nn::ParameterStore> HostStore(Model& model) {
  nn::ParameterStore& store = model.net->store();
  const core::Stream& stream = model.rt->ctx->compute_stream();
  COLOSSAL_ASSIGN_OR_RETURN(nn::ParameterStore host,
                            nn::ParameterStore::create(store.table(), core::Stream::cpu()));
  for (core::DType dtype : store.table().dtypes()) {
    core::Tensor out = host.flat_values(dtype);
    COLOSSAL_RETURN_IF_ERROR(out.copy_from(store.flat_values(dtype), stream));
  }
  stream.synchronize();
  return host;
}

absl::Status CopyToModel(Model& model, const nn::ParameterStore& host) {
  nn::ParameterStore& store = model.net->store();
  const core::Stream& stream = model.rt->ctx->compute_stream();
  for (core::DType dtype : store.table().dtypes()) {
    core::Tensor out = store.flat_values(dtype);
    COLOSSAL_RETURN_IF_ERROR(out.copy_from(host.flat_values(dtype), stream));
  }
  stream.synchronize();
  return absl::OkStatus();
}

// The optimizer state rank 0 writes, on the host. Every rank calls it (ZeRO
// gathers its shards: a collective); only rank 0 builds the whole dict, the
// others get the meta alone and never hold the whole state.
absl::StatusOr<nn::OptimizerStateDict> OptimizerState(BoosterObject& b) {
  COLOSSAL_ASSIGN_OR_RETURN(nn::OptimizerStateDict sd,
                            b.booster ? b.booster->optimizer_state_dict(/*to_rank=*/0)
                                      : b.optim->opt->state_dict());
  if (b.rt->rank.rank != 0) {
    sd.tensors.clear();  // ddp's are views of the optimizer: nothing to copy
    return sd;
  }
  for (auto& [name, tensor] : sd.tensors) {
    if (tensor.device().is_cuda()) {
      COLOSSAL_ASSIGN_OR_RETURN(tensor,
                                tensor.to(core::Device::cpu(), b.rt->ctx->compute_stream()));
    }
  }
  b.rt->ctx->compute_stream().synchronize();
  return sd;
}

// Waits until every process got here (after rank 0 wrote).
absl::Status Barrier(BoosterObject& b) {
  if (b.rt->rank.world_size == 1) return absl::OkStatus();
  COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<comm::ProcessGroup> pg, b.rt->process_group());
  COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr work, pg->barrier());
  return work->wait();
}

BoosterObject& Boosted(lua_State* L, const char* what) {
  std::shared_ptr<BoosterObject>& b = CheckHandle<BoosterObject>(L, 1);
  if (!b->model) RaiseError(L, absl::StrCat(what, ": boost a model first"), kErrorUsage);
  return *b;
}

}  // namespace

int BoosterSaveCheckpoint(lua_State* L) {
  BoosterObject& b = Boosted(L, "booster:save_checkpoint");
  const std::string root = StringArg(L, 2, /*non_empty=*/true,
                                     "booster:save_checkpoint: the first argument is the checkpoint folder");
  OptionTable o(L, 3, "booster:save_checkpoint");
  const int64_t step = o.integer("step", -1);
  io::CheckpointOptions options;
  options.keep_last = static_cast<int>(o.integer("keep", options.keep_last));
  o.finish();
  if (step < 0) o.fail("step", "is required (an integer >= 0)");
  if (options.keep_last < 0) o.fail("keep", "must be >= 0 (0 keeps all)");
  absl::StatusOr<nn::OptimizerStateDict> optimizer = OptimizerState(b);
  ThrowIfError(L, "booster:save_checkpoint: optimizer state", optimizer.status());
  std::string path;
  if (b.rt->rank.rank == 0) {
    absl::StatusOr<nn::ParameterStore> host = HostStore(*b.model);
    ThrowIfError(L, "booster:save_checkpoint", host.status());
    nn::CheckpointToSave save;
    save.step = step;
    save.config = &b.model->net->config();
    save.model = &*host;
    save.optimizer = &*optimizer;
    if (b.scheduler) save.trainer.lr_scheduler = b.scheduler->schedule->state();
    if (b.scaler) save.trainer.loss_scaler = b.scaler->state();
    save.trainer.rng = b.rt->ctx->rng_state();
    if (b.loader) save.trainer.data_loader = b.loader->loader->state();
    absl::StatusOr<std::string> saved = nn::SaveCheckpoint(root, save, options);
    ThrowIfError(L, "booster:save_checkpoint", saved.status());
    path = *saved;
  }
  ThrowIfError(L, "booster:save_checkpoint: waiting for rank 0", Barrier(b));
  if (path.empty()) path = absl::StrCat(root, "/step_", step);  // what rank 0 wrote
  lua_pushstring(L, path.c_str());
  return 1;
}

int BoosterLoadCheckpoint(lua_State* L) {
  BoosterObject& b = Boosted(L, "booster:load_checkpoint");
  const std::string path = StringArg(L, 2, /*non_empty=*/false,
                                    "booster:load_checkpoint: the argument is a checkpoint folder");
  absl::StatusOr<std::string> dir = io::ResolveCheckpoint(path);
  ThrowIfError(L, "booster:load_checkpoint", dir.status());
  const std::string context = absl::StrCat("booster:load_checkpoint ", *dir);
  absl::StatusOr<nn::GPT2Config> config = nn::ReadGPT2Config(*dir);
  ThrowIfError(L, context, config.status());
  const nn::GPT2Config& mine = b.model->net->config();
  if (config->n_layer != mine.n_layer || config->n_head != mine.n_head ||
      config->n_embd != mine.n_embd || config->vocab_size != mine.vocab_size ||
      config->max_seq_len != mine.max_seq_len) {
    RaiseError(L,
               absl::StrCat(context, ": the checkpoint's model (", config->n_layer, " layers, ",
                            config->n_head, " heads, n_embd ", config->n_embd, ", vocab ",
                            config->vocab_size, ", context ", config->max_seq_len,
                            ") is not this one (", mine.n_layer, ", ", mine.n_head, ", ",
                            mine.n_embd, ", ", mine.vocab_size, ", ", mine.max_seq_len, ")"),
               kErrorUsage);
  }
  {
    absl::StatusOr<nn::ParameterStore> host =
        nn::ParameterStore::create(b.model->net->table(), core::Stream::cpu());
    ThrowIfError(L, context, host.status());
    ThrowIfError(L, context, nn::LoadGPT2Model(*dir, mine, *host));
    ThrowIfError(L, context, CopyToModel(*b.model, *host));
  }
  absl::StatusOr<nn::OptimizerStateDict> optimizer = nn::LoadOptimizerState(*dir);
  ThrowIfError(L, context, optimizer.status());
  ThrowIfError(L, absl::StrCat(context, ": optimizer state"),
               b.booster ? b.booster->load_optimizer_state_dict(*optimizer)
                         : b.optim->opt->load_state_dict(*optimizer));
  absl::StatusOr<nn::TrainerState> trainer = nn::LoadTrainerState(*dir);
  ThrowIfError(L, context, trainer.status());
  if (b.scheduler && trainer->lr_scheduler) {
    ThrowIfError(L, context, b.scheduler->schedule->load_state(*trainer->lr_scheduler));
    ThrowIfError(L, context, b.optim->opt->set_lrs(b.scheduler->schedule->lrs()));
  }
  if (b.scaler && trainer->loss_scaler) {
    ThrowIfError(L, context, b.scaler->load_state(*trainer->loss_scaler));
  }
  if (trainer->rng) b.rt->ctx->set_rng_state(*trainer->rng);
  if (b.loader && trainer->data_loader) {
    ThrowIfError(L, absl::StrCat(context, ": data loader"),
                 b.loader->loader->set_state(*trainer->data_loader));
  }
  lua_pushinteger(L, trainer->step);
  return 1;
}

// booster:save_model(model, folder) -> the step_000000 folder written under it
int BoosterSaveModel(lua_State* L) {
  BoosterObject& b = Boosted(L, "booster:save_model");
  if (CheckHandle<Model>(L, 2) != b.model) {
    RaiseError(L, "booster:save_model: not the boosted model", kErrorUsage);
  }
  const std::string root = StringArg(L, 3, /*non_empty=*/false,
                                    "booster:save_model: the second argument is a folder");
  std::string path;
  if (b.rt->rank.rank == 0) {
    absl::StatusOr<nn::ParameterStore> host = HostStore(*b.model);
    ThrowIfError(L, "booster:save_model", host.status());
    nn::CheckpointToSave save;
    save.config = &b.model->net->config();
    save.model = &*host;
    absl::StatusOr<std::string> saved = nn::SaveCheckpoint(root, save, {.keep_last = 0});
    ThrowIfError(L, "booster:save_model", saved.status());
    path = *saved;
  }
  ThrowIfError(L, "booster:save_model: waiting for rank 0", Barrier(b));
  lua_pushstring(L, path.c_str());
  return 1;
}

// booster:load_model(model, path): the weights only
int BoosterLoadModel(lua_State* L) {
  BoosterObject& b = Boosted(L, "booster:load_model");
  if (CheckHandle<Model>(L, 2) != b.model) {
    RaiseError(L, "booster:load_model: not the boosted model", kErrorUsage);
  }
  const std::string path = StringArg(L, 3, /*non_empty=*/false,
                                    "booster:load_model: the second argument is a checkpoint folder");
  absl::StatusOr<std::string> dir = io::ResolveCheckpoint(path);
  ThrowIfError(L, "booster:load_model", dir.status());
  absl::StatusOr<nn::ParameterStore> host =
      nn::ParameterStore::create(b.model->net->table(), core::Stream::cpu());
  ThrowIfError(L, "booster:load_model", host.status());
  ThrowIfError(L, "booster:load_model", nn::LoadGPT2Model(*dir, b.model->net->config(), *host));
  ThrowIfError(L, "booster:load_model", CopyToModel(*b.model, *host));
  return 0;
}

// booster:save_optimizer(optimizer, folder): the optimizer state alone
// (optimizer.safetensors + optimizer.json; ZeRO gathers its shards first).
// Every process calls it; rank 0 writes.
int BoosterSaveOptimizer(lua_State* L) {
  BoosterObject& b = Boosted(L, "booster:save_optimizer");
  if (CheckHandle<Optim>(L, 2) != b.optim) {
    RaiseError(L, "booster:save_optimizer: not the boosted optimizer", kErrorUsage);
  }
  const std::string dir = StringArg(L, 3, /*non_empty=*/true,
                                    "booster:save_optimizer: the second argument is a folder");
  absl::StatusOr<nn::OptimizerStateDict> state = OptimizerState(b);
  ThrowIfError(L, "booster:save_optimizer", state.status());
  if (b.rt->rank.rank == 0) ThrowIfError(L, "booster:save_optimizer", nn::SaveOptimizerState(dir, *state));
  ThrowIfError(L, "booster:save_optimizer: waiting for rank 0", Barrier(b));
  return 0;
}

// booster:load_optimizer(optimizer, folder): a folder from save_optimizer or
// a checkpoint step folder.
int BoosterLoadOptimizer(lua_State* L) {
  BoosterObject& b = Boosted(L, "booster:load_optimizer");
  if (CheckHandle<Optim>(L, 2) != b.optim) {
    RaiseError(L, "booster:load_optimizer: not the boosted optimizer", kErrorUsage);
  }
  const std::string dir = StringArg(L, 3, /*non_empty=*/false,
                                    "booster:load_optimizer: the second argument is a folder");
  absl::StatusOr<nn::OptimizerStateDict> state = nn::LoadOptimizerState(dir);
  ThrowIfError(L, "booster:load_optimizer", state.status());
  ThrowIfError(L, "booster:load_optimizer",
               b.booster ? b.booster->load_optimizer_state_dict(*state)
                         : b.optim->opt->load_state_dict(*state));
  return 0;
}

int LatestCheckpoint(lua_State* L) {
  const std::string root = StringArg(L, 1, /*non_empty=*/false,
                                    "colossal.checkpoint.latest: the argument is a checkpoint folder");
  absl::StatusOr<std::string> dir = io::ResolveCheckpoint(root);
  if (!dir.ok()) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushstring(L, dir->c_str());
  return 1;
}

}  // namespace colossal::lua
