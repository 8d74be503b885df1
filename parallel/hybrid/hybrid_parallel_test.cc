// hybrid_parallel equals one process: tensor parallelism (tp 2) alone and
// with data parallelism (dp 2) under ddp and ZeRO stages 1 and 2, for GPT-2
// and a tiny Llama (untied and tied head), ranks as threads over the builtin
// backend; a checkpoint taken at tp2 x dp2 continues in one process exactly
// as the uninterrupted run.
#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "nn/module/tensor_split.h"
#include "nn/train/train_step.h"
#include "parallel/booster/booster.h"
#include "parallel/booster/pipeline.h"
#include "parallel/ddp/ddp_test_util.h"
#include "parallel/hybrid/hybrid_parallel_plugin.h"

namespace colossal::parallel {
namespace {

using core::DType;
using core::Stream;
using testing::EquivalenceRun;
using testing::Family;
using testing::kMaxNorm;
using testing::kMicro;
using testing::kRelTol;
using testing::kSeed;

// Ten steps (more let AdamW magnify the float32 rounding of a different
// summation order, partial sums over tensor-parallel ranks, past kRelTol).
constexpr int kSteps = 10;
// Weights after kSteps of AdamW. Tensor parallelism sums in another order
// than one process (a row layer's partial outputs, a column layer's partial
// input gradients), so gradients differ by float32 rounding: at most 2·γ_n
// (n <= 24 terms here, γ_24 ≈ 1.4e-6) of the sum of the terms' magnitudes.
// AdamW divides each update by the root of the element's own squared-gradient
// average, so an element whose terms cancel passes that difference on at
// its terms' scale rather than the gradient's: up to lr = 1e-2 per step, 10
// steps, against weights of order 1. Losses and norms (no division) keep
// kRelTol; the weights get ten times it.
constexpr double kWeightTol = 10 * kRelTol;

struct HybridCase {
  Family family;
  int world;
  int tp;
  int zero_stage;
  int pp = 1;
  int layers = 2;  // the tiny models' (pp4 takes four)
  int heads = 2;   // GPT-2's n_head (tp4 takes four)
};

// The case's tiny model, declared: the shared test model, or one with more
// layers or heads.
std::unique_ptr<nn::CausalLM> declare_case_model(const HybridCase& c) {
  if (c.layers == 2 && c.heads == 2) return testing::declare_model(c.family);
  if (c.family == Family::kGpt2) {
    nn::GPT2Config g = testing::tiny_config();
    g.n_layer = c.layers;
    g.n_head = c.heads;
    g.n_embd = 4 * c.heads;
    return *nn::GPT2::declare(g, DType::kF32);
  }
  nn::LlamaConfig l = testing::tiny_llama_config(c.family == Family::kLlamaTied);
  l.num_hidden_layers = c.layers;
  return *nn::Llama::declare(l, DType::kF32);
}

std::string case_name(const HybridCase& c) {
  return absl::StrCat(testing::family_name(c.family), "_world", c.world, "_tp", c.tp, "_pp", c.pp,
                      "_zero", c.zero_stage, c.layers == 2 ? "" : absl::StrCat("_layers", c.layers));
}

// What one rank trains: the tiny model of `family` declared over the plugin's
// tp group, initialised from one seed on every rank, AdamW, `steps` steps of
// kMicro micro-batches of its data-parallel rank's data. `after_boost` may
// load a checkpoint (the first step taken is then `first_step`).
struct RankRun {
  EquivalenceRun run;
  nn::ParameterStore whole;        // the whole model after the last step
  nn::OptimizerStateDict optimizer;  // the whole optimizer state after the last step
};
RankRun hybrid_rank_run(std::shared_ptr<comm::ProcessGroup> world, const HybridCase& c,
                        int steps, int first_step = 0,
                        const std::function<void(Booster&, nn::Optimizer&)>& after_boost = {}) {
  RankRun out;
  auto ctx = std::move(*core::Context::create(core::Device::cpu()));
  HybridParallelOptions o;
  o.tp_size = c.tp;
  o.pp_size = c.pp;
  o.zero_stage = c.zero_stage;
  auto plugin = HybridParallelPlugin::create(world, o);
  EXPECT_TRUE(plugin.ok()) << plugin.status();
  if (!plugin.ok()) return out;
  auto declared = declare_case_model(c);
  auto split = (*plugin)->model_split(*declared);
  EXPECT_TRUE(split.ok()) << split.status();
  if (!split.ok()) return out;
  auto model = *declared->redeclare(DType::kF32, *split);
  Booster booster(std::move(*plugin));
  absl::Status st = booster.materialize(model->store(), kSeed, Stream::cpu());
  EXPECT_TRUE(st.ok()) << st;
  if (!st.ok()) return out;
  auto optimizer = testing::make_adam(*model);
  st = booster.boost(*model, model->store(), *optimizer);
  EXPECT_TRUE(st.ok()) << st;
  if (!st.ok()) return out;
  if (after_boost) after_boost(booster, *optimizer);
  const int data_rank = booster.plugin().dp_rank();
  for (int step = first_step; step < first_step + steps; ++step) {
    EXPECT_TRUE(booster.zero_grad().ok());
    double sum = 0;
    if (c.pp > 1) {
      std::vector<nn::MicroBatch> mbs;
      for (int i = 0; i < kMicro; ++i) mbs.push_back(testing::micro_batch(step, data_rank, i));
      auto r = execute_pipeline(*ctx, booster, *model, mbs);
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return out;
      sum = r->loss * kMicro;
    }
    for (int i = 0; i < kMicro && c.pp == 1; ++i) {
      std::optional<Booster::NoSync> no_sync;
      if (c.zero_stage < 2 && i + 1 < kMicro) no_sync.emplace(booster.no_sync());
      sum += testing::booster_micro_step(*ctx, booster, *model,
                                         testing::micro_batch(step, data_rank, i), 1.0f / kMicro);
    }
    auto r = booster.step({.max_norm = kMaxNorm});
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return out;
    out.run.loss.push_back(static_cast<float>(sum / kMicro));
    out.run.clipped.push_back(r->clip_coef < 1.0f);
    out.run.grad_norm.push_back(r->grad_norm);
  }
  auto whole = booster.model_state_dict(/*to_rank=*/-1, Stream::cpu());
  EXPECT_TRUE(whole.ok()) << whole.status();
  if (!whole.ok()) return out;
  out.whole = *whole;
  out.run.weights = testing::floats_of(whole->flat_values(DType::kF32));
  auto sd = booster.optimizer_state_dict(/*to_rank=*/-1);
  EXPECT_TRUE(sd.ok()) << sd.status();
  if (sd.ok()) out.optimizer = *std::move(sd);
  return out;
}

// Every rank's losses (averaged over data-parallel ranks), clipping, norms
// and whole weights against the one-process run over the same data.
void expect_equal_to_reference(const std::vector<RankRun>& runs, const EquivalenceRun& ref,
                               int dp) {
  const int world = static_cast<int>(runs.size());
  for (int r = 0; r < world; ++r) ASSERT_EQ(runs[r].run.loss.size(), ref.loss.size()) << "rank " << r;
  for (size_t step = 0; step < ref.loss.size(); ++step) {
    // tp ranks of one dp rank see the same data: average over dp ranks only.
    double mean = 0;
    for (int r = 0; r < world; ++r) mean += runs[r].run.loss[step];
    mean /= world;
    EXPECT_LE(std::abs(mean - ref.loss[step]) / std::abs(double(ref.loss[step])), kRelTol)
        << "step " << step << ": " << mean << " vs one process " << ref.loss[step];
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(runs[r].run.clipped[step], ref.clipped[step]) << "step " << step << " rank " << r;
      EXPECT_LE(std::abs(runs[r].run.grad_norm[step] - ref.grad_norm[step]),
                kRelTol * std::abs(ref.grad_norm[step]))
          << "step " << step << " rank " << r;
    }
  }
  for (int r = 0; r < world; ++r) {
    EXPECT_LE(testing::rel_diff(runs[r].run.weights, ref.weights), kWeightTol) << "rank " << r;
  }
  std::cout << "worst weight difference " << testing::rel_diff(runs[0].run.weights, ref.weights)
            << "\n";
  (void)dp;
}

class HybridEquivalence : public ::testing::TestWithParam<HybridCase> {};

TEST_P(HybridEquivalence, EqualsOneProcess) {
  const HybridCase& c = GetParam();
  const int dp = c.world / (c.tp * c.pp);
  auto ref_model = testing::materialized(declare_case_model(c), kSeed);
  auto ref_adam = testing::make_adam(*ref_model);
  const EquivalenceRun ref = testing::reference_run(*ref_model, *ref_adam, dp, kSteps);
  // The norm itself is compared on every step; clipping must act on some
  // (a tiny Llama's norm stays above kMaxNorm for the first ten steps).
  ASSERT_GT(std::count(ref.clipped.begin(), ref.clipped.end(), 1), 0) << "clipping never engaged";
  std::vector<RankRun> runs(c.world);
  testing::run_ranks(c.world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    runs[rank] = hybrid_rank_run(pg, c, kSteps);
  });
  expect_equal_to_reference(runs, ref, dp);
}

