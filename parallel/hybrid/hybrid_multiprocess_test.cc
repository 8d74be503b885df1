// hybrid_parallel across real processes, as in CI: the binary spawns itself
// as the ranks (comm/testing/multiprocess.h), which meet through a TCP store
// on 127.0.0.1 and talk over shared memory (comm/builtin's shm transport),
// train a hybrid case (hybrid_test_util.h) and write their losses, norms and
// whole weights; the parent checks them against one process on the union of
// the data-parallel ranks' data. Cases: tp2; tp2 x dp2 with ZeRO-1; pp2;
// tp2 x pp2 x dp2 with ZeRO-1 (eight processes); tp2 with sequence parallelism;
// pp2 with the interleaved schedule (two chunks per stage); all_to_all
// sequence parallelism (sp2 x dp2, ZeRO-1).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "comm/testing/multiprocess.h"
#include "parallel/ddp/ddp_test_util.h"
#include "parallel/hybrid/hybrid_test_util.h"

namespace colossal::parallel {
namespace {

using namespace ::colossal::parallel::testing;  // NOLINT: test helpers
using comm::testing::child_env;

std::string result_path(const std::string& dir, const std::string& name, int rank) {
  return absl::StrCat(dir, "/hybrid_", name, "_rank", rank, ".bin");
}

// One rank (only when spawned by the parent below; the scenario names the case).
TEST(HybridChild, Run) {
  const std::optional<comm::testing::ChildRank> me = comm::testing::child_rank();
  if (!me.has_value()) GTEST_SKIP() << "runs only as a spawned rank";
  absl::StatusOr<HybridCase> c = case_of(me->scenario);
  ASSERT_TRUE(c.ok()) << c.status();
  auto pg = connect_builtin_group(me->port, me->rank, me->world, comm::TransportKind::kShm);
  ASSERT_TRUE(pg.ok()) << pg.status();
  const RankRun run = hybrid_rank_run(*pg, *c, kHybridSteps);
  ASSERT_EQ(run.run.loss.size(), size_t(kHybridSteps));
  std::ofstream out(result_path(child_env("HYBRID_TEST_DIR"), me->scenario, me->rank),
                    std::ios::binary);
  write_floats(out, run.run.loss);
  write_floats(out, run.run.grad_norm);
  write_floats(out, run.run.weights);
  std::vector<float> clipped(run.run.clipped.begin(), run.run.clipped.end());
  write_floats(out, clipped);
  ASSERT_TRUE(out.good());
}

class HybridMultiprocess : public ::testing::TestWithParam<HybridCase> {};

TEST_P(HybridMultiprocess, MatchesOneProcess) {
  if (comm::testing::child_rank().has_value()) GTEST_SKIP() << "the parent only";
  const HybridCase& c = GetParam();
  const std::string name = case_name(c);
  std::string dir = child_env("TEST_TMPDIR");
  if (dir.empty()) dir = "/tmp";
  for (int r = 0; r < c.world; ++r) std::remove(result_path(dir, name, r).c_str());
  comm::testing::run_rank_processes("HybridChild.Run", name, c.world, {{"HYBRID_TEST_DIR", dir}},
                                    absl::Seconds(120), name);
  if (HasFailure()) return;
  std::vector<EquivalenceRun> runs(c.world);
  for (int r = 0; r < c.world; ++r) {
    std::ifstream in(result_path(dir, name, r), std::ios::binary);
    runs[r].loss = read_floats(in);
    runs[r].grad_norm = read_floats(in);
    runs[r].weights = read_floats(in);
    for (float f : read_floats(in)) runs[r].clipped.push_back(f != 0.0f);
  }
  expect_equal_to_reference(runs, one_process(c, c.world / (c.tp * c.pp * c.a2a), kHybridSteps));
}

INSTANTIATE_TEST_SUITE_P(Layouts, HybridMultiprocess,
                         ::testing::Values(HybridCase{Family::kGpt2, 2, 2, 0},
                                           HybridCase{Family::kLlama, 4, 2, 1},
                                           HybridCase{Family::kLlamaTied, 2, 1, 0, 2},
                                           HybridCase{Family::kGpt2, 8, 2, 1, 2},
                                           HybridCase{Family::kLlama, 2, 2, 0, 1, 2, 2, true},
                                           HybridCase{Family::kLlamaTied, 2, 1, 0, 2, 4, 2,
                                                      false, 2, 4},
                                           HybridCase{Family::kLlama, 4, 1, 1, 1, 2, 2, false, 1,
                                                      kMicro, 2},
                                           // tp2 x sp2 (all_to_all): every axis of the mesh but pp.
                                           HybridCase{Family::kGpt2, 4, 2, 1, 1, 2, 4, false, 1,
                                                      kMicro, 2}),
                         [](const ::testing::TestParamInfo<HybridCase>& info) {
                           return case_name(info.param);
                         });

}  // namespace
}  // namespace colossal::parallel
