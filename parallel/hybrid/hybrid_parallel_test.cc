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
#include "core/status/status.h"
#include "nn/models/causal_lm/last_logits.h"
#include "nn/module/tensor_split.h"
#include "nn/train/train_step.h"
#include "parallel/booster/booster.h"
#include "parallel/booster/pipeline.h"
#include "parallel/hybrid/hybrid_test_util.h"
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
using testing::HybridCase;
using testing::RankRun;
using testing::case_name;
using testing::declare_case_model;
using testing::hybrid_rank_run;
using testing::kWeightTol;
using testing::one_process;
constexpr int kSteps = testing::kHybridSteps;

// The runs' EquivalenceRuns.
std::vector<EquivalenceRun> runs_of(const std::vector<RankRun>& runs) {
  std::vector<EquivalenceRun> out;
  for (const RankRun& r : runs) out.push_back(r.run);
  return out;
}

class HybridEquivalence : public ::testing::TestWithParam<HybridCase> {};

TEST_P(HybridEquivalence, EqualsOneProcess) {
  const HybridCase& c = GetParam();
  const int dp = c.world / (c.tp * c.pp * c.a2a);
  auto ref_model = testing::materialized(declare_case_model(c), kSeed);
  auto ref_adam = testing::make_adam(*ref_model);
  const EquivalenceRun ref = testing::reference_run(*ref_model, *ref_adam, dp, kSteps, c.micro);
  // The norm itself is compared on every step; clipping must act on some
  // (a tiny Llama's norm stays above kMaxNorm for the first ten steps).
  ASSERT_GT(std::count(ref.clipped.begin(), ref.clipped.end(), 1), 0) << "clipping never engaged";
  std::vector<RankRun> runs(c.world);
  testing::run_ranks(c.world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    runs[rank] = hybrid_rank_run(pg, c, kSteps);
  });
  testing::expect_equal_to_reference(runs_of(runs), ref);
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
    // The interleaved schedule: two chunks of one layer per stage, with a
    // steady state (4 micro-batches) and all warm-up (2, the stage count);
    // under tp2 x dp2 with ZeRO-1.
    out.push_back({f, 2, 1, 0, 2, 4, 2, false, 2, 4});
    out.push_back({f, 2, 1, 0, 2, 4, 2, false, 2, 2});
    out.push_back({f, 8, 2, 1, 2, 4, 2, false, 2, 4});
    // all_to_all (Ulysses) sequence parallelism: sp2, with dp2 under ZeRO-1
    // and ZeRO-2, and sp4 (GPT-2 with four heads; the tiny Llama has two
    // key/value heads).
    out.push_back({f, 2, 1, 0, 1, 2, 2, false, 1, kMicro, 2});
    out.push_back({f, 4, 1, 1, 1, 2, 2, false, 1, kMicro, 2});
    out.push_back({f, 4, 1, 2, 1, 2, 2, false, 1, kMicro, 2});
    if (f == Family::kGpt2) out.push_back({f, 4, 1, 0, 1, 2, 4, false, 1, kMicro, 4});
    // num_layers_per_stage: pp2 over four layers as 1 + 3 (the even split
    // is 2 + 2), 1F1B and interleaved (1 + 1 + 1 + 1 would be even: the
    // interleaved case uses six layers, 1 + 1 + 1 + 3).
    out.push_back({f, 2, 1, 0, 2, 4, 2, false, 1, kMicro, 1, true});
    // Three uneven chunks, and pp4, over eight layers. Not for the tied
    // Llama: eight tied layers grow its gradient norm five-fold in ten steps
    // at this learning rate, and rounding alone (its 1F1B run as much) then
    // moves the norm past fp32 tolerances.
    if (f != Family::kLlamaTied) {
      out.push_back({f, 2, 1, 0, 2, 6, 2, false, 2, 4, 1, true});
      out.push_back({f, 2, 1, 1, 2, 8, 2, false, 3, 4});
      out.push_back({f, 4, 1, 0, 4, 8, 2, false, 2, 8});
    }
    out.push_back({f, 2, 2, 0, 1, 2, 2, true});  // tp2 with sequence parallelism (split_gather)
    out.push_back({f, 4, 2, 1, 1, 2, 2, true});  // ... x dp2, ZeRO-1
    out.push_back({f, 4, 2, 1, 2, 2, 2, true});  // ... x pp2, ZeRO-1
    // all_to_all with pipeline stages (pp2 x sp2), and with tensor
    // parallelism (tp2 x sp2: GPT-2's four heads over four ranks; the tiny
    // Llama's two key/value heads do not split so).
    out.push_back({f, 4, 1, 1, 2, 2, 2, false, 1, kMicro, 2});
    if (f == Family::kGpt2) out.push_back({f, 4, 2, 1, 1, 2, 4, false, 1, kMicro, 2});
  }
  // Qwen2's q/k/v biases split with their projections' columns (tp2, with
  // split_gather, over ZeRO-2 copies) and travel through a2a and pipeline
  // stages like the weights.
  const Family q = Family::kQwen2;
  out.push_back({q, 2, 2, 0});
  out.push_back({q, 4, 2, 2});
  out.push_back({q, 4, 2, 1, 1, 2, 2, true});
  out.push_back({q, 4, 2, 1, 2});
  out.push_back({q, 4, 1, 1, 1, 2, 2, false, 1, kMicro, 2});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, HybridEquivalence, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<HybridCase>& info) {
                           return case_name(info.param);
                         });

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

