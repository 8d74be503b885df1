// colossal::comm — where this process sits in a job, from its environment.
//
// Workers started by `colossal run` or torchrun get RANK, LOCAL_RANK,
// WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT. Under Slurm
// (srun) and Open MPI (mpirun) the scheduler's own variables say the same;
// discover_rank() reads whichever is there, in this order:
//   torchrun   RANK + WORLD_SIZE (LOCAL_RANK, LOCAL_WORLD_SIZE optional)
//   Slurm      SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
//              or SLURM_TASKS_PER_NODE ("4(x2),3") with SLURM_NODEID;
//              master: the first host of SLURM_JOB_NODELIST ("gpu[03-10]" -> "gpu03")
//   Open MPI   OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE;
//              master: MASTER_ADDR, or 127.0.0.1 when the job is on one node
//   nothing    a single process: rank 0 of 1 on 127.0.0.1
// MASTER_ADDR and MASTER_PORT, when set, override what a scheduler implies;
// the port defaults to 29500 (torch's).
//
// The job's id, which the rendezvous store checks so that two jobs given one
// port refuse each other instead of joining: COLOSSAL_JOB_ID (`colossal run`
// sets a random one on one node; set it yourself, the same on every node,
// across nodes), else torchrun's TORCHELASTIC_RUN_ID (but its default
// "none"), else Slurm's SLURM_JOB_ID.SLURM_STEP_ID; "" (no check) otherwise.
//
//   COLOSSAL_ASSIGN_OR_RETURN(RankInfo me, discover_rank());
//   TcpStoreOptions so;  so.host = me.master_addr;  so.port = me.master_port;
//   so.is_master = me.rank == 0;
//
// Errors name the variable and its value: RANK='x' is not an integer;
// RANK=4 is not below WORLD_SIZE=4; mpirun across nodes without MASTER_ADDR.
#ifndef COLOSSAL_COMM_LAUNCH_ENV_H_
#define COLOSSAL_COMM_LAUNCH_ENV_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace colossal::comm {

struct RankInfo {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // "torchrun", "slurm", "openmpi" or "default".
  std::string source = "default";
  // The job's id (above), or "".
  std::string job_id;
};

inline constexpr int kDefaultMasterPort = 29500;

// Looks up an environment variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// The process environment (getenv).
EnvLookup process_env();

absl::StatusOr<RankInfo> discover_rank(const EnvLookup& env = process_env());

// The first host of a Slurm host list: "node[01-04,07],gpu5" -> "node01".
std::string first_slurm_host(absl::string_view nodelist);

}  // namespace colossal::comm

#endif  // COLOSSAL_COMM_LAUNCH_ENV_H_
