// booster:save_checkpoint / load_checkpoint / save_model / load_model /
// save_optimizer / load_optimizer and colossal.checkpoint.latest: io/checkpoint's step directories (Hugging Face
// GPT-2 weights, optimizer state, trainer_state.json) for a boosted run.
//
//   local path = booster:save_checkpoint("checkpoints/run", { step = 100, keep = 3 })
//   local latest = colossal.checkpoint.latest("checkpoints/run")   -- nil when none; an error
//                                               -- when `latest` is unreadable or names no step folder
//   if latest then step = booster:load_checkpoint(latest) end      -- after boost
//
// save_checkpoint writes model, optimizer (through the plugin: ZeRO gathers
// its shards), LR scheduler, loss scaler, RNG and data-loader state; every
// process calls it (the gathering is collective), rank 0 writes, and the
// others wait for it (parallel/checkpoint/run_checkpoint.h does all of that;
// these bindings only gather the run's parts). A save is atomic: a crash
// leaves the previous checkpoints and `latest` as they were.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "io/checkpoint/checkpoint.h"
#include "io/tokenizer/load_tokenizer.h"
#include "lua/api/lua_util.h"
#include "lua/api/objects.h"
#include "parallel/checkpoint/run_checkpoint.h"

namespace colossal::lua {
namespace {

BoosterObject& Boosted(lua_State* L, const char* what) {
  std::shared_ptr<BoosterObject>& b = CheckHandle<BoosterObject>(L, 1);
  if (!b->model) RaiseError(L, absl::StrCat(what, ": boost a model first"), kErrorUsage);
  return *b;
}

// The boosted run's parts, as parallel/checkpoint takes them.
parallel::RunParts Parts(lua_State* L, BoosterObject& b, const char* what) {
  parallel::RunParts run;
  run.architecture = b.model->net.get();
  run.model = &b.model->net->store();
  run.optimizer = &BuiltOptimizer(L, *b.optim);
  run.booster = b.booster.get();
  if (b.rt->rank.world_size > 1) {
    absl::StatusOr<std::shared_ptr<comm::ProcessGroup>> pg = b.rt->process_group();
    ThrowIfError(L, absl::StrCat(what, ": the process group"), pg.status());
    run.group = pg->get();
    run.store = b.rt->store();  // a save checks that every rank takes part
  }
  run.rank = b.rt->rank.rank;
  run.stream = &b.rt->ctx->compute_stream();
  if (b.scheduler) run.scheduler = &*b.scheduler->schedule;
  if (b.scaler) run.scaler = &*b.scaler;
  run.context = b.rt->ctx.get();
  if (b.loader) run.loader = b.loader->loader.get();
  // A fine-tune's step directories carry its tokenizer (generate, transformers).
  if (!b.model->pretrained_dir.empty()) run.files_to_copy = io::TokenizerFilesIn(b.model->pretrained_dir);
  return run;
}

}  // namespace

int BoosterSaveCheckpoint(lua_State* L) {
  BoosterObject& b = Boosted(L, "booster:save_checkpoint");
  const std::string root = StringArg(L, 2, /*non_empty=*/true,
                                     "booster:save_checkpoint: the first argument is the checkpoint folder");
  OptionTable o(L, 3, "booster:save_checkpoint");
  const int64_t step = o.integer("step", -1);
  io::CheckpointOptions options;
  options.keep_last = o.int32("keep", options.keep_last);
  o.finish();
  if (step < 0) o.fail("step", "is required (an integer >= 0)");
  if (options.keep_last < 0) o.fail("keep", "must be >= 0 (0 keeps all)");
  absl::StatusOr<std::string> path = parallel::save_run_checkpoint(
      root, step, Parts(L, b, "booster:save_checkpoint"), options);
  ThrowIfError(L, "booster:save_checkpoint", path.status());
  lua_pushstring(L, path->c_str());
  return 1;
}

int BoosterLoadCheckpoint(lua_State* L) {
  BoosterObject& b = Boosted(L, "booster:load_checkpoint");
  const std::string path = StringArg(L, 2, /*non_empty=*/false,
                                    "booster:load_checkpoint: the argument is a checkpoint folder");
  absl::StatusOr<std::string> dir = io::ResolveCheckpoint(path);
  ThrowIfError(L, "booster:load_checkpoint", dir.status());
  absl::StatusOr<int64_t> step =
      parallel::load_run_checkpoint(*dir, Parts(L, b, "booster:load_checkpoint"));
  ThrowIfError(L, absl::StrCat("booster:load_checkpoint ", *dir), step.status());
  lua_pushinteger(L, *step);
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
  absl::StatusOr<std::string> path =
      parallel::save_run_model(root, Parts(L, b, "booster:save_model"));
  ThrowIfError(L, "booster:save_model", path.status());
  lua_pushstring(L, path->c_str());
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
  ThrowIfError(L, "booster:load_model",
               parallel::load_run_model(*dir, Parts(L, b, "booster:load_model")));
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
  ThrowIfError(L, "booster:save_optimizer",
               parallel::save_run_optimizer(dir, Parts(L, b, "booster:save_optimizer")));
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
  ThrowIfError(L, "booster:load_optimizer",
               parallel::load_run_optimizer(dir, Parts(L, b, "booster:load_optimizer")));
  return 0;
}

int LatestCheckpoint(lua_State* L) {
  const std::string root = StringArg(L, 1, /*non_empty=*/false,
                                    "colossal.checkpoint.latest: the argument is a checkpoint folder");
  absl::StatusOr<std::string> dir = io::ResolveCheckpoint(root);
  if (dir.status().code() == absl::StatusCode::kNotFound) {  // no checkpoint (yet)
    lua_pushnil(L);
    return 1;
  }
  if (!dir.ok()) {
    // A `latest` that is unreadable or names no step folder is damage, not
    // "no checkpoint": training from step 1 would save over the step folders.
    RaiseError(L,
               absl::StrCat("colossal.checkpoint.latest: ", dir.status().message(),
                            " (repair or remove it; starting over would overwrite its step folders)"),
               kErrorRuntime);
  }
  lua_pushstring(L, dir->c_str());
  return 1;
}

}  // namespace colossal::lua