// Case `first` trains 5 steps; its checkpoint (the whole model and optimizer
// state) loaded through the plugin into case `then` trains steps 5-9 as the
// uninterrupted one-process run does. Both cases have the same dp.
void expect_checkpoint_continues(const HybridCase& first, const HybridCase& then) {
  std::vector<RankRun> saved(first.world), cont(then.world);
  testing::run_ranks(first.world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    saved[rank] = hybrid_rank_run(pg, first, /*steps=*/5);
  });
  ASSERT_TRUE(saved[0].whole.materialized());
  testing::run_ranks(then.world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    cont[rank] = hybrid_rank_run(pg, then, /*steps=*/5, /*first_step=*/5,
                                 [&](Booster& booster, nn::Optimizer& optimizer) {
                                   ASSERT_TRUE(booster.load_model_state_dict(saved[0].whole,
                                                                             Stream::cpu()).ok());
                                   const absl::Status st =
                                       booster.load_optimizer_state_dict(saved[0].optimizer);
                                   ASSERT_TRUE(st.ok()) << st;
                                 });
  });
  const EquivalenceRun ref =
      one_process(first, first.world / (first.tp * first.pp * first.a2a), 10);
  EquivalenceRun tail = ref;
  tail.loss.assign(ref.loss.begin() + 5, ref.loss.end());
  tail.clipped.assign(ref.clipped.begin() + 5, ref.clipped.end());
  tail.grad_norm.assign(ref.grad_norm.begin() + 5, ref.grad_norm.end());
  testing::expect_equal_to_reference(runs_of(cont), tail, /*first_step=*/5);
}

// ... and loaded into tp4 x dp2 through the plugin, it continues the same way.
TEST(Hybrid, CheckpointOfTp2Pp2Dp2LoadsIntoTp4) {
  expect_checkpoint_continues({Family::kGpt2, 8, 2, 1, 2, 2, 4}, {Family::kGpt2, 8, 4, 1, 1, 2, 4});
}

// A Qwen2's checkpoint at tp2 x dp2 (its q/k/v biases gathered over tp like
// the weights) continues at dp2 without tensor parallelism.
TEST(Hybrid, Qwen2CheckpointOfTp2Dp2LoadsIntoDp2) {
  expect_checkpoint_continues({Family::kQwen2, 4, 2, 1}, {Family::kQwen2, 2, 1, 1});
}

// A checkpoint of the interleaved schedule (tp2 x pp2 x dp2, two chunks per
// stage, so each stage holds layers out of order) loaded into pp2 x dp2 with
// 1F1B continues as the uninterrupted one-process run.
TEST(Hybrid, CheckpointOfInterleavedLoadsInto1F1B) {
  expect_checkpoint_continues({Family::kLlama, 8, 2, 1, 2, 4, 2, false, 2, 4},
                              {Family::kLlama, 4, 1, 1, 2, 4, 2, false, 1, 4});
}

