// Multi-process tests: a test binary that runs itself again as the ranks.
//
// The parent (a normal gtest case) starts children with spawn_self(), each
// running one gtest case chosen by filter, with extra environment variables
// (rank, store port, ...). The child case reads them with child_env() and
// skips itself when they are absent, so it is inert in a normal run.
// posix_spawn + exec keeps children clean even when the parent has threads.
//
//   std::vector<pid_t> pids;
//   for (int r = 0; r < 2; ++r)
//     pids.push_back(spawn_self("Child.Run", {{"COMM_TEST_RANK", std::to_string(r)}}));
//   std::vector<int> codes = wait_children(pids, absl::Seconds(30));  // 0 = passed
//
// Or, for ranks meeting at a TCP store the parent serves: run_rank_processes()
// in the parent, child_rank() in the child (and store_client(), ranks.h).
#ifndef COLOSSAL_COMM_TESTING_MULTIPROCESS_H_
#define COLOSSAL_COMM_TESTING_MULTIPROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace colossal::comm::testing {

// Starts this binary with --gtest_filter=`filter` and `env` added to the
// environment (Bazel's per-test output variables removed, so children do not
// overwrite the parent's results). Aborts if it cannot spawn.
pid_t spawn_self(const std::string& filter,
                 const std::vector<std::pair<std::string, std::string>>& env);

// Exit codes in order: the exit status, 128 + signal when killed by one, or
// -1 when still running at `timeout` (then it is killed with SIGKILL).
std::vector<int> wait_children(const std::vector<pid_t>& pids, absl::Duration timeout);

// The environment variable `name`, or "" when unset.
std::string child_env(const char* name);

// Parent: serves a TCP store on 127.0.0.1, starts `world` children running
// gtest case `filter`, rank r with COMM_TEST_SCENARIO=scenario, COMM_TEST_RANK=r,
// COMM_TEST_WORLD=world, COMM_TEST_PORT=the store's port and `env`, waits up to
// `timeout`, and expects every rank to exit 0 (a failure names `what` and the
// rank).
void run_rank_processes(const std::string& filter, const std::string& scenario, int world,
                        const std::vector<std::pair<std::string, std::string>>& env,
                        absl::Duration timeout, const std::string& what);

// Child of run_rank_processes(): its scenario, rank, world and the store's port.
struct ChildRank {
  std::string scenario;
  int rank = 0;
  int world = 0;
  int port = 0;
};

// The child's ChildRank (an unparsable variable is a test failure), or nullopt
// in a normal (parent) run.
std::optional<ChildRank> child_rank();

}  // namespace colossal::comm::testing

#endif  // COLOSSAL_COMM_TESTING_MULTIPROCESS_H_
