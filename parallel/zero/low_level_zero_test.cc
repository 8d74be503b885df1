// The low_level_zero plugin (ZeRO stages 1 and 2) through the Booster, CPU,
// builtin backend, ranks as threads over the in-process transport:
//   * equivalence: for stage 1 and 2, W ranks (W = 1, 2, 3, 4), each training
//     a tiny GPT-2 with AdamW (weight decay 0.1 on matrices, none on
//     biases/norms: nn::split_decay_groups) for 20 steps on its own rows, 2
//     micro-batches per step (stage 1: the first under no_sync; stage 2: both
//     reduced, shards accumulating), clipping by global norm on (and active
//     on some steps), give the losses, norms and weights of one process
//     accumulating the union of the ranks' rows (nn::train_step with
//     nn::Adam); fp32, relative difference <= 1e-5; for one and several
//     buckets; and match ddp + nn::Adam; the same for a tiny Llama with an
//     untied and a tied head at 2 and 4 ranks;
//   * the slices: padding (W = 3, 4 do not divide the flat buffer), slice
//     boundaries inside parameters, the masters of all ranks concatenated are
//     the final weights, ranks end bitwise equal;
//   * zero_shard / shard_pieces on a hand-made table with odd sizes and the
//     table's alignment gaps;
//   * stage 2: no_sync refused, shards accumulate over backwards, zero_grad
//     clears them;
//   * overlap_allgather (the default) bitwise the step's all_gather, and the
//     model's state dict current right after an overlapped step;
//   * errors: bad options, SGD optimizer, loss scaler, boosting twice, step
//     after an unsynced backward.
#include "parallel/zero/low_level_zero_plugin.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/context/context.h"
#include "core/status/status.h"
#include "nn/amp/loss_scaler.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/optim/adam.h"
#include "nn/optim/module_params.h"
#include "nn/optim/param.h"
#include "nn/train/train_step.h"
#include "parallel/booster/booster.h"
#include "parallel/ddp/ddp_plugin.h"
#include "parallel/ddp/ddp_test_util.h"
#include "parallel/zero/zero_grad_reduction.h"
#include "parallel/zero/zero_test_util.h"