// The interleaved schedule takes a multiple of the stage count of
// micro-batches, and model chunks need pipeline stages.
// num_layers_per_stage gives each virtual stage (chunk c of stage s is
// virtual stage c * count + s) its count of layers, and is checked whole.
TEST(Hybrid, LayersPerStageSplitsAsListed) {
  const std::vector<int64_t> per = {1, 1, 1, 3};
  absl::StatusOr<nn::PipelineStage> s1 = nn::pipeline_stage(6, 2, 1, 2, per);
  ASSERT_TRUE(s1.ok()) << s1.status();
  ASSERT_EQ(s1->chunks.size(), 2u);
  EXPECT_EQ(s1->chunks[0].first, 1);
  EXPECT_EQ(s1->chunks[0].end, 2);
  EXPECT_EQ(s1->chunks[1].first, 3);
  EXPECT_EQ(s1->chunks[1].end, 6);
  absl::StatusOr<nn::PipelineStage> even = nn::pipeline_stage(6, 2, 1, 2);
  ASSERT_TRUE(even.ok());
  EXPECT_NE(even->chunks[1].first, 3);  // the even split differs
  for (const std::vector<int64_t>& bad :
       {std::vector<int64_t>{1, 1, 1, 2}, std::vector<int64_t>{1, 1, 4}, std::vector<int64_t>{0, 2, 1, 3}}) {
    absl::StatusOr<nn::PipelineStage> s = nn::pipeline_stage(6, 2, 0, 2, bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("num_layers_per_stage"), std::string::npos) << s.status();
  }
}

TEST(Hybrid, InterleavedRefusesMicroBatchesNotAMultipleOfStages) {
  testing::run_ranks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    HybridParallelOptions o;
    o.num_model_chunks = 2;
    auto p = HybridParallelPlugin::create(pg, o);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
    o.pp_size = 2;
    p = HybridParallelPlugin::create(pg, o);
    ASSERT_TRUE(p.ok()) << p.status();
    const HybridCase c{Family::kGpt2, 2, 1, 0, 2, 4, 2, false, 2, 4};
    auto declared = declare_case_model(c);
    auto split = (*p)->model_split(*declared);
    ASSERT_TRUE(split.ok()) << split.status();
    ASSERT_EQ(split->stage.num_chunks(), 2);
    auto model = *declared->redeclare(DType::kF32, *split);
    Booster booster(std::move(*p));
    ASSERT_TRUE(booster.materialize(model->store(), kSeed, Stream::cpu()).ok());
    auto adam = testing::make_adam(*model);
    ASSERT_TRUE(booster.boost(*model, model->store(), *adam).ok());
    std::vector<nn::MicroBatch> mbs;
    for (int i = 0; i < 3; ++i) mbs.push_back(testing::micro_batch(0, 0, i));
    auto ctx = std::move(*core::Context::create(core::Device::cpu()));
    auto r = execute_pipeline(*ctx, booster, *model, mbs);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    // The model itself runs chunk by chunk only.
    auto out = model->forward(*ctx, mbs[0].tokens);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition) << out.status();
  });
}

