#include "comm/testing/multiprocess.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/store/tcp_store.h"

extern char** environ;

namespace colossal::comm::testing {

pid_t spawn_self(const std::string& filter,
                 const std::vector<std::pair<std::string, std::string>>& env) {
  static const char* kDropped[] = {"XML_OUTPUT_FILE=", "GTEST_OUTPUT=", "TEST_SHARD_INDEX=",
                                   "TEST_TOTAL_SHARDS=", "TEST_SHARD_STATUS_FILE=",
                                   "TEST_PREMATURE_EXIT_FILE=", "GTEST_SHARD_INDEX=",
                                   "GTEST_TOTAL_SHARDS=", "GTEST_SHARD_STATUS_FILE="};
  std::vector<std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    bool drop = false;
    for (const char* d : kDropped) drop = drop || absl::StartsWith(*e, d);
    for (const auto& [k, v] : env) drop = drop || absl::StartsWith(*e, k + "=");
    if (!drop) vars.push_back(*e);
  }
  for (const auto& [k, v] : env) vars.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string arg = "--gtest_filter=" + filter;
  char* argv[] = {exe.data(), arg.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, envp.data());
  if (rc != 0) {
    std::fprintf(stderr, "posix_spawn failed: %s\n", std::strerror(rc));
    std::abort();
  }
  return pid;
}

std::vector<int> wait_children(const std::vector<pid_t>& pids, absl::Duration timeout) {
  std::vector<int> codes(pids.size(), -1);
  std::vector<bool> done(pids.size(), false);
  const absl::Time deadline = absl::Now() + timeout;
  size_t left = pids.size();
  while (left > 0 && absl::Now() < deadline) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        done[i] = true;
        --left;
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    if (left > 0) absl::SleepFor(absl::Milliseconds(5));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (done[i]) continue;
    kill(pids[i], SIGKILL);
    int status = 0;
    waitpid(pids[i], &status, 0);
    codes[i] = -1;
  }
  return codes;
}

std::string child_env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

void run_rank_processes(const std::string& filter, const std::string& scenario, int world,
                        const std::vector<std::pair<std::string, std::string>>& env,
                        absl::Duration timeout, const std::string& what) {
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::pair<std::string, std::string>> vars = {
        {"COMM_TEST_SCENARIO", scenario},
        {"COMM_TEST_RANK", std::to_string(r)},
        {"COMM_TEST_WORLD", std::to_string(world)},
        {"COMM_TEST_PORT", std::to_string((*server)->port())}};
    vars.insert(vars.end(), env.begin(), env.end());
    pids.push_back(spawn_self(filter, vars));
  }
  const std::vector<int> codes = wait_children(pids, timeout);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(codes[r], 0) << what << ": rank " << r
                           << (codes[r] == -1 ? " timed out" : " failed (see its output above)");
  }
}

std::optional<ChildRank> child_rank() {
  ChildRank c;
  c.scenario = child_env("COMM_TEST_SCENARIO");
  if (c.scenario.empty()) return std::nullopt;
  EXPECT_TRUE(absl::SimpleAtoi(child_env("COMM_TEST_RANK"), &c.rank));
  EXPECT_TRUE(absl::SimpleAtoi(child_env("COMM_TEST_WORLD"), &c.world));
  EXPECT_TRUE(absl::SimpleAtoi(child_env("COMM_TEST_PORT"), &c.port));
  return c;
}

}  // namespace colossal::comm::testing
