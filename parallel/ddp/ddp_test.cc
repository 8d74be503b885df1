// The ddp plugin through the Booster, CPU, builtin backend, ranks as threads
// over the in-process transport:
//   * equivalence: W ranks (W = 1, 2, 4), each training a tiny GPT-2 for 20
//     steps on its own rows, 2 micro-batches per step (the first under
//     no_sync), clipping by global norm on, give the losses and weights of one
//     process that accumulates the union of the ranks' rows (nn::train_step).
//     fp32; tolerance: relative difference <= 1e-5 (kRelTol; the orders of
//     summation differ), for one bucket per parameter, 1 KiB buckets and one
//     huge bucket, and with activation checkpointing on the ranks; the same
//     for a tiny Llama (grouped-query attention, rotary positions with Llama 3
//     scaling) with an untied and a tied head at 2 and 4 ranks, trained with
//     AdamW (DdpRunSpec::adamw);
//   * the ranks start from different weights and end bitwise equal;
//   * bucket layout (tiling, reverse order, cap) on a table with padding;
//   * no_sync: local accumulation, then one reduction of the sum;
//   * errors: bad options, backward before boost, step after an unsynced
//     backward, boosting twice.
#include "parallel/ddp/ddp_plugin.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/context/context.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/train/train_step.h"
#include "parallel/booster/booster.h"
#include "parallel/ddp/ddp_test_util.h"

namespace colossal::parallel {
namespace {

using core::DType;
using core::Stream;
using core::Tensor;
using namespace ::colossal::parallel::testing;  // NOLINT: test helpers

struct EquivalenceCase {
  int world;
  double bucket_cap_mb;
  double checkpoint_ratio = 0.0;  // activation checkpointing on the ranks
  Family family = Family::kGpt2;  // Llama trains with AdamW (DdpRunSpec::adamw says why)
};

class DdpEquivalence : public ::testing::TestWithParam<EquivalenceCase> {};

TEST_P(DdpEquivalence, MatchesOneProcessOnTheUnion) {
  const int W = GetParam().world;
  const Family family = GetParam().family;
  DdpRunSpec spec;
  spec.checkpoint_ratio = GetParam().checkpoint_ratio;
  spec.family = family;
  spec.adamw = family != Family::kGpt2;
  const EquivalenceRun ref = reference_run(W, spec);
  ASSERT_EQ(ref.loss.size(), size_t(kSteps));
  // Clipping must engage on some steps (the norm must be the global one) and
  // not on others (or it would hide a wrongly scaled reduction).
  const auto n_clipped = std::count(ref.clipped.begin(), ref.clipped.end(), 1);
  ASSERT_GT(n_clipped, 0) << "clipping never engaged";
  ASSERT_LT(n_clipped, kSteps) << "clipping engaged on every step";

  std::vector<EquivalenceRun> runs(W);
  DdpOptions o;
  o.bucket_cap_mb = GetParam().bucket_cap_mb;
  run_ranks(W, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    runs[rank] = ddp_rank_run(pg, o, spec);
  });
  for (int r = 0; r < W; ++r) ASSERT_EQ(runs[r].loss.size(), size_t(kSteps)) << "rank " << r;

