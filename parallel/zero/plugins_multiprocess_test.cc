// Every data-parallel plugin across real processes, as in CI: for 1, 2 and 4
// ranks, ddp, ZeRO stage 1, stage 2 and stage 2 with cpu_offload, and gemini
// with placements cuda, cpu, static and auto (a capped stand-in device). This
// binary spawns itself as the ranks (posix_spawn of /proc/self/exe running
// only PluginChild.Run), the parent serves the TCP store on 127.0.0.1, the
// ranks talk over shared memory (comm/builtin's shm transport) and train the
// tiny GPT-2 of zero_test_util with AdamW for kSteps with 2 micro-batches per
// step (no_sync on the first for ddp and stage 1) and clipping; the parent
// checks their losses and weights against one process on the union of their
// data (relative difference <= kRelTol = 1e-5, fp32) and that all ranks end
// equal. Every plugin also trains the tiny Llama of ddp_test_util (untied
// head for ddp and ZeRO, tied for gemini) on 2 processes.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "comm/testing/multiprocess.h"
#include "parallel/ddp/ddp_plugin.h"
#include "parallel/ddp/ddp_test_util.h"
#include "parallel/gemini/gemini_test_util.h"
#include "parallel/zero/low_level_zero_plugin.h"
#include "parallel/zero/zero_test_util.h"

namespace colossal::parallel {
namespace {

using namespace ::colossal::parallel::testing;  // NOLINT: test helpers
using comm::testing::child_env;

std::string result_path(const std::string& dir, const std::string& kind, int world, int rank) {
  return absl::StrCat(dir, "/", kind, "_w", world, "_rank", rank, ".bin");
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

// The scenario of a case: the plugin's kind and the family's suffix.
std::string scenario(const std::string& kind, Family family) {
  return kind + family_suffix(family);
}

// One rank (only when spawned by the parent below; the scenario is the plugin
// and the family).
TEST(PluginChild, Run) {
  const std::optional<comm::testing::ChildRank> me = comm::testing::child_rank();
  if (!me.has_value()) GTEST_SKIP() << "runs only as a spawned rank";
  absl::string_view scenario_kind = me->scenario;
  Family family = Family::kGpt2;
  for (Family f : {Family::kLlama, Family::kLlamaTied}) {
    if (absl::ConsumeSuffix(&scenario_kind, family_suffix(f))) {
      family = f;
      break;
    }
  }
  const std::string kind(scenario_kind);
  auto pg = connect_builtin_group(me->port, me->rank, me->world, comm::TransportKind::kShm);
  ASSERT_TRUE(pg.ok()) << pg.status();
  EquivalenceRun run;
  if (absl::StartsWith(kind, "gemini_")) {  // gemini_<placement>
    RunSpec spec;
    spec.family = family;
    spec.options = small_chunks(kind.substr(7));
    if (kind == "gemini_auto") {  // some chunks offloaded
      spec.options.device_capacity_bytes = auto_capacity_bytes(family);
    }
    if (kind == "gemini_static") {  // half the chunks offloaded, half kept whole
      spec.options.offload_optim_frac = 0.5;
      spec.options.shard_param_frac = 0.5;
    }
    run = gemini_rank_run(*pg, spec).run;
  } else {
    std::unique_ptr<Plugin> plugin = make_plugin(*pg, kind);
    ASSERT_NE(plugin, nullptr);
    run = rank_run(*pg, std::move(plugin), /*use_no_sync=*/kind == "ddp" || kind == "zero1", family)
              .run;
  }
  ASSERT_EQ(run.loss.size(), size_t(kSteps));
  std::ofstream out(result_path(child_env("PLUGIN_TEST_DIR"), me->scenario, me->world, me->rank),
                    std::ios::binary);
  write_floats(out, run.loss);
  write_floats(out, run.weights);
  ASSERT_TRUE(out.good());
}

struct Case {
  std::string kind;
  int world;
  Family family = Family::kGpt2;
};

class PluginMultiprocess : public ::testing::TestWithParam<Case> {};

TEST_P(PluginMultiprocess, MatchesOneProcess) {
  if (comm::testing::child_rank().has_value()) GTEST_SKIP() << "the parent only";
  const std::string kind = scenario(GetParam().kind, GetParam().family);
  const int W = GetParam().world;
  std::string dir = child_env("TEST_TMPDIR");
  if (dir.empty()) dir = "/tmp";
  for (int r = 0; r < W; ++r) std::remove(result_path(dir, kind, W, r).c_str());
  comm::testing::run_rank_processes("PluginChild.Run", kind, W, {{"PLUGIN_TEST_DIR", dir}},
                                    absl::Seconds(90), kind);
  if (HasFailure()) return;

  const EquivalenceRun ref = adam_reference_run(W, GetParam().family);
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
      weights[0], ref.weights, key_bias_ranges(declare_zero_model(GetParam().family)->table()));
  EXPECT_LE(wd, kRelTol);
  EXPECT_LE(key_bias, 1e-3);
  for (int r = 1; r < W; ++r) EXPECT_EQ(weights[r], weights[0]) << "rank " << r;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* kind :
       {"ddp", "zero1", "zero2", "zero2_cpu_offload", "gemini_cuda", "gemini_cpu", "gemini_static",
        "gemini_auto"}) {
    for (int w : {1, 2, 4}) out.push_back({kind, w});
    out.push_back({kind, 2, absl::StartsWith(kind, "gemini_") ? Family::kLlamaTied : Family::kLlama});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(PluginsAndWorlds, PluginMultiprocess, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return absl::StrCat(scenario(info.param.kind, info.param.family),
                                               "_world", info.param.world);
                         });

}  // namespace
}  // namespace colossal::parallel
