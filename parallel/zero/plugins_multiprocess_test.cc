// Every data-parallel plugin across real processes, as in CI: for 1, 2 and 4
// ranks, ddp, ZeRO stage 1, stage 2 and stage 2 with cpu_offload. This
// binary spawns itself as the ranks (posix_spawn of /proc/self/exe running
// only PluginChild.Run), the parent serves the TCP store on 127.0.0.1, the
// ranks talk over shared memory (comm/builtin's shm transport) and train the
// tiny GPT-2 of zero_test_util with AdamW for kSteps with 2 micro-batches per
// step (no_sync on the first for ddp and stage 1) and clipping; the parent
// checks their losses and weights against one process on the union of their
// data (relative difference <= kRelTol = 1e-5, fp32) and that all ranks end
// equal.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "parallel/ddp/ddp_plugin.h"
#include "parallel/ddp/ddp_test_util.h"
#include "parallel/zero/low_level_zero_plugin.h"
#include "parallel/zero/zero_test_util.h"

extern char** environ;

namespace colossal::parallel {
namespace {

using namespace ::colossal::parallel::testing;  // NOLINT: test helpers

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// Starts this binary running only `filter`, with `extra` added to the
// environment (Bazel's per-test output variables removed).
pid_t spawn_self(const std::string& filter,
                 const std::vector<std::pair<std::string, std::string>>& extra) {
  static const char* kDropped[] = {"XML_OUTPUT_FILE=", "GTEST_OUTPUT=", "TEST_SHARD_INDEX=",
                                   "TEST_TOTAL_SHARDS=", "TEST_SHARD_STATUS_FILE=",
                                   "TEST_PREMATURE_EXIT_FILE=", "GTEST_SHARD_INDEX=",
                                   "GTEST_TOTAL_SHARDS=", "GTEST_SHARD_STATUS_FILE="};
  std::vector<std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    bool drop = false;
    for (const char* d : kDropped) drop = drop || absl::StartsWith(*e, d);
    if (!drop) vars.push_back(*e);
  }
  for (const auto& [k, v] : extra) vars.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string arg = "--gtest_filter=" + filter;
  char* argv[] = {exe.data(), arg.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, envp.data());
  if (rc != 0) {
    std::fprintf(stderr, "posix_spawn: %s\n", std::strerror(rc));
    std::abort();
  }
  return pid;
}

// The exit code of `pid`, or -1 (after SIGKILL) when it runs past `deadline`.
int wait_child(pid_t pid, absl::Time deadline) {
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  return -1;
}

std::string result_path(const std::string& dir, const std::string& kind, int world, int rank) {
  return absl::StrCat(dir, "/", kind, "_w", world, "_rank", rank, ".bin");
}

void write_floats(std::ofstream& out, const std::vector<float>& v) {
  const uint64_t n = v.size();
  out.write(reinterpret_cast<const char*>(&n), sizeof n);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(n * 4));
}

std::vector<float> read_floats(std::ifstream& in) {
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), sizeof n);
  if (!in || n > (uint64_t{1} << 24)) return {};
  std::vector<float> v(n);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 4));
  return in ? v : std::vector<float>{};
}