  double worst_loss = 0;
  for (int step = 0; step < kSteps; ++step) {
    double mean = 0;
    for (int r = 0; r < W; ++r) mean += runs[r].loss[step];
    mean /= W;
    const double rel = std::abs(mean - ref.loss[step]) / std::abs(double(ref.loss[step]));
    worst_loss = std::max(worst_loss, rel);
    EXPECT_LE(rel, kRelTol) << "step " << step << ": ddp " << mean << ", one process "
                            << ref.loss[step];
    for (int r = 0; r < W; ++r) {
      EXPECT_EQ(runs[r].clipped[step], ref.clipped[step]) << "step " << step << " rank " << r;
    }
  }
  const double worst_weights = rel_diff(runs[0].weights, ref.weights);
  EXPECT_LE(worst_weights, kRelTol);
  std::cout << family_name(family) << ", world " << W << ", bucket_cap_mb " << GetParam().bucket_cap_mb << ": "
            << runs[0].buckets << " buckets; worst relative loss difference " << worst_loss
            << ", weights " << worst_weights << "\n";
  for (int r = 0; r < W; ++r) {
    EXPECT_EQ(runs[r].weights, runs[0].weights) << "rank " << r << " ended with other weights";
    // One reduction per bucket per step (the no_sync micro-batches issue
    // none), every one from a module's backward hook (overlapping backward).
    EXPECT_EQ(runs[r].issued, int64_t(kSteps) * int64_t(runs[r].buckets));
    EXPECT_EQ(runs[r].issued_in_hooks, runs[r].issued);
  }
  const size_t n_params = declare_model(family)->table().size();
  if (GetParam().bucket_cap_mb < 1e-6) {
    EXPECT_EQ(runs[0].buckets, n_params);  // every parameter over the cap: one each
  } else if (GetParam().bucket_cap_mb < 1.0) {
    EXPECT_GT(runs[0].buckets, 1u);  // several parameters in some buckets
    EXPECT_LT(runs[0].buckets, n_params);
  } else {
    EXPECT_EQ(runs[0].buckets, 1u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    WorldsAndBuckets, DdpEquivalence,
    ::testing::Values(EquivalenceCase{1, 25.0}, EquivalenceCase{2, 25.0},
                      EquivalenceCase{4, 25.0}, EquivalenceCase{1, 1e-9},
                      EquivalenceCase{2, 1e-9}, EquivalenceCase{4, 1e-9},
                      EquivalenceCase{2, 0.001}, EquivalenceCase{4, 0.001},
                      EquivalenceCase{2, 0.001, 1.0},
                      EquivalenceCase{2, 25.0, 0.0, Family::kLlama},
                      EquivalenceCase{4, 0.001, 0.0, Family::kLlama},
                      EquivalenceCase{2, 1e-9, 0.0, Family::kLlamaTied},
                      EquivalenceCase{4, 0.001, 0.0, Family::kLlamaTied},
                      EquivalenceCase{2, 0.001, 1.0, Family::kLlamaTied}),
    [](const ::testing::TestParamInfo<EquivalenceCase>& info) {
      const double cap = info.param.bucket_cap_mb;
      return absl::StrCat("world", info.param.world,
                          cap < 1e-6 ? "_bucket_per_param" : cap < 1.0 ? "_1KiB_buckets"
                                                                       : "_one_bucket",
                          info.param.checkpoint_ratio > 0 ? "_checkpointed" : "",
                          family_suffix(info.param.family));
    });

TEST(GradBuckets, TileTheFlatBufferInReverseOrder) {
  nn::ParameterTable table;
  // float32: 16-byte alignment pads 3 -> 4, 5 -> 8.
  ASSERT_TRUE(table.add("a", {3}, DType::kF32).ok());
  ASSERT_TRUE(table.add("b", {5}, DType::kF32).ok());
  ASSERT_TRUE(table.add("c", {7}, DType::kF32).ok());
  ASSERT_TRUE(table.add("d", {2}, DType::kF32).ok());
  ASSERT_TRUE(table.add("e", {40}, DType::kF32).ok());
  const int64_t n = table.buffer_numel(DType::kF32);
  for (int64_t cap : {int64_t{1}, int64_t{40}, int64_t{64}, int64_t{100}, int64_t{1} << 30}) {
    std::vector<GradBucket> buckets = make_grad_buckets(table, cap);
    ASSERT_FALSE(buckets.empty());
    int64_t end = n;
    std::vector<std::string> order;
    for (const GradBucket& b : buckets) {
      EXPECT_EQ(b.offset + b.count, end) << "cap " << cap;  // contiguous, from the end
      end = b.offset;
      ASSERT_FALSE(b.params.empty());
      if (b.params.size() > 1) {
        EXPECT_LE(b.count * 4, cap) << "cap " << cap;
      }
      for (const std::string& p : b.params) order.push_back(p);
    }
    EXPECT_EQ(end, 0) << "cap " << cap;
    EXPECT_EQ(order, (std::vector<std::string>{"e", "d", "c", "b", "a"})) << "cap " << cap;
  }
  EXPECT_EQ(make_grad_buckets(table, 1).size(), 5u);
  EXPECT_EQ(make_grad_buckets(table, int64_t{1} << 30).size(), 1u);
  // Offsets a 0, b 4, c 12, d 20, e 24 (end 64). Cap 64 bytes = 16 floats:
  // e (40 floats) alone, then [12, 24) = {d, c}, then [0, 12) = {b, a}.
  std::vector<GradBucket> b64 = make_grad_buckets(table, 64);
  ASSERT_EQ(b64.size(), 3u);
  EXPECT_EQ(b64[0].params, (std::vector<std::string>{"e"}));
  EXPECT_EQ(b64[1].params, (std::vector<std::string>{"d", "c"}));
  EXPECT_EQ(b64[1].offset, 12);
  EXPECT_EQ(b64[1].count, 12);
  EXPECT_EQ(b64[2].params, (std::vector<std::string>{"b", "a"}));
}

TEST(GradBuckets, OneBucketListPerDtype) {
  nn::ParameterTable table;
  ASSERT_TRUE(table.add("a", {8}, DType::kF32).ok());
  ASSERT_TRUE(table.add("h", {8}, DType::kBF16).ok());
  ASSERT_TRUE(table.add("b", {8}, DType::kF32).ok());
  std::vector<GradBucket> buckets = make_grad_buckets(table, int64_t{1} << 20);
  ASSERT_EQ(buckets.size(), 2u);
  for (const GradBucket& b : buckets) {
    EXPECT_EQ(b.offset, 0);
    EXPECT_EQ(b.count, table.buffer_numel(b.dtype));
  }
}

TEST(Ddp, BroadcastsRankZerosParametersAtBoost) {
  const int W = 3;
  std::vector<std::vector<float>> before(W), after(W);
  run_ranks(W, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    auto model = make_model(kSeed + rank);
    auto sgd = make_sgd(*model);
    before[rank] = floats_of(model->store().flat_values(DType::kF32));
    Booster booster(*DdpPlugin::create(pg));
    ASSERT_TRUE(booster.boost(*model, model->store(), *sgd).ok());
    after[rank] = floats_of(model->store().flat_values(DType::kF32));
  });
  EXPECT_NE(before[1], before[0]);
  for (int r = 0; r < W; ++r) EXPECT_EQ(after[r], before[0]) << "rank " << r;
}

// Local gradients of `mbs` (dloss 1 each, accumulated) from a plain model.
std::vector<float> local_grads(uint64_t seed, const std::vector<nn::MicroBatch>& mbs) {
  auto ctx = std::move(*core::Context::create(core::Device::cpu()));
  auto model = make_model(seed);
  EXPECT_TRUE(model->store().zero_grad(Stream::cpu()).ok());
  nn::AccumulateOptions o;
  o.loss_scale = static_cast<float>(mbs.size());  // dloss = 1 per micro-batch
  EXPECT_TRUE(nn::accumulate_gradients(*ctx, *model, tiny_config().vocab_size, mbs, o).ok());
  return floats_of(model->store().flat_grads(DType::kF32));
}

TEST(Ddp, NoSyncAccumulatesLocallyThenReducesTheSum) {
  const int W = 2;
  // Rank r: micro-batch A_r under no_sync, then B_r synced.
  std::vector<std::vector<float>> after_no_sync(W), after_sync(W);
  std::vector<int64_t> issued_no_sync(W);
  std::vector<absl::Status> early_step(W);
  run_ranks(W, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    auto ctx = std::move(*core::Context::create(core::Device::cpu()));
    auto model = make_model(/*seed=*/5);
    auto sgd = make_sgd(*model);
    auto plugin = DdpPlugin::create(pg, {.bucket_cap_mb = 1e-3});  // a few buckets
    DdpPlugin* ddp = plugin->get();
    Booster booster(std::move(*plugin));
    ASSERT_TRUE(booster.boost(*model, model->store(), *sgd).ok());
    ASSERT_TRUE(booster.zero_grad().ok());
    {
      Booster::NoSync guard = booster.no_sync();
      EXPECT_FALSE(booster.sync_enabled());
      booster_micro_step(*ctx, booster, *model, micro_batch(0, rank, 0), 1.0f);
    }
    EXPECT_TRUE(booster.sync_enabled());
    issued_no_sync[rank] = ddp->reductions_issued();
    after_no_sync[rank] = floats_of(model->store().flat_grads(DType::kF32));
    early_step[rank] = booster.step().status();
    booster_micro_step(*ctx, booster, *model, micro_batch(0, rank, 1), 1.0f);
    auto r = booster.step();
    ASSERT_TRUE(r.ok()) << r.status();
    after_sync[rank] = floats_of(model->store().flat_grads(DType::kF32));
  });
  std::vector<float> sum(after_sync[0].size(), 0.0f);
  for (int r = 0; r < W; ++r) {
    EXPECT_EQ(issued_no_sync[r], 0);
    EXPECT_EQ(early_step[r].code(), absl::StatusCode::kFailedPrecondition) << early_step[r];
    // Under no_sync: exactly this rank's own gradients.
    EXPECT_LE(rel_diff(after_no_sync[r], local_grads(5, {micro_batch(0, r, 0)})), 1e-6);
    std::vector<float> g = local_grads(5, {micro_batch(0, r, 0), micro_batch(0, r, 1)});
    for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i] / W;
  }
  EXPECT_NE(after_no_sync[0], after_no_sync[1]);
  for (int r = 0; r < W; ++r) {
    EXPECT_LE(rel_diff(after_sync[r], sum), kRelTol) << "rank " << r;
    EXPECT_EQ(after_sync[r], after_sync[0]);
  }
}