std::vector<HybridCase> cases() {
  std::vector<HybridCase> out;
  for (Family f : {Family::kGpt2, Family::kLlama, Family::kLlamaTied}) {
    out.push_back({f, 2, 2, 0});  // tp2
    out.push_back({f, 4, 2, 0});  // tp2 x dp2, ddp
    out.push_back({f, 4, 2, 1});  // tp2 x dp2, ZeRO-1
    out.push_back({f, 4, 2, 2});  // tp2 x dp2, ZeRO-2
    out.push_back({f, 2, 1, 0, 2});  // pp2, 1F1B
    out.push_back({f, 4, 2, 1, 2});  // tp2 x pp2, ZeRO-1 (dp 1)
    out.push_back({f, 8, 2, 1, 2});  // tp2 x pp2 x dp2, ZeRO-1
    out.push_back({f, 4, 1, 0, 4, 4});  // pp4 over four layers, 1F1B
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, HybridEquivalence, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<HybridCase>& info) {
                           return case_name(info.param);
                         });

// The uninterrupted one-process run of `c`'s model over `dp` data ranks.
EquivalenceRun one_process(const HybridCase& c, int dp, int steps) {
  auto model = testing::materialized(declare_case_model(c), kSeed);
  auto adam = testing::make_adam(*model);
  return testing::reference_run(*model, *adam, dp, steps);
}