// The plugin named `kind`: "ddp", "zero1", "zero2" or "zero2_cpu_offload",
// all with several buckets.
std::unique_ptr<Plugin> make_plugin(std::shared_ptr<comm::ProcessGroup> pg,
                                    const std::string& kind) {
  if (kind == "ddp") {
    DdpOptions d;
    d.bucket_cap_mb = 0.001;
    auto p = DdpPlugin::create(pg, d);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }
  LowLevelZeroOptions o;
  o.stage = kind == "zero1" ? 1 : 2;
  o.cpu_offload = kind == "zero2_cpu_offload";
  o.reduce_bucket_size_in_m = 1.0 / 4096;  // 1 KiB
  auto p = LowLevelZeroPlugin::create(pg, o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

// One rank (only when spawned by the parent below).
TEST(PluginChild, Run) {
  if (env_or_empty("PLUGIN_TEST_RANK").empty()) GTEST_SKIP() << "runs only as a spawned rank";
  int rank = 0, world = 0, port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(env_or_empty("PLUGIN_TEST_RANK"), &rank));
  ASSERT_TRUE(absl::SimpleAtoi(env_or_empty("PLUGIN_TEST_WORLD"), &world));
  ASSERT_TRUE(absl::SimpleAtoi(env_or_empty("PLUGIN_TEST_PORT"), &port));
  const std::string kind = env_or_empty("PLUGIN_TEST_KIND");
  auto pg = connect_builtin_group(port, rank, world, comm::TransportKind::kShm);
  ASSERT_TRUE(pg.ok()) << pg.status();
  std::unique_ptr<Plugin> plugin = make_plugin(*pg, kind);
  ASSERT_NE(plugin, nullptr);
  ZeroRun run = rank_run(*pg, std::move(plugin), /*use_no_sync=*/kind == "ddp" || kind == "zero1");
  ASSERT_EQ(run.run.loss.size(), size_t(kSteps));
  std::ofstream out(result_path(env_or_empty("PLUGIN_TEST_DIR"), kind, world, rank),
                    std::ios::binary);
  write_floats(out, run.run.loss);
  write_floats(out, run.run.weights);
  ASSERT_TRUE(out.good());
}

struct Case {
  std::string kind;
  int world;
};

class PluginMultiprocess : public ::testing::TestWithParam<Case> {};

TEST_P(PluginMultiprocess, MatchesOneProcess) {
  if (!env_or_empty("PLUGIN_TEST_RANK").empty()) GTEST_SKIP() << "the parent only";
  const std::string kind = GetParam().kind;
  const int W = GetParam().world;
  std::string dir = env_or_empty("TEST_TMPDIR");
  if (dir.empty()) dir = "/tmp";
  auto master = serve_loopback_store();
  ASSERT_TRUE(master.ok()) << master.status();
  std::vector<pid_t> pids;
  for (int r = 0; r < W; ++r) {
    std::remove(result_path(dir, kind, W, r).c_str());
    pids.push_back(spawn_self("PluginChild.Run",
                              {{"PLUGIN_TEST_RANK", std::to_string(r)},
                               {"PLUGIN_TEST_WORLD", std::to_string(W)},
                               {"PLUGIN_TEST_PORT", std::to_string((*master)->port())},
                               {"PLUGIN_TEST_KIND", kind},
                               {"PLUGIN_TEST_DIR", dir}}));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  for (int r = 0; r < W; ++r) EXPECT_EQ(wait_child(pids[r], deadline), 0) << "rank " << r;
  if (HasFailure()) return;

  const EquivalenceRun ref = adam_reference_run(W);
  std::vector<std::vector<float>> loss(W), weights(W);
  for (int r = 0; r < W; ++r) {
    std::ifstream in(result_path(dir, kind, W, r), std::ios::binary);
    loss[r] = read_floats(in);
    weights[r] = read_floats(in);
    ASSERT_EQ(loss[r].size(), size_t(kSteps)) << "rank " << r;
    ASSERT_EQ(weights[r].size(), ref.weights.size()) << "rank " << r;
  }
  for (int step = 0; step < kSteps; ++step) {
    double mean = 0;
    for (int r = 0; r < W; ++r) mean += loss[r][step];
    mean /= W;
    EXPECT_LE(std::abs(mean - ref.loss[step]) / std::abs(double(ref.loss[step])), kRelTol)
        << "step " << step << ": " << mean << " vs " << ref.loss[step];
  }
  // c_attn's key bias is rounding noise on both sides (zero_test_util.h).
  const auto [wd, key_bias] = rel_diff_outside(
      weights[0], ref.weights, key_bias_ranges(make_zero_model(kSeed)->store().table()));
  EXPECT_LE(wd, kRelTol);
  EXPECT_LE(key_bias, 1e-3);
  for (int r = 1; r < W; ++r) EXPECT_EQ(weights[r], weights[0]) << "rank " << r;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* kind : {"ddp", "zero1", "zero2", "zero2_cpu_offload"}) {
    for (int w : {1, 2, 4}) out.push_back({kind, w});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(PluginsAndWorlds, PluginMultiprocess, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return absl::StrCat(info.param.kind, "_world", info.param.world);
                         });

}  // namespace
}  // namespace colossal::parallel
