// colossal::lua — the process's training runtime as the Lua module sees it:
// where this process sits in the job (rank, world size), its device and
// core::Context, and the data-parallel process group, made when first asked.
//
// One Runtime per Lua state. colossal.launch{device=, seed=} sets it up
// (Colossal-AI's colossalai.launch_from_torch); any binding that needs it
// before that gets the defaults (device "auto": cuda:<local_rank> when this
// build and machine have a GPU, else the CPU). Every object the bindings make
// (models, optimizers, boosters) holds a shared_ptr to it, so the Context and
// its streams outlive the tensors allocated on them.
#ifndef COLOSSAL_LUA_API_RUNTIME_H_
#define COLOSSAL_LUA_API_RUNTIME_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/launch/env.h"
#include "comm/process_group/process_group.h"
#include "comm/store/store.h"
#include "core/context/context.h"
#include "core/device/device.h"

extern "C" {
#include "lua.h"
}

namespace colossal::lua {

struct RuntimeOptions {
  std::string device = "auto";  // "auto", "cpu", "cuda" or "cuda:<n>"
  uint64_t seed = 1337;
};

struct Runtime {
  static constexpr char kMetatable[] = "colossal.Runtime";
  static constexpr char kTypeName[] = "the colossal runtime";

  comm::RankInfo rank;
  core::Device device = core::Device::cpu();
  uint64_t seed = 1337;
  std::unique_ptr<core::Context> ctx;

  // The group of every process of the job (NCCL on CUDA, the builtin ring on
  // the CPU), created on first use: a collective call every rank makes.
  absl::StatusOr<std::shared_ptr<comm::ProcessGroup>> process_group();
  // The job's store (the process group's rendezvous); null before
  // process_group().
  comm::Store* store() const { return store_.get(); }

 private:
  std::shared_ptr<comm::ProcessGroup> pg_;
  std::shared_ptr<comm::Store> store_;
};

// What the runtime reads from the environment, every value checked up front:
// where this process sits in the job (comm::discover_rank: RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_PORT, Slurm's and Open MPI's variables, ...), and
// COLOSSAL_DETERMINISTIC, COLOSSAL_GEMM_AUTOTUNE and COLOSSAL_ATTENTION,
// which the context and the attention read later. An error names the
// variable and its value; callers raise it with RaiseEnvironmentError.
absl::StatusOr<comm::RankInfo> ReadEnvironment();

// Makes the runtime of the process at `rank` (ReadEnvironment's). Errors: a
// device this build or machine does not have.
absl::StatusOr<std::shared_ptr<Runtime>> MakeRuntime(const RuntimeOptions& options,
                                                     const comm::RankInfo& rank);

// The state's runtime, made with default options on first use (raises
// through RaiseEnvironmentError or RaiseStatus on failure).
std::shared_ptr<Runtime> GetRuntime(lua_State* L);
// Whether colossal.launch (or a first use) has made it already.
bool HasRuntime(lua_State* L);
// Installs `runtime` (colossal.launch).
void SetRuntime(lua_State* L, std::shared_ptr<Runtime> runtime);

}  // namespace colossal::lua

#endif  // COLOSSAL_LUA_API_RUNTIME_H_