// Token-weighted steps: execute_pipeline scales micro-batch i's gradient by
// weights[i] (one of them 0) and returns sum_i weights[i] * loss_i, as one
// process does with dloss = weights[i] (1F1B and interleaved); weights that
// do not fit the micro-batches are refused. The Llama's micro-batches hold
// two packed documents a row: each stage attends within them, forward and
// backward, as one process does.
TEST(Hybrid, PipelineWeightsEachMicroBatch) {
  const std::vector<double> weights = {0.5, 0.0, 1.25, 2.25};
  for (const HybridCase& c : {HybridCase{Family::kGpt2, 2, 1, 0, 2, 2, 2, false, 1, 4},
                              HybridCase{Family::kLlama, 2, 1, 0, 2, 4, 2, false, 2, 4}}) {
    SCOPED_TRACE(case_name(c));
    std::vector<nn::MicroBatch> mbs;
    auto host = std::move(*core::Context::create(core::Device::cpu()));
    for (int i = 0; i < c.micro; ++i) {
      mbs.push_back(testing::micro_batch(0, 0, i));
      if (c.family != Family::kLlama) continue;
      const int64_t B = mbs[i].tokens.dim(0), T = mbs[i].tokens.dim(1);
      core::Tensor positions = *core::Tensor::empty({B, T}, DType::kI32, Stream::cpu());
      for (int64_t r = 0; r < B * T; ++r) {
        const int64_t t = r % T, split = 1 + (r / T + i) % (T - 1);  // the second document's start
        positions.data<int32_t>()[r] = static_cast<int32_t>(t < split ? t : t - split);
      }
      auto docs = nn::Documents::from_positions(*host, positions);
      ASSERT_TRUE(docs.ok()) << docs.status();
      mbs[i].documents = *docs;
    }
    double ref_loss = 0;
    float ref_norm = 0;
    HybridCase one = c;
    one.world = 1;
    one.pp = 1;
    one.chunks = 1;
    testing::run_ranks(1, [&](int, std::shared_ptr<comm::ProcessGroup> pg) {
      testing::BoostedCase boosted = testing::boost_case(pg, one);
      ASSERT_NE(boosted.model, nullptr);
      auto ctx = std::move(*core::Context::create(core::Device::cpu()));
      for (int i = 0; i < c.micro; ++i) {
        ASSERT_TRUE(boosted.model->set_documents(mbs[i].documents).ok());
        ref_loss += weights[i] * testing::booster_micro_step(*ctx, *boosted.booster, *boosted.model,
                                                             mbs[i], static_cast<float>(weights[i]));
      }
      auto r = boosted.booster->step({.max_norm = kMaxNorm});
      ASSERT_TRUE(r.ok()) << r.status();
      ref_norm = r->grad_norm;
    });
    ASSERT_GT(ref_norm, 0.0f);
    testing::run_ranks(c.world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
      testing::BoostedCase boosted = testing::boost_case(pg, c);
      ASSERT_NE(boosted.model, nullptr);
      auto ctx = std::move(*core::Context::create(core::Device::cpu()));
      PipelineStepOptions o;
      o.weights = {1.0, 2.0};
      auto bad = execute_pipeline(*ctx, *boosted.booster, *boosted.model, mbs, o);
      EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
      o.weights = weights;
      auto r = execute_pipeline(*ctx, *boosted.booster, *boosted.model, mbs, o);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_LE(std::abs(r->loss - ref_loss), kRelTol * ref_loss) << "rank " << rank << ": " << r->loss
                                                                  << " vs " << ref_loss;
      auto step = boosted.booster->step({.max_norm = kMaxNorm});
      ASSERT_TRUE(step.ok()) << step.status();
      EXPECT_LE(std::abs(step->grad_norm - ref_norm), kRelTol * ref_norm)
          << "rank " << rank << ": " << step->grad_norm << " vs " << ref_norm;
    });
  }
}

// Generation through the stages: every stage gets the last stage's logits,
// equal to one process's (1F1B, interleaved, and with tp2 each
// tensor-parallel rank's columns of them).
TEST(Hybrid, PipelineLogitsEqualOneProcess) {
  for (const HybridCase& c : {HybridCase{Family::kGpt2, 2, 1, 0, 2},
                              HybridCase{Family::kLlama, 2, 1, 0, 2, 4, 2, false, 2, 4},
                              HybridCase{Family::kLlamaTied, 4, 2, 0, 2}}) {
    SCOPED_TRACE(case_name(c));
    auto ctx = std::move(*core::Context::create(core::Device::cpu()));
    auto ref = testing::materialized(declare_case_model(c), kSeed);
    const nn::MicroBatch mb = testing::micro_batch(0, 0, 0);
    auto tokens = *mb.tokens.narrow(0, 0, 1);  // [1, T]
    const int64_t T = tokens.dim(1), V = ref->padded_vocab_size();
    auto whole = ref->forward(*ctx, tokens);
    ASSERT_TRUE(whole.ok()) << whole.status();
    const float* expected = whole->output.data<float>();
    testing::run_ranks(c.world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
      testing::BoostedCase boosted = testing::boost_case(pg, c);
      ASSERT_NE(boosted.model, nullptr);
      nn::CausalLM* model = boosted.model.get();
      Booster& booster = *boosted.booster;
      auto rank_ctx = std::move(*core::Context::create(core::Device::cpu()));
      absl::StatusOr<core::Tensor> logits = pipeline_logits(*rank_ctx, booster, *model, tokens);
      ASSERT_TRUE(logits.ok()) << logits.status();
      const int64_t columns = V / c.tp, first = model->tensor_parallel().rank() * columns;
      ASSERT_EQ(logits->shape(), core::Shape({1, T, columns}));
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t j = 0; j < columns; ++j) {
          const float want = expected[t * V + first + j];
          ASSERT_NEAR(logits->data<float>()[t * columns + j], want,
                      kRelTol * (1.0 + std::fabs(want)))
              << "rank " << rank << " position " << t << " column " << first + j;
        }
      }
      // The last position alone: the same row, and nothing else sent.
      absl::StatusOr<core::Tensor> last =
          pipeline_logits(*rank_ctx, booster, *model, tokens, /*last_position_only=*/true);
      ASSERT_TRUE(last.ok()) << last.status();
      ASSERT_EQ(last->shape(), core::Shape({1, 1, columns}));
      for (int64_t j = 0; j < columns; ++j) {
        ASSERT_EQ(last->data<float>()[j], logits->data<float>()[(T - 1) * columns + j])
            << "rank " << rank << " column " << first + j;
      }
    });
  }
}

