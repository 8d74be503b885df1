// colossal::comm — the launcher: start N workers of one node, torchrun-style.
//
// launch() starts `nproc_per_node` copies of a command with torchrun's
// variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
// MASTER_ADDR, MASTER_PORT), prefixes every line they print with their rank
// ("[rank 3] loss 2.31"), forwards SIGINT and SIGTERM to them, and when one
// fails stops the others (SIGTERM, then SIGKILL after a grace period) and
// returns its exit code, naming it. Each worker runs in its own process group,
// so signals reach the processes it starts too. `colossal run` is built on it;
// comm/launch/launch_main.cc is a small stand-alone driver.
//
//   LaunchOptions o;
//   o.command = {"./train", "recipes/gpt2.lua"};
//   o.nproc_per_node = 4;
//   COLOSSAL_ASSIGN_OR_RETURN(LaunchResult r, launch(o));
//   if (r.exit_code != 0) std::cerr << r.message << "\n";  // "worker rank 2 (pid 4242) exited with code 1"
//   return r.exit_code;
//
// Multi-node: run one launcher per node with the same nnodes, master_addr and
// master_port and node_rank 0..nnodes-1; rank = node_rank * nproc_per_node +
// local_rank. Only one launch() may run in a process at a time (it owns the
// SIGINT/SIGTERM handlers while it runs, and restores them after).
#ifndef COLOSSAL_COMM_LAUNCH_LAUNCH_H_
#define COLOSSAL_COMM_LAUNCH_LAUNCH_H_

#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace colossal::comm {

struct LaunchOptions {
  // The worker program and its arguments (looked up in PATH).
  std::vector<std::string> command;
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Extra environment variables for every worker.
  std::vector<std::pair<std::string, std::string>> env;
  // How long stopped workers get between SIGTERM and SIGKILL.
  absl::Duration grace_period = absl::Seconds(10);
  // After a SIGINT or SIGTERM forwarded to the workers, how long they may
  // take to finish their step, save and exit (comm/launch/stop_request.h)
  // before SIGKILL. A second signal is forwarded too (workers then stop at
  // once) and SIGKILL follows after grace_period.
  absl::Duration stop_timeout = absl::Minutes(10);
  // "[rank N] " before every line of output.
  bool prefix_output = true;
  // Where the workers' stdout and stderr lines go.
  int stdout_fd = STDOUT_FILENO;
  int stderr_fd = STDERR_FILENO;
  // Handle SIGINT/SIGTERM while running and pass them on to the workers.
  bool forward_signals = true;
};

struct LaunchResult {
  // 0 when every worker succeeded; otherwise the first failing worker's exit
  // code (128 + signal number when a signal killed it), or 128 + the signal
  // the launcher received and forwarded.
  int exit_code = 0;
  // The global rank of the first worker that failed, or -1.
  int failed_rank = -1;
  // One line for people: which worker failed and how, or that all succeeded.
  std::string message;
};

// Errors (absl::Status) are for a launch that cannot start: an empty command,
// sizes out of range, a program that cannot be executed (naming it and the
// reason). Workers failing is a LaunchResult, not an error.
absl::StatusOr<LaunchResult> launch(const LaunchOptions& options);

// The variables launch() gives the worker of `local_rank` (beyond the
// launcher's own environment), in order.
std::vector<std::pair<std::string, std::string>> worker_environment(const LaunchOptions& options,
                                                                    int local_rank);

}  // namespace colossal::comm

#endif  // COLOSSAL_COMM_LAUNCH_LAUNCH_H_