namespace colossal::parallel {
namespace {

using core::DType;
using core::Stream;
using core::Tensor;
using namespace ::colossal::parallel::testing;  // NOLINT: test helpers

ZeroRun ddp_adam_rank_run(std::shared_ptr<comm::ProcessGroup> pg,
                          const LowLevelZeroOptions& options, Family family) {
  DdpOptions d;
  d.bucket_cap_mb = options.reduce_bucket_size_in_m * 4.0;
  auto plugin = DdpPlugin::create(pg, d);
  EXPECT_TRUE(plugin.ok()) << plugin.status();
  if (!plugin.ok()) return {};
  return rank_run(std::move(pg), std::move(*plugin), /*use_no_sync=*/true, family);
}

struct EquivalenceCase {
  int stage;
  int world;
  double reduce_bucket_size_in_m;
  bool cpu_offload = false;  // on the CPU path the shards are host memory already
  Family family = Family::kGpt2;
};

class ZeroEquivalence : public ::testing::TestWithParam<EquivalenceCase> {};

TEST_P(ZeroEquivalence, MatchesOneProcessOnTheUnion) {
  const int W = GetParam().world;
  const int stage = GetParam().stage;
  const Family family = GetParam().family;
  const EquivalenceRun ref = adam_reference_run(W, family);
  ASSERT_EQ(ref.loss.size(), static_cast<size_t>(kSteps));
  LowLevelZeroOptions o;
  o.reduce_bucket_size_in_m = GetParam().reduce_bucket_size_in_m;
  o.stage = stage;
  o.cpu_offload = GetParam().cpu_offload;
  const std::vector<ZeroRun> runs = zero_runs(W, o, family);
  for (int r = 0; r < W; ++r) ASSERT_EQ(runs[r].run.loss.size(), static_cast<size_t>(kSteps));

  int clipped = 0;
  double worst = 0;
  for (int s = 0; s < kSteps; ++s) {
    double mean = 0;
    for (int r = 0; r < W; ++r) mean += runs[r].run.loss[s];
    mean /= W;
    const double d = std::abs(mean - ref.loss[s]) / std::abs(ref.loss[s]);
    worst = std::max(worst, d);
    EXPECT_LE(d, kRelTol) << "step " << s << ": " << mean << " vs " << ref.loss[s];
    for (int r = 0; r < W; ++r) {
      EXPECT_LE(std::abs(runs[r].run.grad_norm[s] - ref.grad_norm[s]) / ref.grad_norm[s], kRelTol)
          << "step " << s << " rank " << r;
      EXPECT_EQ(runs[r].run.clipped[s], ref.clipped[s]) << "step " << s;
    }
    clipped += ref.clipped[s];
  }
  EXPECT_GT(clipped, 0) << "clipping never triggered: the test would not cover it";
  EXPECT_LT(clipped, kSteps) << "clipping always triggered";
  // Weights: every element but c_attn's key bias (see rank_run) within
  // kRelTol; the key bias stays near 0 (its initial value) on both sides.
  const auto [wd, key_bias] = rel_diff_outside(runs[0].run.weights, ref.weights, runs[0].key_bias);
  EXPECT_LE(wd, kRelTol);
  EXPECT_LE(key_bias, 1e-3);
  // Stage 1 reduces gradients exactly as ddp does; against ddp + nn::Adam
  // with the same buckets only the global norm's order of summation differs
  // (per-slice sums of squares in double vs nn::grad_norm's kernel). Stage 2
  // also sums the micro-batches' averages instead of averaging their sum.
  const double vs_ddp_tol = stage == 1 ? 1e-6 : kRelTol;
  std::vector<ZeroRun> ddp(W);
  run_ranks(W, [&](int r, std::shared_ptr<comm::ProcessGroup> pg) {
    ddp[r] = ddp_adam_rank_run(std::move(pg), o, family);
  });
  ASSERT_EQ(ddp[0].run.loss.size(), static_cast<size_t>(kSteps));
  const double vs_ddp = rel_diff_outside(runs[0].run.weights, ddp[0].run.weights,
                                         runs[0].key_bias).first;
  EXPECT_LE(vs_ddp, vs_ddp_tol);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_LE(std::abs(ddp[0].run.loss[s] - runs[0].run.loss[s]) / std::abs(ddp[0].run.loss[s]),
              vs_ddp_tol)
        << "step " << s;
  }
  for (int r = 1; r < W; ++r) {
    EXPECT_EQ(runs[r].run.weights, runs[0].run.weights) << "rank " << r << " diverged";
  }
  // The masters of all ranks, in rank order, are the final weights.
  std::vector<float> cat;
  for (int r = 0; r < W; ++r) {
    EXPECT_EQ(runs[r].shard.begin, std::min<int64_t>(r * runs[r].shard.size, runs[r].numel));
    cat.insert(cat.end(), runs[r].master.begin(), runs[r].master.end());
  }
  EXPECT_EQ(cat, runs[0].run.weights);
  // Reductions: every bucket of every backward, most from the hooks.
  const int64_t backwards = int64_t{kSteps} * (stage == 1 ? 1 : kMicro);
  EXPECT_EQ(runs[0].issued, backwards * ddp[0].run.buckets);
  EXPECT_GT(runs[0].issued_in_hooks, 0);
  std::cout << family_name(family) << ", stage " << stage << ", world " << W << ", reduce_bucket_size_in_m "
            << GetParam().reduce_bucket_size_in_m
            << ": worst loss rel diff " << worst << ", weights " << wd << " (key bias max "
            << key_bias << "), vs ddp " << vs_ddp << ", clipped " << clipped
            << "/" << kSteps << ", numel " << runs[0].numel << ", slice " << runs[0].shard.size
            << ", padding " << runs[0].shard.padded - runs[0].numel << "\n";
}

std::vector<EquivalenceCase> equivalence_cases() {
  std::vector<EquivalenceCase> out;
  for (int stage : {1, 2}) {
    out.push_back({stage, 1, 12.0});
    for (int w : {2, 3, 4}) {
      out.push_back({stage, w, 12.0});        // one bucket
      out.push_back({stage, w, 1.0 / 4096});  // 1 KiB: several buckets
    }
  }
  for (int w : {1, 2, 4}) out.push_back({2, w, 1.0 / 4096, /*cpu_offload=*/true});
  for (int stage : {1, 2}) {
    out.push_back({stage, 2, 12.0, false, Family::kLlama});
    out.push_back({stage, 4, 1.0 / 4096, false, Family::kLlama});
    out.push_back({stage, 2, 1.0 / 4096, false, Family::kLlamaTied});
  }
  out.push_back({2, 2, 1.0 / 4096, /*cpu_offload=*/true, Family::kLlamaTied});
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    StagesAndWorlds, ZeroEquivalence, ::testing::ValuesIn(equivalence_cases()),
    [](const ::testing::TestParamInfo<EquivalenceCase>& info) {
      return absl::StrCat("stage", info.param.stage, "_world", info.param.world,
                          info.param.reduce_bucket_size_in_m < 1 ? "_small_buckets"
                                                                 : "_one_bucket",
                          info.param.cpu_offload ? "_cpu_offload" : "",
                          family_suffix(info.param.family));
    });

// overlap_allgather (the default, which the cases above run) against the
// weights gathered in the step: the same bytes reach every rank, so losses,
// norms and weights are bitwise equal; rounds are issued only with it, and
// only at world size > 1 (small buckets: several rounds a step;
// the tied head reads the embedding's pieces again at the end of the forward).
TEST(LowLevelZero, OverlappedGatherIsBitwiseTheStepsGather) {
  for (const auto& [stage, world, family] :
       std::vector<std::tuple<int, int, Family>>{{1, 2, Family::kGpt2}, {2, 3, Family::kGpt2},
                                                 {2, 2, Family::kLlamaTied}, {2, 1, Family::kGpt2}}) {
    LowLevelZeroOptions o;
    o.stage = stage;
    o.reduce_bucket_size_in_m = 1.0 / 4096;
    const std::vector<ZeroRun> overlapped = zero_runs(world, o, family);
    o.overlap_allgather = false;
    const std::vector<ZeroRun> at_step = zero_runs(world, o, family);
    const std::string what = absl::StrCat("stage ", stage, " world ", world, family_suffix(family));
    for (int r = 0; r < world; ++r) {
      ASSERT_EQ(overlapped[r].run.loss.size(), static_cast<size_t>(kSteps)) << what;
      EXPECT_EQ(overlapped[r].run.loss, at_step[r].run.loss) << what << " rank " << r;
      EXPECT_EQ(overlapped[r].run.grad_norm, at_step[r].run.grad_norm) << what << " rank " << r;
      EXPECT_EQ(overlapped[r].run.weights, at_step[r].run.weights) << what << " rank " << r;
      EXPECT_EQ(at_step[r].gathers, 0) << what;
      if (world > 1) {
        EXPECT_GE(overlapped[r].gathers, int64_t{kSteps} * 2) << what;  // rounds a step
      } else {
        EXPECT_EQ(overlapped[r].gathers, 0) << what;
      }
    }
  }
}

// One rank's tiny GPT-2 (seed `seed`) boosted with stage 2 and 1 KiB buckets
// (several, some across slices) on the CPU: what the stage-2 tests below
// start from.
struct Stage2Rank {
  std::unique_ptr<core::Context> ctx;
  std::unique_ptr<nn::GPT2> model;
  std::unique_ptr<nn::Adam> adam;
  LowLevelZeroPlugin* zero = nullptr;  // owned by the booster
  std::unique_ptr<Booster> booster;
};

void boost_stage2(std::shared_ptr<comm::ProcessGroup> pg, uint64_t seed, Stage2Rank* out) {
  out->ctx = std::move(*core::Context::create(core::Device::cpu()));
  out->model = make_zero_model(seed);
  out->adam = make_adam(*out->model);
  LowLevelZeroOptions o;
  o.stage = 2;
  o.reduce_bucket_size_in_m = 1.0 / 4096;
  auto plugin = LowLevelZeroPlugin::create(std::move(pg), o);
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  out->zero = plugin->get();
  out->booster = std::make_unique<Booster>(std::move(*plugin));
  ASSERT_TRUE(out->booster->boost(*out->model, out->model->store(), *out->adam).ok());
}

// After an overlapped step the weights' pieces may still be in flight: the
// model's state dict (what a checkpoint saves) waits for them itself, and
// equals the weights sync_weights() then shows, on every rank.
TEST(LowLevelZero, StateDictAfterAnOverlappedStepIsCurrent) {
  run_ranks(2, [&](int r, std::shared_ptr<comm::ProcessGroup> pg) {
    Stage2Rank run;
    ASSERT_NO_FATAL_FAILURE(boost_stage2(std::move(pg), kSeed + r, &run));
    for (int step = 0; step < 2; ++step) {
      ASSERT_TRUE(run.booster->zero_grad().ok());
      booster_micro_step(*run.ctx, *run.booster, *run.model, micro_batch(step, r, 0), 1.0f);
      ASSERT_TRUE(run.booster->step({.max_norm = kMaxNorm}).ok());
    }
    EXPECT_GT(run.zero->gathers_issued(), 2);
    absl::StatusOr<nn::ParameterStore> sd = run.booster->model_state_dict(-1, Stream::cpu());
    ASSERT_TRUE(sd.ok()) << sd.status();
    ASSERT_TRUE(run.booster->sync_weights().ok());
    EXPECT_EQ(floats_of(sd->flat_values(DType::kF32)),
              floats_of(run.model->store().flat_values(DType::kF32)))
        << "rank " << r;
  });
}

// The tiny GPT-2 exercises what the equivalence needs: padding and slice
// boundaries inside parameters.
TEST(ZeroShards, TinyGpt2SlicesArePaddedAndCutParameters) {
  auto model = make_zero_model(kSeed);
  const nn::ParameterTable& table = model->store().table();
  const int64_t numel = table.buffer_numel(DType::kF32);
  for (int W : {3, 4}) {
    EXPECT_NE(numel % W, 0) << "world " << W << " divides " << numel << ": no padding tested";
  }
  for (int W : {2, 3, 4}) {
    int inside = 0;
    for (int r = 1; r < W; ++r) {
      const int64_t b = zero_shard(numel, W, r).begin;
      for (const nn::ParameterEntry& e : table.entries()) {
        if (e.offset < b && b < e.offset + e.numel()) ++inside;
      }
    }
    EXPECT_GT(inside, 0) << "world " << W << ": every slice boundary is a parameter boundary";
  }
}

TEST(ZeroShards, ZeroShardPadsToAMultipleOfTheWorld) {
  const int64_t n = 10;
  for (int W : {1, 2, 3, 4, 7, 11, 16}) {
    int64_t covered = 0;
    for (int r = 0; r < W; ++r) {
      const ZeroShard s = zero_shard(n, W, r);
      EXPECT_EQ(s.padded % W, 0);
      EXPECT_GE(s.padded, n);
      EXPECT_LT(s.padded - n, W);
      EXPECT_EQ(s.size * W, s.padded);
      EXPECT_EQ(s.begin, covered);
      EXPECT_LE(s.end - s.begin, s.size);
      covered = s.end;
    }
    EXPECT_EQ(covered, n) << "world " << W;
  }
}

TEST(ZeroShards, PiecesFollowParametersAndGroups) {
  // Three parameters of 5, 3 and 7 elements: offsets rounded to 4 (16 bytes).
  nn::ParameterTable table;
  ASSERT_TRUE(table.add("a", core::Shape({5}), DType::kF32).ok());
  ASSERT_TRUE(table.add("b", core::Shape({3}), DType::kF32).ok());
  ASSERT_TRUE(table.add("c", core::Shape({7}), DType::kF32).ok());
  auto store = *nn::ParameterStore::create(table, Stream::cpu());
  std::vector<nn::ParamRef> params = *nn::optimizer_params(store.parameters(), Stream::cpu());
  // a, c in group 0; b in group 1.
  std::vector<nn::ParamGroup> groups(2);
  groups[0].params = {params[0], params[2]};
  groups[1].params = {params[1]};
  auto adam = *nn::make_adamw(std::move(groups));
  const int64_t numel = table.buffer_numel(DType::kF32);
  const int64_t oa = table.find("a")->offset, ob = table.find("b")->offset,
                oc = table.find("c")->offset;
  ASSERT_EQ(oa, 0);
  ASSERT_GT(ob, 5);  // an alignment gap after a
  for (int W : {1, 2, 3, 5}) {
    int64_t total = 0;
    for (int r = 0; r < W; ++r) {
      const ZeroShard s = zero_shard(numel, W, r);
      auto pieces = shard_pieces(table, *adam, s);
      ASSERT_TRUE(pieces.ok()) << pieces.status();
      int64_t prev_end = s.begin;
      for (const ShardPiece& p : *pieces) {
        EXPECT_GE(p.offset, prev_end);
        EXPECT_LE(p.offset + p.count, s.end);
        prev_end = p.offset + p.count;
        total += p.count;
        const int expect_group = (p.offset >= ob && p.offset < ob + 3) ? 1 : 0;
        EXPECT_EQ(p.group, expect_group) << "offset " << p.offset;
        const bool in_a = p.offset >= oa && p.offset + p.count <= oa + 5;
        const bool in_b = p.offset >= ob && p.offset + p.count <= ob + 3;
        const bool in_c = p.offset >= oc && p.offset + p.count <= oc + 7;
        EXPECT_TRUE(in_a || in_b || in_c) << "piece at " << p.offset << " crosses parameters";
      }
    }
    EXPECT_EQ(total, 5 + 3 + 7) << "world " << W << ": pieces skip or repeat elements";
  }
}

TEST(LowLevelZero, Errors) {
  EXPECT_EQ(LowLevelZeroPlugin::create(nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  run_ranks(1, [](int, std::shared_ptr<comm::ProcessGroup> pg) {
    LowLevelZeroOptions bad;
    bad.reduce_bucket_size_in_m = 0;
    EXPECT_EQ(LowLevelZeroPlugin::create(pg, bad).status().code(),
              absl::StatusCode::kInvalidArgument);
    bad.reduce_bucket_size_in_m = NAN;
    EXPECT_EQ(LowLevelZeroPlugin::create(pg, bad).status().code(),
              absl::StatusCode::kInvalidArgument);

    auto ctx = std::move(*core::Context::create(core::Device::cpu()));
    // SGD: not Adam-family.
    {
      auto model = make_zero_model(kSeed);
      auto sgd = make_sgd(*model);
      Booster booster(*LowLevelZeroPlugin::create(pg));
      const absl::Status s = booster.boost(*model, model->store(), *sgd);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_NE(s.message().find("Adam"), std::string::npos) << s;
    }
    auto model = make_zero_model(kSeed);
    auto adam = make_adam(*model);
    Booster booster(*LowLevelZeroPlugin::create(pg));
    EXPECT_FALSE(booster.step().ok());  // before boost
    ASSERT_TRUE(booster.boost(*model, model->store(), *adam).ok());
    EXPECT_EQ(booster.boost(*model, model->store(), *adam).code(),
              absl::StatusCode::kFailedPrecondition);
    // A step after an unsynced backward.
    {
      auto no_sync = booster.no_sync();
      booster_micro_step(*ctx, booster, *model, micro_batch(0, 0, 0), 1.0f);
    }
    EXPECT_EQ(booster.step().status().code(), absl::StatusCode::kFailedPrecondition);
    booster_micro_step(*ctx, booster, *model, micro_batch(0, 0, 1), 1.0f);
    // A loss scaler (fp32 only).
    auto scaler = *nn::DynamicLossScaler::create();
    EXPECT_EQ(booster.step({.scaler = &scaler}).status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(booster.step({.max_norm = -1.0f}).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(booster.step({.max_norm = 1.0f}).ok());
  });
}

TEST(LowLevelZero, Stage2RefusesNoSyncAndAccumulatesShards) {
  run_ranks(1, [](int, std::shared_ptr<comm::ProcessGroup> pg) {
    LowLevelZeroOptions bad;
    bad.stage = 3;
    EXPECT_EQ(LowLevelZeroPlugin::create(pg, bad).status().code(),
              absl::StatusCode::kInvalidArgument);
    Stage2Rank run;
    ASSERT_NO_FATAL_FAILURE(boost_stage2(pg, kSeed, &run));
    ASSERT_TRUE(run.booster->zero_grad().ok());
    {
      auto no_sync = run.booster->no_sync();
      auto out = run.model->forward(*run.ctx, micro_batch(0, 0, 0).tokens);
      ASSERT_TRUE(out.ok());
      Tensor dy = *Tensor::empty(out->output.shape(), DType::kF32, Stream::cpu());
      ASSERT_TRUE(dy.set_zero(Stream::cpu()).ok());
      const absl::Status s = run.booster->backward(*run.ctx, *run.model, *out->saved, dy).status();
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
      EXPECT_NE(s.message().find("no_sync"), std::string::npos) << s;
    }
    // Partitioned gradients: no flat gradient buffer, and between backwards
    // no parameter has a gradient (a layer asking for one is told why).
    const nn::ParameterStore& store = run.model->store();
    EXPECT_FALSE(store.flat_grads(DType::kF32).defined());
    EXPECT_TRUE(store.materialized());
    const auto no_gradients = [&store] {
      for (const nn::Parameter& p : store.parameters()) EXPECT_FALSE(p.grad.defined()) << p.name;
      absl::StatusOr<core::Tensor> g = store.handle("transformer.h.0.mlp.c_fc.weight")->grad();
      EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_NE(g.status().message().find("\"transformer.h.0.mlp.c_fc.weight\" has a whole "
                                          "gradient only during a backward"),
                std::string::npos)
          << g.status();
    };
    no_gradients();
    // Two backwards: the shard holds the sum.
    booster_micro_step(*run.ctx, *run.booster, *run.model, micro_batch(0, 0, 0), 1.0f);
    ASSERT_TRUE(run.booster->plugin().before_step(Stream::cpu()).ok());
    no_gradients();
    const std::vector<float> one = floats_of(run.zero->grad_shard_tensor());
    booster_micro_step(*run.ctx, *run.booster, *run.model, micro_batch(0, 0, 0), 1.0f);
    ASSERT_TRUE(run.booster->plugin().before_step(Stream::cpu()).ok());
    const std::vector<float> two = floats_of(run.zero->grad_shard_tensor());
    ASSERT_EQ(two.size(), one.size());
    double nonzero = 0;
    for (size_t i = 0; i < one.size(); ++i) {
      EXPECT_EQ(two[i], 2.0f * one[i]) << i;  // x + x == 2x exactly
      nonzero += one[i] != 0.0f;
    }
    EXPECT_GT(nonzero, 0);
    // Many buckets, few in flight at once: the rest were added to the shard
    // while the backward went on.
    EXPECT_GE(run.zero->reductions_issued(), 10);  // two backwards
    EXPECT_EQ(run.zero->reductions_most_in_flight(), 4);
    ASSERT_TRUE(run.booster->zero_grad().ok());
    const std::vector<float> zeroed = floats_of(run.zero->grad_shard_tensor());
    EXPECT_TRUE(std::all_of(zeroed.begin(), zeroed.end(), [](float x) { return x == 0.0f; }));
  });
}

// Stage 2 with one backward a step against two backwards a step of the same
// batch at half the loss scale: each adds its parts to the gradient shard;
// halving is exact and so is x/2 + x/2, so both runs step on the same
// gradients and end bit for bit equal (world 3 pads the last slice; small
// buckets put some across slices).
TEST(LowLevelZero, Stage2AccumulatesMicroBatchesInTheShardExactly) {
  constexpr int W = 3;
  std::vector<float> weights[2];  // by backwards a step - 1
  std::vector<float> norms[2];
  for (int backwards : {1, 2}) {
    run_ranks(W, [&](int r, std::shared_ptr<comm::ProcessGroup> pg) {
      Stage2Rank run;
      ASSERT_NO_FATAL_FAILURE(boost_stage2(std::move(pg), kSeed + r, &run));
      for (int step = 0; step < 3; ++step) {
        ASSERT_TRUE(run.booster->zero_grad().ok());
        for (int b = 0; b < backwards; ++b) {
          booster_micro_step(*run.ctx, *run.booster, *run.model, micro_batch(step, r, 0),
                             1.0f / backwards);
        }
        ASSERT_TRUE(run.booster->plugin().before_step(Stream::cpu()).ok());
        const ZeroShard sh = run.zero->shard();
        const std::vector<float> mine = floats_of(run.zero->grad_shard_tensor());
        EXPECT_EQ(static_cast<int64_t>(mine.size()), sh.size);
        EXPECT_TRUE(std::any_of(mine.begin(), mine.end(), [](float x) { return x != 0.0f; }));
        // The padding past the slice's end stays zero.
        EXPECT_TRUE(std::all_of(mine.begin() + (sh.end - sh.begin), mine.end(),
                                [](float x) { return x == 0.0f; }));
        auto result = run.booster->step({.max_norm = kMaxNorm});
        ASSERT_TRUE(result.ok()) << result.status();
        if (r == 0) norms[backwards - 1].push_back(result->grad_norm);
      }
      ASSERT_TRUE(run.booster->sync_weights().ok());
      if (r == 0) weights[backwards - 1] = floats_of(run.model->store().flat_values(DType::kF32));
    });
  }
  ASSERT_EQ(norms[0].size(), 3u);
  EXPECT_EQ(norms[1], norms[0]);
  ASSERT_FALSE(weights[0].empty());
  EXPECT_EQ(weights[1], weights[0]);
}

// The plugin materializes the model (stage 2: without a gradient buffer)
// and steps a declared optimizer (no float32 masters, which boost would
// drop; the plugin zeroes the flat gradient buffer itself): the same
// training, bit for bit, as a model created whole with an optimizer of
// tensors (world 3 pads; GPT-2 ties its head, Llama does not; world 1 keeps
// stage 2's flat buffer on CUDA only).
TEST(LowLevelZero, MaterializedByThePluginWithADeclaredOptimizerTrainsTheSame) {
  for (const auto& [stage, W, family] :
       {std::tuple{2, 3, Family::kGpt2}, std::tuple{2, 3, Family::kLlama},
        std::tuple{1, 3, Family::kGpt2}, std::tuple{1, 1, Family::kLlama},
        std::tuple{2, 1, Family::kGpt2}}) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage << ", world " << W);
    LowLevelZeroOptions o;
    o.stage = stage;
    o.reduce_bucket_size_in_m = 1.0 / 4096;
    const std::vector<ZeroRun> whole = zero_runs(W, o, family);
    const std::vector<ZeroRun> by_plugin = zero_runs(W, o, family, /*by_plugin=*/true);
    for (int r = 0; r < W; ++r) {
      EXPECT_FALSE(whole[r].declared_optimizer);
      EXPECT_TRUE(by_plugin[r].declared_optimizer) << "rank " << r;
      ASSERT_EQ(by_plugin[r].run.loss.size(), static_cast<size_t>(kSteps)) << "rank " << r;
      EXPECT_EQ(by_plugin[r].run.loss, whole[r].run.loss) << "rank " << r;
      EXPECT_EQ(by_plugin[r].run.grad_norm, whole[r].run.grad_norm) << "rank " << r;
      EXPECT_EQ(by_plugin[r].run.weights, whole[r].run.weights) << "rank " << r;
      EXPECT_EQ(by_plugin[r].master, whole[r].master) << "rank " << r;
    }
  }
}

// A parameter the backward never reaches gets a zero gradient, also when a
// bucket holds only such parameters (8-element buckets: one a tensor): stage
// 2 gives an unwritten bucket zeros when it is launched. Adam without decay
// then leaves that branch exactly as it was; the used branch moves.
TEST(LowLevelZero, Stage2UnusedParameterGetsAZeroGradient) {
  run_ranks(2, [](int, std::shared_ptr<comm::ProcessGroup> pg) {
    auto ctx = std::move(*core::Context::create(core::Device::cpu()));
    Branches net(/*use_b=*/false);
    nn::ParameterTable table;
    ASSERT_TRUE(net.declare(table).ok());
    nn::ParameterStore store = nn::ParameterStore::declare(table);
    ASSERT_TRUE(net.bind(store).ok());
    LowLevelZeroOptions o;
    o.stage = 2;
    o.reduce_bucket_size_in_m = 8.0 / (1024 * 1024);
    auto plugin = LowLevelZeroPlugin::create(std::move(pg), o);
    ASSERT_TRUE(plugin.ok()) << plugin.status();
    Booster booster(std::move(*plugin));
    ASSERT_TRUE(booster.materialize(store, 7, Stream::cpu()).ok());
    nn::AdamOptions no_decay;
    no_decay.weight_decay = 0.0;
    auto adam = *nn::make_adamw({nn::ParamGroup{nn::declared_params(table)}}, no_decay);
    ASSERT_TRUE(booster.boost(net, store, *adam).ok());
    const std::vector<float> before = floats_of(store.flat_values(DType::kF32));
    Tensor x = *Tensor::empty({2, 4}, DType::kF32, Stream::cpu());
    for (int i = 0; i < 8; ++i) x.data<float>()[i] = 0.25f * static_cast<float>(i + 1);
    ASSERT_TRUE(booster.zero_grad().ok());
    auto out = booster.forward(*ctx, net, x);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_TRUE(booster.backward(*ctx, net, *out->saved, out->output).ok());
    auto stepped = booster.step({});
    ASSERT_TRUE(stepped.ok()) << stepped.status();
    ASSERT_TRUE(booster.sync_weights().ok());
    const std::vector<float> after = floats_of(store.flat_values(DType::kF32));
    for (const nn::ParameterEntry& e : table.entries()) {
      const bool unused = e.name.rfind("net.b.", 0) == 0;
      int64_t moved = 0;
      for (int64_t i = e.offset; i < e.offset + e.numel(); ++i) moved += after[i] != before[i];
      if (unused) {
        EXPECT_EQ(moved, 0) << e.name;
      } else {
        EXPECT_GT(moved, 0) << e.name;
      }
    }
  });
}

// One linear layer, whose parent's backward writes the layer's weight
// gradient once more after the layer's backward (and so its backward hook):
// a parameter used by a module whose backward runs after the one declaring it.
class LateWrite : public nn::Module {
 public:
  LateWrite() : Module("net"), layer_("net.layer", 4, 4, {}) { register_child(&layer_); }
  const char* type() const override { return "LateWrite"; }
  void set_store(const nn::ParameterStore* store) { store_ = store; }

 protected:
  absl::StatusOr<nn::ForwardResult> forward_impl(core::Context& ctx, const Tensor& x) override {
    return layer_.forward(ctx, x);
  }
  absl::StatusOr<Tensor> backward_impl(core::Context& ctx, nn::Saved& saved,
                                       const Tensor& dy) override {
    COLOSSAL_ASSIGN_OR_RETURN(Tensor dx, layer_.backward(ctx, saved, dy));
    COLOSSAL_ASSIGN_OR_RETURN(nn::ParameterHandle h, store_->handle("net.layer.weight"));
    COLOSSAL_ASSIGN_OR_RETURN(Tensor g, h.grad());
    for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] += 1.0f;
    return dx;
  }

 private:
  nn::Linear layer_;
  const nn::ParameterStore* store_ = nullptr;
};

// Stage 2 refuses a gradient written after its bucket was reduced (the part
// would be lost), naming the parameter: the backward fails. Reduced after the
// backward (overlap_communication = false), the same write is in time.
TEST(LowLevelZero, Stage2RefusesAGradientWrittenAfterItsBucketWasReduced) {
  for (const bool overlap : {true, false}) {
    run_ranks(2, [&](int, std::shared_ptr<comm::ProcessGroup> pg) {
      auto ctx = std::move(*core::Context::create(core::Device::cpu()));
      LateWrite net;
      nn::ParameterTable table;
      ASSERT_TRUE(net.declare(table).ok());
      nn::ParameterStore store = nn::ParameterStore::declare(table);
      ASSERT_TRUE(net.bind(store).ok());
      net.set_store(&store);
      LowLevelZeroOptions o;
      o.stage = 2;
      o.overlap_communication = overlap;
      auto plugin = LowLevelZeroPlugin::create(std::move(pg), o);
      ASSERT_TRUE(plugin.ok()) << plugin.status();
      Booster booster(std::move(*plugin));
      ASSERT_TRUE(booster.materialize(store, 7, Stream::cpu()).ok());
      auto adam = *nn::make_adamw({nn::ParamGroup{nn::declared_params(table)}}, {});
      ASSERT_TRUE(booster.boost(net, store, *adam).ok());
      Tensor x = *Tensor::empty({2, 4}, DType::kF32, Stream::cpu());
      for (int i = 0; i < 8; ++i) x.data<float>()[i] = 0.25f * static_cast<float>(i + 1);
      ASSERT_TRUE(booster.zero_grad().ok());
      auto out = booster.forward(*ctx, net, x);
      ASSERT_TRUE(out.ok()) << out.status();
      const absl::Status s = booster.backward(*ctx, net, *out->saved, out->output).status();
      if (overlap) {
        EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
        EXPECT_NE(s.message().find("\"net.layer.weight\" is written after its gradient bucket was "
                                   "reduced"),
                  std::string::npos)
            << s;
      } else {
        EXPECT_TRUE(s.ok()) << s;
      }
    });
  }
}

// The CUDA policy of reducing a bucket that lies in one rank's slice to that
// rank in place (reduce_owned_buckets; in the first backward since zero_grad
// the owner's gradients are the shard's own range), on the CPU: two ranks'
// gradient shards after two backwards are bitwise those of reduce-scatters
// for every bucket (a sum of two is the same either way), and the views are
// gone.
TEST(ZeroGradReductionTest, OwnedBucketsReducedInPlaceGiveTheReduceScatterShard) {
  constexpr int W = 2;
  std::vector<float> shards[2][W];
  for (bool owned : {false, true}) {
    run_ranks(W, [&](int r, std::shared_ptr<comm::ProcessGroup> pg) {
      auto ctx = std::move(*core::Context::create(core::Device::cpu()));
      auto model = make_zero_model(Family::kGpt2, kSeed);
      nn::ParameterStore& store = model->store();
      const int64_t numel = store.table().buffer_numel(DType::kF32);
      const ZeroShard shard = zero_shard(numel, W, r);
      ZeroGradReductionOptions o;
      o.stage = 2;
      o.bucket_bytes = 4 * 40;  // 40 elements: some buckets in one slice, some across
      o.reduce_owned_buckets = owned;
      auto grads = ZeroGradReduction::create(pg, *model, store, DType::kF32, shard, Stream::cpu(), o);
      ASSERT_TRUE(grads.ok()) << grads.status();
      ASSERT_TRUE(store.release_grads().ok());
      for (int micro = 0; micro < 2; ++micro) {
        const nn::MicroBatch mb = micro_batch(0, r, micro);
        auto out = model->forward(*ctx, mb.tokens);
        ASSERT_TRUE(out.ok()) << out.status();
        auto ce = model->loss(*ctx, out->output, mb.targets, {});
        ASSERT_TRUE(ce.ok()) << ce.status();
        ASSERT_TRUE((*grads)->begin_backward(Stream::cpu(), /*sync=*/true).ok());
        ASSERT_TRUE(model->backward(*ctx, *out->saved, ce->dlogits).ok());
        ASSERT_TRUE((*grads)->end_backward(true).ok());
      }
      ASSERT_TRUE((*grads)->wait(Stream::cpu()).ok());
      for (const nn::Parameter& p : store.parameters()) EXPECT_FALSE(p.grad.defined()) << p.name;
      EXPECT_LE((*grads)->most_in_flight(), 4);
      shards[owned][r] = floats_of(*(*grads)->slice_grads());
    });
  }
  for (int r = 0; r < W; ++r) {
    ASSERT_FALSE(shards[0][r].empty());
    EXPECT_TRUE(std::any_of(shards[0][r].begin(), shards[0][r].end(), [](float x) { return x != 0.0f; }));
    EXPECT_EQ(shards[1][r], shards[0][r]) << "rank " << r;
  }
}

// overlap_communication = false: every bucket is issued after the backward
// returns, none from the hooks, and the results are those with the overlap
// bit for bit (the same collectives on the same data, in the same order), for
// both stages and for ddp, which shares the reducer.
TEST(ZeroOverlapCommunication, ReducingAfterTheBackwardGivesTheSameBits) {
  constexpr int W = 2;
  for (int stage : {1, 2}) {
    LowLevelZeroOptions o;
    o.stage = stage;
    o.reduce_bucket_size_in_m = 0.05;
    const std::vector<ZeroRun> on = zero_runs(W, o);
    o.overlap_communication = false;
    const std::vector<ZeroRun> off = zero_runs(W, o);
    for (int r = 0; r < W; ++r) {
      ASSERT_EQ(off[r].run.loss.size(), static_cast<size_t>(kSteps)) << "stage " << stage;
      EXPECT_EQ(off[r].run.loss, on[r].run.loss) << "stage " << stage << " rank " << r;
      EXPECT_EQ(off[r].run.weights, on[r].run.weights) << "stage " << stage << " rank " << r;
      EXPECT_EQ(off[r].issued, on[r].issued) << "stage " << stage;
      EXPECT_GT(on[r].issued_in_hooks, 0) << "stage " << stage;
      EXPECT_EQ(off[r].issued_in_hooks, 0) << "stage " << stage;
    }
  }
  std::vector<ZeroRun> on(W), off(W);
  for (bool overlap : {true, false}) {
    run_ranks(W, [&](int r, std::shared_ptr<comm::ProcessGroup> pg) {
      DdpOptions d;
      d.bucket_cap_mb = 0.2;
      d.overlap_communication = overlap;
      auto plugin = DdpPlugin::create(pg, d);
      ASSERT_TRUE(plugin.ok()) << plugin.status();
      (overlap ? on : off)[r] = rank_run(std::move(pg), std::move(*plugin));
    });
  }
  EXPECT_EQ(off[0].run.weights, on[0].run.weights);
  EXPECT_EQ(off[0].run.loss, on[0].run.loss);
  EXPECT_GT(on[0].run.issued_in_hooks, 0);
  EXPECT_EQ(off[0].run.issued_in_hooks, 0);
}

}  // namespace
}  // namespace colossal::parallel