TEST(Ddp, Errors) {
  EXPECT_EQ(DdpPlugin::create(nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  run_ranks(1, [&](int, std::shared_ptr<comm::ProcessGroup> pg) {
    EXPECT_EQ(DdpPlugin::create(pg, {.bucket_cap_mb = 0}).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(DdpPlugin::create(pg, {.bucket_cap_mb = NAN}).status().code(),
              absl::StatusCode::kInvalidArgument);
    auto ctx = std::move(*core::Context::create(core::Device::cpu()));
    auto model = make_model(1);
    auto other = make_model(1);
    auto sgd = make_sgd(*model);
    auto other_sgd = make_sgd(*other);
    Booster booster(*DdpPlugin::create(pg));
    auto out = model->forward(*ctx, micro_batch(0, 0, 0).tokens);
    ASSERT_TRUE(out.ok());
    Tensor dy = *Tensor::empty(out->output.shape(), DType::kF32, Stream::cpu());
    ASSERT_TRUE(dy.set_zero(Stream::cpu()).ok());
    EXPECT_EQ(booster.backward(*ctx, *model, *out->saved, dy).status().code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(booster.step().status().code(), absl::StatusCode::kFailedPrecondition);
    // An optimizer over another model's gradients.
    EXPECT_EQ(booster.boost(*model, model->store(), *other_sgd).code(),
              absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE(booster.boost(*model, model->store(), *sgd).ok());
    EXPECT_EQ(booster.boost(*model, model->store(), *sgd).code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(booster.backward(*ctx, *other, *out->saved, dy).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(booster.backward(*ctx, *model, *out->saved, dy).ok());
  });
}

}  // namespace
}  // namespace colossal::parallel
