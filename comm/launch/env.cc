#include "comm/launch/env.h"

#include <cstdlib>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status/status.h"

namespace colossal::comm {
namespace {

// The integer in variable `name`, or `fallback` when unset.
absl::StatusOr<int> int_var(const EnvLookup& env, const std::string& name,
                            std::optional<int> fallback = std::nullopt) {
  std::optional<std::string> v = env(name);
  if (!v) {
    if (fallback) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat(name, " is not set"));
  }
  int out = 0;
  if (!absl::SimpleAtoi(*v, &out)) {
    return absl::InvalidArgumentError(absl::StrCat(name, "='", *v, "' is not an integer"));
  }
  return out;
}

// "4(x2),3" -> per-node counts {4, 4, 3}.
absl::StatusOr<std::vector<int>> slurm_tasks_per_node(absl::string_view text) {
  std::vector<int> counts;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int count = 0, repeat = 1;
    const size_t paren = part.find('(');
    absl::string_view head = part.substr(0, paren);
    if (!absl::SimpleAtoi(head, &count)) {
      return absl::InvalidArgumentError(
          absl::StrCat("SLURM_TASKS_PER_NODE='", text, "' is not of the form 4(x2),3"));
    }
    if (paren != absl::string_view::npos) {
      absl::string_view tail = part.substr(paren);
      if (tail.size() < 4 || tail.substr(0, 2) != "(x" || tail.back() != ')' ||
          !absl::SimpleAtoi(tail.substr(2, tail.size() - 3), &repeat)) {
        return absl::InvalidArgumentError(
            absl::StrCat("SLURM_TASKS_PER_NODE='", text, "' is not of the form 4(x2),3"));
      }
    }
    for (int i = 0; i < repeat; ++i) counts.push_back(count);
  }
  return counts;
}

absl::Status validate(const RankInfo& r, const char* rank_var, const char* world_var,
                      const char* local_var, const char* local_world_var) {
  if (r.world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(world_var, "=", r.world_size, " must be >= 1"));
  }
  if (r.rank < 0 || r.rank >= r.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(rank_var, "=", r.rank, " is not in [0, ",
                                                   world_var, "=", r.world_size, ")"));
  }
  if (r.local_world_size < 1 || r.local_world_size > r.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(local_world_var, "=", r.local_world_size,
                                                   " is not in [1, ", world_var, "=",
                                                   r.world_size, "]"));
  }
  if (r.local_rank < 0 || r.local_rank >= r.local_world_size) {
    return absl::InvalidArgumentError(absl::StrCat(local_var, "=", r.local_rank, " is not in [0, ",
                                                   local_world_var, "=", r.local_world_size, ")"));
  }
  if (r.master_port < 1 || r.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("MASTER_PORT=", r.master_port, " is not a port (1..65535)"));
  }
  return absl::OkStatus();
}

// MASTER_ADDR / MASTER_PORT overrides.
absl::Status apply_master(const EnvLookup& env, RankInfo& r) {
  if (auto addr = env("MASTER_ADDR"); addr && !addr->empty()) r.master_addr = *addr;
  COLOSSAL_ASSIGN_OR_RETURN(r.master_port, int_var(env, "MASTER_PORT", r.master_port));
  return absl::OkStatus();
}

}  // namespace

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

std::string first_slurm_host(absl::string_view nodelist) {
  std::string out;
  size_t i = 0;
  while (i < nodelist.size() && nodelist[i] != ',') {
    if (nodelist[i] == '[') {
      // The first element of the range list: up to ',', '-' or ']'.
      ++i;
      while (i < nodelist.size() && nodelist[i] != ',' && nodelist[i] != '-' &&
             nodelist[i] != ']') {
        out.push_back(nodelist[i++]);
      }
      while (i < nodelist.size() && nodelist[i] != ']') ++i;
      if (i < nodelist.size()) ++i;  // past ']'
      continue;
    }
    out.push_back(nodelist[i++]);
  }
  return out;
}

namespace {

std::string job_id_of(const EnvLookup& env) {
  if (auto id = env("COLOSSAL_JOB_ID"); id && !id->empty()) return *id;
  if (auto id = env("TORCHELASTIC_RUN_ID"); id && !id->empty() && *id != "none") {
    return absl::StrCat("torchrun:", *id);
  }
  if (auto id = env("SLURM_JOB_ID"); id && !id->empty()) {
    const std::optional<std::string> step = env("SLURM_STEP_ID");
    return absl::StrCat("slurm:", *id, step ? absl::StrCat(".", *step) : "");
  }
  return "";
}

}  // namespace

