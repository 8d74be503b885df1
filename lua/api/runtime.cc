#include "lua/api/runtime.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "comm/builtin/process_group_builtin.h"
#include "comm/nccl/process_group_nccl.h"
#include "comm/store/tcp_store.h"
#include "core/status/status.h"
#include "lua/api/lua_util.h"
#include "nn/layers/attention_core.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::lua {
namespace {

// The registry key of the state's runtime holder (a userdata).
constexpr char kRuntimeKey[] = "colossal.runtime";

std::shared_ptr<Runtime>* Holder(lua_State* L) {
  lua_getfield(L, LUA_REGISTRYINDEX, kRuntimeKey);
  auto* p = static_cast<std::shared_ptr<Runtime>*>(lua_touserdata(L, -1));
  lua_pop(L, 1);
  return p;
}

}  // namespace

absl::StatusOr<std::shared_ptr<comm::ProcessGroup>> Runtime::process_group() {
  if (pg_) return pg_;
  // ReadEnvironment checked it.
  const std::optional<absl::Duration> timeout = comm::timeout_from_env().value_or(std::nullopt);
  comm::TcpStoreOptions so;
  if (timeout) so.timeout = *timeout;
  so.host = rank.master_addr;
  // One process: a port of its own, so that jobs on one machine never meet.
  so.port = rank.world_size == 1 ? 0 : rank.master_port;
  so.is_master = rank.rank == 0;
  so.listen_address = rank.world_size == 1 ? "127.0.0.1" : "";
  so.job_id = rank.job_id;  // a job given another job's port is refused, not joined
  COLOSSAL_ASSIGN_OR_RETURN(auto store_unique, comm::TcpStore::create(so));
  std::shared_ptr<comm::Store> store(std::move(store_unique));
  store_ = store;
  if (device.is_cuda()) {
    // NVLink SHARP (multicast) is not used on this project's machines.
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    comm::NcclOptions no;
    no.device = device;
    no.compute_stream = ctx->compute_stream();
    if (timeout) no.timeout = *timeout;
    COLOSSAL_ASSIGN_OR_RETURN(pg_, comm::ProcessGroupNccl::create(store, rank.rank,
                                                                  rank.world_size, no));
  } else {
    comm::BuiltinOptions bo;
    bo.transport = rank.local_world_size == rank.world_size ? comm::TransportKind::kShm
                                                            : comm::TransportKind::kTcp;
    bo.tcp.route_to = rank.master_addr;
    if (timeout) bo.timeout = *timeout;
    COLOSSAL_ASSIGN_OR_RETURN(pg_, comm::ProcessGroupBuiltin::create(store, rank.rank,
                                                                     rank.world_size, bo));
  }
  return pg_;
}

absl::StatusOr<comm::RankInfo> ReadEnvironment() {
  COLOSSAL_ASSIGN_OR_RETURN(comm::RankInfo rank, comm::discover_rank());
  // Read again where they are used; checked here so that a bad value is
  // reported as the environment's before any work, not as the device's (the
  // context) or at the first forward (the attention).
  COLOSSAL_RETURN_IF_ERROR(core::parse_deterministic(std::getenv("COLOSSAL_DETERMINISTIC")).status());
  COLOSSAL_RETURN_IF_ERROR(comm::collective_check_from_env().status());
  COLOSSAL_RETURN_IF_ERROR(comm::timeout_from_env().status());
  COLOSSAL_RETURN_IF_ERROR(core::parse_gemm_autotune(std::getenv("COLOSSAL_GEMM_AUTOTUNE")).status());
  COLOSSAL_RETURN_IF_ERROR(nn::attention_impl_from_env().status());
  return rank;
}

absl::StatusOr<std::shared_ptr<Runtime>> MakeRuntime(const RuntimeOptions& options,
                                                     const comm::RankInfo& rank) {
  auto rt = std::make_shared<Runtime>();
  rt->rank = rank;
  rt->seed = options.seed;
  if (options.device == "auto") {
    rt->device = core::cuda_device_count() > 0 ? core::Device::cuda(rt->rank.local_rank)
                                               : core::Device::cpu();
  } else if (options.device == "cuda") {
    rt->device = core::Device::cuda(rt->rank.local_rank);
  } else {
    absl::StatusOr<core::Device> d = core::parse_device(options.device);
    if (!d.ok()) return absl::InvalidArgumentError(absl::StrCat("device: ", d.status().message()));
    rt->device = *d;
  }
  if (absl::Status s = core::check_device_available(rt->device); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("device '", options.device, "': ", s.message()));
  }
#if COLOSSAL_WITH_CUDA
  // The process works on its device from here on: CUDA calls made without a
  // guard (copies, kernels on the context's streams) must go to it, not to
  // device 0 (a worker of `colossal run` has local rank n and uses cuda:n).
  if (rt->device.is_cuda()) {
    if (cudaError_t e = cudaSetDevice(rt->device.index()); e != cudaSuccess) {
      return absl::FailedPreconditionError(absl::StrCat("cudaSetDevice(", rt->device.index(),
                                                        "): ", cudaGetErrorString(e)));
    }
  }
#endif
  COLOSSAL_ASSIGN_OR_RETURN(rt->ctx, core::Context::create(rt->device));
  rt->ctx->manual_seed(options.seed);
  return rt;
}

bool HasRuntime(lua_State* L) { return Holder(L) != nullptr; }

void SetRuntime(lua_State* L, std::shared_ptr<Runtime> runtime) {
  static const luaL_Reg kNone[] = {{nullptr, nullptr}};
  if (luaL_getmetatable(L, Runtime::kMetatable) == LUA_TNIL) {
    lua_pop(L, 1);
    RegisterType<Runtime>(L, kNone);
  } else {
    lua_pop(L, 1);
  }
  PushHandle<Runtime>(L, std::move(runtime));
  lua_setfield(L, LUA_REGISTRYINDEX, kRuntimeKey);
}

std::shared_ptr<Runtime> GetRuntime(lua_State* L) {
  if (std::shared_ptr<Runtime>* p = Holder(L)) return *p;
  absl::StatusOr<comm::RankInfo> rank = ReadEnvironment();
  if (!rank.ok()) RaiseEnvironmentError(rank.status());
  absl::StatusOr<std::shared_ptr<Runtime>> rt = MakeRuntime({}, *rank);
  if (!rt.ok()) RaiseStatus(L, "colossal runtime", rt.status());
  SetRuntime(L, *rt);
  return *rt;
}

}  // namespace colossal::lua
