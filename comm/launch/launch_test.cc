// The launcher with a real worker program (launch_test_worker): torchrun's
// variables, "[rank N]" prefixes, a failing worker stopping the others and
// naming itself, SIGKILL after the grace period, and SIGINT forwarded by the
// stand-alone `launch` binary.
#include "comm/launch/launch.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

extern char** environ;

namespace colossal::comm {
namespace {

const char kWorker[] = "comm/launch/launch_test_worker";
const char kLauncher[] = "comm/launch/launch_main";

std::string tmp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir ? dir : "/tmp", "/", name);
}

// A file to collect output in; read() returns everything written.
class Capture {
 public:
  explicit Capture(const std::string& name) : path_(tmp_path(name)) {
    fd_ = open(path_.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC, 0644);
    EXPECT_GE(fd_, 0);
  }
  ~Capture() { close(fd_); }
  int fd() const { return fd_; }
  std::string read() const {
    std::ifstream in(path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::string path_;
  int fd_;
};

// Starts the launcher binary with `args` (its own path first), its stdout
// and stderr into `out`; the pid, or 0 (a test failure) when it did not start.
pid_t spawn_launcher(std::vector<std::string> args, const Capture& out) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out.fd(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out.fd(), STDERR_FILENO);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, kLauncher, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0);
  return rc == 0 ? pid : 0;
}

// Waits (up to 20 s) until workers 0..n-1 wrote `dir`/ready.<rank>.
void wait_ready(const std::string& dir, int n) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  for (int r = 0; r < n; ++r) {
    const std::string ready = absl::StrCat(dir, "/ready.", r);
    while (access(ready.c_str(), F_OK) != 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  }
}

LaunchOptions options(std::vector<std::string> args, const Capture& out, const Capture& err) {
  LaunchOptions o;
  o.command = {kWorker};
  o.command.insert(o.command.end(), args.begin(), args.end());
  o.stdout_fd = out.fd();
  o.stderr_fd = err.fd();
  o.forward_signals = false;  // the test process keeps its own handlers
  o.grace_period = absl::Seconds(5);
  return o;
}

bool contains(const std::string& text, const std::string& fragment) {
  return text.find(fragment) != std::string::npos;
}

TEST(LaunchTest, WorkersGetTorchrunVariablesAndPrefixedOutput) {
  Capture out("env.out"), err("env.err");
  LaunchOptions o = options({"env"}, out, err);
  o.nproc_per_node = 3;
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_addr = "127.0.0.1";
  o.master_port = 29511;
  o.env = {{"EXTRA", "yes"}};
  auto r = launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->message;
  EXPECT_EQ(r->failed_rank, -1);
  const std::string text = out.read();
  for (int local = 0; local < 3; ++local) {
    const int rank = 3 + local;
    const std::string p = absl::StrCat("[rank ", rank, "] ");
    EXPECT_TRUE(contains(text, absl::StrCat(p, "RANK=", rank, "\n"))) << text;
    EXPECT_TRUE(contains(text, absl::StrCat(p, "LOCAL_RANK=", local, "\n"))) << text;
    EXPECT_TRUE(contains(text, p + "WORLD_SIZE=6\n")) << text;
    EXPECT_TRUE(contains(text, p + "LOCAL_WORLD_SIZE=3\n")) << text;
    EXPECT_TRUE(contains(text, p + "GROUP_RANK=1\n")) << text;
    EXPECT_TRUE(contains(text, p + "MASTER_ADDR=127.0.0.1\n")) << text;
    EXPECT_TRUE(contains(text, p + "MASTER_PORT=29511\n")) << text;
    EXPECT_TRUE(contains(text, p + "EXTRA=yes\n")) << text;
    EXPECT_TRUE(contains(text, p + "tail\n")) << "unterminated last line: " << text;
    EXPECT_TRUE(contains(err.read(), absl::StrCat(p, "err from ", rank, "\n"))) << err.read();
  }
  // Every line carries a prefix.
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(line, "[rank ")) << line;
  }
}

// On one node the workers share a random job id (their rendezvous refuses
// another job's workers); across nodes only the user's COLOSSAL_JOB_ID.
TEST(LaunchTest, OneNodesWorkersShareAJobId) {
  Capture out("job.out"), err("job.err");
  LaunchOptions o = options({"env"}, out, err);
  o.nproc_per_node = 2;
  auto r = launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string text = out.read();
  std::string ids[2];
  for (int rank = 0; rank < 2; ++rank) {
    const std::string key = absl::StrCat("[rank ", rank, "] COLOSSAL_JOB_ID=");
    const size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos) << text;
    ids[rank] = text.substr(at + key.size(), text.find('\n', at) - at - key.size());
  }
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_EQ(ids[0].size(), 16u) << ids[0];
  EXPECT_NE(ids[0], "(unset)");
}

TEST(LaunchTest, WithoutPrefix) {
  Capture out("plain.out"), err("plain.err");
  LaunchOptions o = options({"env"}, out, err);
  o.prefix_output = false;
  auto r = launch(o);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(contains(out.read(), "\nLOCAL_RANK=0\n")) << out.read();
}

TEST(LaunchTest, AFailingWorkerStopsTheOthersAndIsNamed) {
  Capture out("fail.out"), err("fail.err");
  LaunchOptions o = options({"fail", "1", "7"}, out, err);
  o.nproc_per_node = 3;
  const absl::Time start = absl::Now();
  auto r = launch(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(4)) << "others were not stopped promptly";
  EXPECT_EQ(r->exit_code, 7);
  EXPECT_EQ(r->failed_rank, 1);
  EXPECT_TRUE(contains(r->message, "worker rank 1")) << r->message;
  EXPECT_TRUE(contains(r->message, "exited with code 7")) << r->message;
  EXPECT_TRUE(contains(r->message, "stopped 2 other worker(s)")) << r->message;
  EXPECT_TRUE(contains(out.read(), "[rank 2] waiting\n")) << out.read();
}