// Generation with a split sequence: the tokens padded to a multiple of the
// ranks (3 -> 4) give the last real position's logits of one process, on
// every rank: split_gather (tp2, each rank its vocabulary columns) and
// all_to_all (sp2, the owner's row broadcast), alone and through pipeline
// stages (pp2 x sp2, pp2 x tp2 split_gather).
TEST(Hybrid, SplitSequenceLastLogitsEqualOneProcess) {
  for (const HybridCase& c : {HybridCase{Family::kGpt2, 2, 2, 0, 1, 2, 2, true},
                              HybridCase{Family::kLlama, 2, 1, 0, 1, 2, 2, false, 1, kMicro, 2},
                              HybridCase{Family::kLlama, 4, 1, 0, 2, 2, 2, false, 1, kMicro, 2},
                              HybridCase{Family::kGpt2, 4, 2, 0, 2, 2, 2, true}}) {
    SCOPED_TRACE(case_name(c));
    auto ctx = std::move(*core::Context::create(core::Device::cpu()));
    auto ref = testing::materialized(declare_case_model(c), kSeed);
    const nn::MicroBatch mb = testing::micro_batch(0, 0, 0);
    const int64_t T = 3, V = ref->padded_vocab_size();
    ASSERT_GT(mb.tokens.dim(1), T);
    auto tokens = *core::Tensor::empty({1, T}, DType::kI32, Stream::cpu());
    std::copy(mb.tokens.data<int32_t>(), mb.tokens.data<int32_t>() + T, tokens.data<int32_t>());
    auto whole = ref->forward(*ctx, tokens);
    ASSERT_TRUE(whole.ok()) << whole.status();
    const float* expected = whole->output.data<float>() + (T - 1) * V;
    testing::run_ranks(c.world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
      testing::BoostedCase boosted = testing::boost_case(pg, c);
      ASSERT_NE(boosted.model, nullptr);
      nn::CausalLM* model = boosted.model.get();
      Booster& booster = *boosted.booster;
      auto rank_ctx = std::move(*core::Context::create(core::Device::cpu()));
      const nn::LogitsFn forward = [&](const core::Tensor& t) -> absl::StatusOr<core::Tensor> {
        if (c.pp > 1) return pipeline_logits(*rank_ctx, booster, *model, t);
        COLOSSAL_ASSIGN_OR_RETURN(nn::ForwardResult out, booster.forward(*rank_ctx, *model, t));
        return out.output;
      };
      absl::StatusOr<core::Tensor> last =
          nn::last_position_logits(*rank_ctx, *model, forward, tokens);
      ASSERT_TRUE(last.ok()) << last.status();
      const int64_t columns = V / c.tp, first = model->tensor_parallel().rank() * columns;
      ASSERT_EQ(last->shape(), core::Shape({1, columns}));
      for (int64_t j = 0; j < columns; ++j) {
        ASSERT_NEAR(last->data<float>()[j], expected[first + j],
                    kRelTol * (1.0 + std::fabs(expected[first + j])))
            << "rank " << rank << " column " << first + j;
      }
    });
  }
}

// all_to_all splits no weights, so boost asks the model: a whole model (which
// would compute every position on every rank) is refused.
TEST(Hybrid, AllToAllRefusesAModelNotDeclaredForIt) {
  testing::run_ranks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    HybridParallelOptions o;
    o.sp_size = 2;
    auto p = HybridParallelPlugin::create(pg, o);
    ASSERT_TRUE(p.ok()) << p.status();
    auto model = testing::declare_model(Family::kLlama);
    Booster booster(std::move(*p));
    ASSERT_TRUE(booster.materialize(model->store(), kSeed, Stream::cpu()).ok());
    auto adam = testing::make_adam(*model);
    const absl::Status st = booster.boost(*model, model->store(), *adam);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  });
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