// A checkpoint of tp2 x pp2 x dp2 (ZeRO-1) after 5 steps (the whole model
// and optimizer state, gathered over tp and pp) loaded into one process
// (nn::Adam) continues as the uninterrupted one-process run.
TEST(Hybrid, CheckpointOfTp2Pp2Dp2LoadsIntoOneProcessAndContinues) {
  const HybridCase c{Family::kGpt2, 8, 2, 1, 2, 2, 4};
  std::vector<RankRun> runs(8);
  testing::run_ranks(8, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    runs[rank] = hybrid_rank_run(pg, c, /*steps=*/5);
  });
  ASSERT_TRUE(runs[0].whole.materialized());
  ASSERT_FALSE(runs[0].optimizer.tensors.empty());
  auto model = testing::materialized(declare_case_model(c), /*seed=*/1);
  auto adam = testing::make_adam(*model);
  ASSERT_TRUE(model->store().flat_values(DType::kF32).copy_from(
      runs[0].whole.flat_values(DType::kF32), Stream::cpu()).ok());
  const absl::Status loaded = adam->load_state_dict(runs[0].optimizer);
  ASSERT_TRUE(loaded.ok()) << loaded;
  EquivalenceRun resumed;
  auto ctx = std::move(*core::Context::create(core::Device::cpu()));
  for (int step = 5; step < 10; ++step) {
    std::vector<nn::MicroBatch> mbs;
    for (int d = 0; d < 2; ++d) {
      for (int i = 0; i < kMicro; ++i) mbs.push_back(testing::micro_batch(step, d, i));
    }
    auto r = nn::train_step(*ctx, *model, *adam, model->vocab_size(), mbs, {.max_norm = kMaxNorm});
    ASSERT_TRUE(r.ok()) << r.status();
    resumed.loss.push_back(r->loss);
  }
  const EquivalenceRun ref = one_process(c, 2, 10);
  for (int i = 0; i < 5; ++i) {
    EXPECT_LE(std::abs(resumed.loss[i] - ref.loss[5 + i]) / std::abs(ref.loss[5 + i]), kRelTol)
        << "step " << 5 + i;
  }
  EXPECT_LE(testing::rel_diff(testing::floats_of(model->store().flat_values(DType::kF32)),
                              ref.weights),
            kWeightTol);
}

// ... and loaded into tp4 x dp2 through the plugin, it continues the same way.
TEST(Hybrid, CheckpointOfTp2Pp2Dp2LoadsIntoTp4) {
  const HybridCase first{Family::kGpt2, 8, 2, 1, 2, 2, 4};
  const HybridCase then{Family::kGpt2, 8, 4, 1, 1, 2, 4};
  std::vector<RankRun> saved(8), cont(8);
  testing::run_ranks(8, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    saved[rank] = hybrid_rank_run(pg, first, /*steps=*/5);
  });
  ASSERT_TRUE(saved[0].whole.materialized());
  testing::run_ranks(8, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    cont[rank] = hybrid_rank_run(pg, then, /*steps=*/5, /*first_step=*/5,
                                 [&](Booster& booster, nn::Optimizer& optimizer) {
                                   ASSERT_TRUE(booster.load_model_state_dict(saved[0].whole,
                                                                             Stream::cpu()).ok());
                                   const absl::Status st =
                                       booster.load_optimizer_state_dict(saved[0].optimizer);
                                   ASSERT_TRUE(st.ok()) << st;
                                 });
  });
  const EquivalenceRun ref = one_process(first, 2, 10);
  EquivalenceRun tail = ref;
  tail.loss.assign(ref.loss.begin() + 5, ref.loss.end());
  tail.clipped.assign(ref.clipped.begin() + 5, ref.clipped.end());
  tail.grad_norm.assign(ref.grad_norm.begin() + 5, ref.grad_norm.end());
  expect_equal_to_reference(cont, tail, 2);
}

TEST(Hybrid, RefusesWhatIsNotBuilt) {
  testing::run_ranks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    HybridParallelOptions o;
    o.pp_size = 2;
    o.zero_stage = 2;
    auto p = HybridParallelPlugin::create(pg, o);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
    o.pp_size = 1;
    o.zero_stage = 0;
    o.tp_size = 3;
    p = HybridParallelPlugin::create(pg, o);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
    // A model not declared over the tp group is refused at materialize.
    o.tp_size = 2;
    p = HybridParallelPlugin::create(pg, o);
    ASSERT_TRUE(p.ok()) << p.status();
    auto model = testing::declare_model(Family::kGpt2);
    Booster booster(std::move(*p));
    const absl::Status st = booster.materialize(model->store(), kSeed, Stream::cpu());
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  });
}

}  // namespace
}  // namespace colossal::parallel