TEST(LaunchTest, ACrashIsReportedBySignal) {
  Capture out("crash.out"), err("crash.err");
  LaunchOptions o = options({"crash", "0"}, out, err);
  o.nproc_per_node = 2;
  auto r = launch(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 128 + SIGABRT);
  EXPECT_EQ(r->failed_rank, 0);
  EXPECT_TRUE(contains(r->message, "killed by SIGABRT")) << r->message;
}

TEST(LaunchTest, StubbornWorkersAreKilledAfterTheGracePeriod) {
  Capture out("stubborn.out"), err("stubborn.err");
  LaunchOptions o = options({"stubborn", "0", "3"}, out, err);
  o.nproc_per_node = 3;
  o.grace_period = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  auto r = launch(o);
  ASSERT_TRUE(r.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->failed_rank, 0);
}

TEST(LaunchTest, SetupErrors) {
  Capture out("bad.out"), err("bad.err");
  LaunchOptions o = options({}, out, err);
  o.command = {"/nonexistent/colossal-worker"};
  auto missing = launch(o);
  EXPECT_TRUE(absl::IsInvalidArgument(missing.status())) << missing.status();
  EXPECT_TRUE(contains(std::string(missing.status().message()), "cannot run '/nonexistent/colossal-worker'"))
      << missing.status();
  o.command = {};
  EXPECT_TRUE(absl::IsInvalidArgument(launch(o).status()));
  o = options({"env"}, out, err);
  o.node_rank = 1;  // with nnodes 1
  EXPECT_TRUE(absl::IsInvalidArgument(launch(o).status()));
  o.node_rank = 0;
  o.master_port = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(launch(o).status()));
}

TEST(LaunchTest, WorkerEnvironment) {
  LaunchOptions o;
  o.nproc_per_node = 4;
  o.nnodes = 3;
  o.node_rank = 2;
  o.master_addr = "10.1.2.3";
  o.master_port = 1234;
  const auto env = worker_environment(o, 1);
  const std::vector<std::pair<std::string, std::string>> want = {
      {"RANK", "9"},         {"LOCAL_RANK", "1"},         {"WORLD_SIZE", "12"},
      {"LOCAL_WORLD_SIZE", "4"}, {"GROUP_RANK", "2"},     {"MASTER_ADDR", "10.1.2.3"},
      {"MASTER_PORT", "1234"}};
  EXPECT_EQ(env, want);
}

// The stand-alone binary: SIGINT to the launcher reaches every worker.
TEST(LaunchMainTest, ForwardsSigintToWorkers) {
  const std::string dir = tmp_path("signal_ready");
  mkdir(dir.c_str(), 0755);
  Capture out("main.out");
  const pid_t pid = spawn_launcher(
      {kLauncher, "--nproc_per_node", "2", "--grace_seconds", "5", "--", kWorker, "signal", dir}, out);
  ASSERT_NE(pid, 0);
  wait_ready(dir, 2);
  ASSERT_EQ(kill(pid, SIGINT), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT);
  const std::string text = out.read();
  EXPECT_TRUE(contains(text, "[rank 0] got signal 2")) << text;
  EXPECT_TRUE(contains(text, "[rank 1] got signal 2")) << text;
  EXPECT_TRUE(contains(text, "interrupted by SIGINT; forwarded to 2 worker(s)")) << text;
}

// SIGTERM (a preemption) to the launcher: the workers get time to save
// beyond the grace period (stop_timeout), and the launcher reports the
// interruption. Two signals: the workers stop at once, unsaved.
TEST(LaunchMainTest, WorkersSaveBeforeStoppingUnlessSignalledTwice) {
  for (const int signals : {1, 2}) {
    const std::string dir = tmp_path(absl::StrCat("saving_", signals));
    mkdir(dir.c_str(), 0755);
    Capture out(absl::StrCat("saving_", signals, ".out"));
    // The save (1.5 s) outlasts the grace period (1 s).
    const pid_t pid = spawn_launcher({kLauncher, "--nproc_per_node", "2", "--grace_seconds", "1", "--",
                                      kWorker, "saving", dir, "1500"},
                                     out);
    ASSERT_NE(pid, 0);
    wait_ready(dir, 2);
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    if (signals == 2) {
      absl::SleepFor(absl::Milliseconds(200));
      ASSERT_EQ(kill(pid, SIGTERM), 0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
    const std::string text = out.read();
    EXPECT_TRUE(contains(text, "interrupted by SIGTERM; forwarded to 2 worker(s)")) << text;
    for (int r = 0; r < 2; ++r) {
      const bool saved = access(absl::StrCat(dir, "/saved.", r).c_str(), F_OK) == 0;
      EXPECT_EQ(saved, signals == 1) << "rank " << r << " after " << signals << " signal(s)\n" << text;
    }
  }
}

TEST(LaunchMainTest, FailureExitCodeAndUnknownFlag) {
  Capture out("main_fail.out");
  auto run = [&](std::vector<std::string> args) {
    const pid_t pid = spawn_launcher(std::move(args), out);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(run({kLauncher, "--nproc_per_node=2", kWorker, "fail", "0", "5"}), 5);
  EXPECT_TRUE(contains(out.read(), "launch: worker rank 0")) << out.read();
  EXPECT_EQ(run({kLauncher, "--nproc_per_nod", "2", "--", kWorker, "env"}), 2);
  EXPECT_TRUE(contains(out.read(), "did you mean \"--nproc_per_node\"")) << out.read();
}

}  // namespace
}  // namespace colossal::comm