absl::StatusOr<RankInfo> discover_rank(const EnvLookup& env) {
  RankInfo r;
  r.master_port = kDefaultMasterPort;
  r.job_id = job_id_of(env);
  if (env("RANK") && env("WORLD_SIZE")) {
    r.source = "torchrun";
    COLOSSAL_ASSIGN_OR_RETURN(r.rank, int_var(env, "RANK"));
    COLOSSAL_ASSIGN_OR_RETURN(r.world_size, int_var(env, "WORLD_SIZE"));
    COLOSSAL_ASSIGN_OR_RETURN(r.local_rank, int_var(env, "LOCAL_RANK", r.rank));
    COLOSSAL_ASSIGN_OR_RETURN(r.local_world_size,
                              int_var(env, "LOCAL_WORLD_SIZE", r.world_size));
    COLOSSAL_RETURN_IF_ERROR(apply_master(env, r));
    COLOSSAL_RETURN_IF_ERROR(validate(r, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"));
    return r;
  }
  if (env("SLURM_PROCID") && env("SLURM_NTASKS")) {
    r.source = "slurm";
    COLOSSAL_ASSIGN_OR_RETURN(r.rank, int_var(env, "SLURM_PROCID"));
    COLOSSAL_ASSIGN_OR_RETURN(r.world_size, int_var(env, "SLURM_NTASKS"));
    COLOSSAL_ASSIGN_OR_RETURN(r.local_rank, int_var(env, "SLURM_LOCALID", 0));
    if (env("SLURM_NTASKS_PER_NODE")) {
      COLOSSAL_ASSIGN_OR_RETURN(r.local_world_size, int_var(env, "SLURM_NTASKS_PER_NODE"));
    } else if (auto per_node = env("SLURM_TASKS_PER_NODE")) {
      COLOSSAL_ASSIGN_OR_RETURN(std::vector<int> counts, slurm_tasks_per_node(*per_node));
      COLOSSAL_ASSIGN_OR_RETURN(int node, int_var(env, "SLURM_NODEID", 0));
      if (node < 0 || node >= static_cast<int>(counts.size())) {
        return absl::InvalidArgumentError(absl::StrCat("SLURM_NODEID=", node, " but SLURM_TASKS_PER_NODE='",
                                                       *per_node, "' lists ", counts.size(), " nodes"));
      }
      r.local_world_size = counts[node];
    } else {
      r.local_world_size = r.world_size;
    }
    std::optional<std::string> nodes = env("SLURM_JOB_NODELIST");
    if (!nodes) nodes = env("SLURM_NODELIST");
    if (nodes && !nodes->empty()) r.master_addr = first_slurm_host(*nodes);
    COLOSSAL_RETURN_IF_ERROR(apply_master(env, r));
    COLOSSAL_RETURN_IF_ERROR(validate(r, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                                      "SLURM_NTASKS_PER_NODE"));
    return r;
  }
  if (env("OMPI_COMM_WORLD_RANK") && env("OMPI_COMM_WORLD_SIZE")) {
    r.source = "openmpi";
    COLOSSAL_ASSIGN_OR_RETURN(r.rank, int_var(env, "OMPI_COMM_WORLD_RANK"));
    COLOSSAL_ASSIGN_OR_RETURN(r.world_size, int_var(env, "OMPI_COMM_WORLD_SIZE"));
    COLOSSAL_ASSIGN_OR_RETURN(r.local_rank, int_var(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0));
    COLOSSAL_ASSIGN_OR_RETURN(r.local_world_size,
                              int_var(env, "OMPI_COMM_WORLD_LOCAL_SIZE", r.world_size));
    const std::optional<std::string> addr = env("MASTER_ADDR");
    if ((!addr || addr->empty()) && r.local_world_size != r.world_size) {
      return absl::InvalidArgumentError(
          "mpirun across several nodes does not say where rank 0 runs: set MASTER_ADDR "
          "(e.g. mpirun -x MASTER_ADDR=<rank 0's host> -x MASTER_PORT=29500 ...)");
    }
    COLOSSAL_RETURN_IF_ERROR(apply_master(env, r));
    COLOSSAL_RETURN_IF_ERROR(validate(r, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                      "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"));
    return r;
  }
  if (env("RANK") || env("WORLD_SIZE")) {
    return absl::InvalidArgumentError(absl::StrCat(
        env("RANK") ? "RANK" : "WORLD_SIZE", " is set but ", env("RANK") ? "WORLD_SIZE" : "RANK",
        " is not: set both (as torchrun and colossal run do)"));
  }
  COLOSSAL_RETURN_IF_ERROR(apply_master(env, r));
  COLOSSAL_RETURN_IF_ERROR(validate(r, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"));
  return r;
}

}  // namespace colossal::comm
