// The gemini plugin on the CPU (ranks as threads over comm/builtin):
//   * chunk layout: sizes, alignment, outsized parameters, a small model kept
//     whole, bad orders;
//   * equivalence: every placement (cuda, cpu, static with offload and
//     partial sharding, auto under a capped stand-in device) at world sizes
//     1, 2 and 4, 20 steps of 2 micro-batches with clipping, against one
//     process on the union of the ranks' data (nn::Adam), fp32 tolerance
//     1e-5 (as low_level_zero's); with activation checkpointing and no_sync;
//     the same for a tiny Llama with an untied and a tied head (the tied head
//     reads embed_tokens outside its module: the fetcher) at 1 and 2 ranks;
//     chunks all-gathered ahead of their use (max_prefetch) beside the
//     reductions left in flight, on either tier, under eviction and with
//     recomputation;
//   * auto: fewer chunks on the device than the model has, eviction when
//     non-model memory grows, the notice said once;
//   * errors: cuda placement larger than the device, a divergent access order
//     (every rank stops, naming the parameters); an unused parameter trains;
//   * checkpoints: 4 ranks -> 2 -> one process's nn::Adam -> gemini 1, the
//     states equal; a resumed run equals an uninterrupted one.
#include "parallel/gemini/gemini_plugin.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/context/context.h"
#include "core/status/status.h"
#include "nn/layers/linear.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/optim/adam.h"
#include "nn/optim/module_params.h"
#include "nn/optim/param.h"
#include "parallel/booster/booster.h"
#include "parallel/ddp/ddp_test_util.h"
#include "parallel/gemini/chunk_layout.h"
#include "parallel/gemini/gemini_test_util.h"
#include "parallel/zero/zero_test_util.h"

namespace colossal::parallel {
namespace {

using core::DType;
using core::Stream;
using namespace ::colossal::parallel::testing;  // NOLINT: test helpers

// ---- chunk layout ----

nn::ParameterTable table_of(const std::vector<int64_t>& sizes) {
  nn::ParameterTable t;
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(t.add(absl::StrCat("p", i), {sizes[i]}, DType::kF32).ok());
  }
  return t;
}

TEST(ChunkLayout, PacksWithoutSplittingAndAligns) {
  const nn::ParameterTable t = table_of({10, 7, 30, 3, 22, 9, 16, 5});
  ChunkSearchOptions o;
  o.min_chunk_size_m = 0;
  o.search_range_m = 64.0 / (1 << 20);
  o.hidden_dim = 4;
  o.world = 2;
  auto layout = plan_chunks(t, table_order(t), o);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->align, 4);
  EXPECT_GT(layout->chunks.size(), 1u);
  std::vector<int> seen(t.size(), 0);
  for (const ChunkSpec& c : layout->chunks) {
    EXPECT_EQ(c.numel % (2 * 4), 0);
    EXPECT_LE(c.used, c.numel);
    for (size_t i = 0; i < c.params.size(); ++i) {
      EXPECT_EQ(c.offsets[i] % 4, 0);
      EXPECT_LE(c.offsets[i] + t.entries()[c.params[i]].numel(), c.numel);
      ++seen[c.params[i]];
    }
  }
  for (int s : seen) EXPECT_EQ(s, 1);
  // The chosen size wastes no more than the smallest candidate.
  ChunkSearchOptions narrow = o;
  narrow.search_range_m = 0;
  EXPECT_LE(layout->wasted(), plan_chunks(t, table_order(t), narrow)->wasted());
}

TEST(ChunkLayout, OutsizedParameterGetsItsOwnChunk) {
  std::vector<int64_t> sizes(20, 8);
  sizes[5] = 4000;
  const nn::ParameterTable t = table_of(sizes);
  ChunkSearchOptions o;
  o.min_chunk_size_m = 0;
  o.search_range_m = 32.0 / (1 << 20);
  o.hidden_dim = 8;
  auto layout = plan_chunks(t, table_order(t), o);
  ASSERT_TRUE(layout.ok());
  const ChunkSpec& own = layout->chunks[layout->chunk_of[5]];
  EXPECT_TRUE(own.own);
  EXPECT_EQ(own.params.size(), 1u);
  EXPECT_LT(layout->chunk_size, 4000);
}

TEST(ChunkLayout, SmallModelIsOneWholeChunkAndBadOrdersFail) {
  const nn::ParameterTable t = table_of({10, 7, 30});
  auto layout = plan_chunks(t, table_order(t), ChunkSearchOptions{});
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->chunks.size(), 1u);
  EXPECT_TRUE(layout->chunks[0].keep_whole);
  EXPECT_FALSE(plan_chunks(t, {0, 1}, ChunkSearchOptions{}).ok());
  EXPECT_FALSE(plan_chunks(t, {0, 1, 1}, ChunkSearchOptions{}).ok());
}

// ---- training ----

void expect_equal_to_reference(const std::vector<GeminiRun>& runs, const EquivalenceRun& ref,
                               Family family = Family::kGpt2) {
  const int W = static_cast<int>(runs.size());
  const auto key_bias = key_bias_ranges(declare_zero_model(family)->table());
  for (int s = 0; s < kSteps; ++s) {
    double loss = 0;
    for (const GeminiRun& r : runs) loss += r.run.loss.at(s);
    loss /= W;
    EXPECT_NEAR(loss, ref.loss[s], kRelTol * std::abs(ref.loss[s])) << "step " << s;
    for (const GeminiRun& r : runs) {
      EXPECT_NEAR(r.run.grad_norm[s], ref.grad_norm[s], 1e-4 * ref.grad_norm[s]) << "step " << s;
      EXPECT_EQ(r.run.clipped[s], ref.clipped[s]) << "step " << s;
    }
  }
  for (const GeminiRun& r : runs) {
    auto [d, inside] = rel_diff_outside(r.run.weights, ref.weights, key_bias);
    EXPECT_LE(d, kRelTol);
    EXPECT_EQ(r.run.weights, runs[0].run.weights);  // every rank gathers the same model
  }
  EXPECT_TRUE(std::any_of(ref.clipped.begin(), ref.clipped.end(), [](char c) { return c; }));
}

struct Case {
  std::string placement;
  int world;
  double checkpoint_ratio = 0.0;
  bool no_sync = false;
  Family family = Family::kGpt2;
  int max_prefetch = 0;  // > 0: chunks all-gathered ahead of their use
};

class GeminiEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(GeminiEquivalence, MatchesOneProcessOnTheUnion) {
  const Case c = GetParam();
  RunSpec spec;
  spec.options = small_chunks(c.placement);
  if (c.placement == "static") {
    spec.options.offload_optim_frac = 0.5;
    spec.options.offload_param_frac = 0.5;
    spec.options.shard_param_frac = 0.5;
  }
  if (c.placement == "auto") spec.options.device_capacity_bytes = auto_capacity_bytes(c.family);
  spec.family = c.family;
  spec.checkpoint_ratio = c.checkpoint_ratio;
  spec.no_sync = c.no_sync;
  spec.options.max_prefetch = c.max_prefetch;
  const EquivalenceRun ref = adam_reference_run(c.world, c.family);
  std::vector<GeminiRun> runs(c.world);
  run_ranks(c.world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    runs[rank] = gemini_rank_run(pg, spec);
  });
  ASSERT_EQ(runs[0].run.loss.size(), static_cast<size_t>(kSteps));
  EXPECT_GT(runs[0].chunks, 2);
  expect_equal_to_reference(runs, ref, c.family);
  std::cout << family_name(c.family) << ", " << c.placement << ", world " << c.world << ": "
            << runs[0].chunks << " chunks, " << runs[0].on_device << " on the device\n";
  if (c.placement == "cuda") {
    EXPECT_EQ(runs[0].on_device, runs[0].chunks);
  }
  if (c.placement == "cpu") {
    EXPECT_EQ(runs[0].on_device, 0);
  }
  for (const GeminiRun& r : runs) {  // ahead only when asked, on every rank
    if (c.max_prefetch > 0) {
      EXPECT_GT(r.gathers_ahead, 0);
    } else {
      EXPECT_EQ(r.gathers_ahead, 0);
    }
  }
  if (c.placement == "static") {
    EXPECT_GT(runs[0].on_device, 0);
    EXPECT_LT(runs[0].on_device, runs[0].chunks);
  }
  if (c.placement == "auto") {  // the cap holds some chunks, not all
    EXPECT_GT(runs[0].on_device, 0);
    EXPECT_LT(runs[0].on_device, runs[0].chunks);
  }
}

std::vector<Case> equivalence_cases() {
  std::vector<Case> out = {
      Case{"cuda", 1}, Case{"cuda", 2}, Case{"cuda", 4}, Case{"cpu", 1},
      Case{"cpu", 2}, Case{"cpu", 4}, Case{"static", 1}, Case{"static", 2},
      Case{"static", 4},
      Case{"auto", 1}, Case{"auto", 2}, Case{"auto", 4},
      Case{"cuda", 2, /*checkpoint_ratio=*/1.0}, Case{"auto", 2, 0.5},
      Case{"cpu", 2, 0.0, /*no_sync=*/true}};
  for (const char* placement : {"cuda", "cpu", "static", "auto"}) {
    for (const auto& [world, family] : {std::pair{1, Family::kLlamaTied}, std::pair{2, Family::kLlama},
                                        std::pair{2, Family::kLlamaTied}}) {
      out.push_back(Case{placement, world, 0.0, false, family});
    }
  }
  out.push_back(Case{"cuda", 2, /*checkpoint_ratio=*/1.0, false, Family::kLlamaTied});
  // Gathers issued ahead of use, beside the reductions left in flight: on the
  // device tier, under eviction (auto), with recomputation, on the host tier.
  out.push_back(Case{"cuda", 4, 0.0, false, Family::kGpt2, /*max_prefetch=*/2});
  out.push_back(Case{"auto", 2, 0.5, false, Family::kGpt2, 3});
  out.push_back(Case{"static", 2, 0.0, false, Family::kLlamaTied, 2});
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    Placements, GeminiEquivalence, ::testing::ValuesIn(equivalence_cases()),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat(info.param.placement, "_w", info.param.world,
                          info.param.checkpoint_ratio > 0 ? "_ckpt" : "",
                          info.param.no_sync ? "_nosync" : "",
                          family_suffix(info.param.family),
                          info.param.max_prefetch > 0 ? absl::StrCat("_prefetch", info.param.max_prefetch)
                                                      : "");
    });

TEST(Gemini, AutoEvictsWhenNonModelMemoryGrowsAndSaysSoOnce) {
  std::atomic<int64_t> non_model{0};
  std::atomic<int> notices{0};
  RunSpec spec;
  spec.options = small_chunks("auto");
  spec.options.device_capacity_bytes = 64 << 10;  // every chunk fits at first
  spec.options.non_model_bytes = [&] { return non_model.load(); };
  spec.options.notice = [&](const std::string& m) {
    EXPECT_NE(m.find("gemini auto"), std::string::npos) << m;
    ++notices;
  };
  spec.steps = 3;
  GeminiRun first;
  run_ranks(1, [&](int, std::shared_ptr<comm::ProcessGroup> pg) { first = gemini_rank_run(pg, spec); });
  EXPECT_EQ(first.on_device, first.chunks);
  EXPECT_EQ(first.evictions, 0);
  EXPECT_EQ(notices.load(), 0);
  // Non-model memory appears after the warm-up: chunks must leave.
  spec.steps = kSteps;
  int64_t calls = 0;
  spec.options.non_model_bytes = [&] { return ++calls > 200 ? int64_t{40} << 10 : int64_t{0}; };
  const EquivalenceRun ref = adam_reference_run(1);
  std::vector<GeminiRun> runs(1);
  run_ranks(1, [&](int, std::shared_ptr<comm::ProcessGroup> pg) { runs[0] = gemini_rank_run(pg, spec); });
  EXPECT_GT(runs[0].evictions, 0);
  EXPECT_LT(runs[0].on_device, runs[0].chunks);
  EXPECT_EQ(notices.load(), 1);
  expect_equal_to_reference(runs, ref);
}

TEST(Gemini, CudaPlacementLargerThanTheDeviceFailsClearly) {
  run_ranks(1, [&](int, std::shared_ptr<comm::ProcessGroup> pg) {
    GeminiOptions o = small_chunks("cuda");
    o.device_capacity_bytes = 1024;
    auto plugin = *GeminiPlugin::create(pg, o);
    auto model = *nn::GPT2::declare(zero_config(), DType::kF32);
    const absl::Status st = plugin->materialize(model->store(), kSeed, Stream::cpu());
    EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(st.message().find("\"auto\" or \"cpu\""), std::string::npos) << st;
  });
}

TEST(Gemini, BadOptionsNameTheKey) {
  GeminiOptions o;
  o.placement_policy = "gpu";
  EXPECT_NE(validate_gemini_options(o).message().find("placement_policy"), std::string::npos);
  o = GeminiOptions{};
  o.offload_param_frac = 0.5;
  EXPECT_NE(validate_gemini_options(o).message().find("offload_param_frac"), std::string::npos);
}

// One step of Branches; the status of the first failure.
absl::Status branches_step(std::shared_ptr<comm::ProcessGroup> pg, bool use_b) {
  auto ctx = std::move(*core::Context::create(core::Device::cpu()));
  Branches net(use_b);
  nn::ParameterTable table;
  COLOSSAL_RETURN_IF_ERROR(net.declare(table));
  nn::ParameterStore store = nn::ParameterStore::declare(table);
  COLOSSAL_RETURN_IF_ERROR(net.bind(store));
  GeminiOptions o = small_chunks("cuda");
  o.chunks.search_range_m = 0;
  COLOSSAL_ASSIGN_OR_RETURN(auto plugin, GeminiPlugin::create(pg, o));
  Booster booster(std::move(plugin));
  COLOSSAL_RETURN_IF_ERROR(booster.materialize(store, 7, Stream::cpu()));
  nn::AdamOptions ao;
  COLOSSAL_ASSIGN_OR_RETURN(auto adam, nn::make_adamw({nn::ParamGroup{nn::declared_params(table)}}, ao));
  COLOSSAL_RETURN_IF_ERROR(booster.boost(net, store, *adam));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor x, core::Tensor::empty({2, 4}, DType::kF32, Stream::cpu()));
  for (int i = 0; i < 8; ++i) x.data<float>()[i] = 0.25f * static_cast<float>(i + 1);
  COLOSSAL_ASSIGN_OR_RETURN(nn::ForwardResult out, booster.forward(*ctx, net, x));
  COLOSSAL_RETURN_IF_ERROR(booster.backward(*ctx, net, *out.saved, out.output).status());
  return booster.step({}).status();
}

// zero_grad writes nothing (the next reduction overwrites the gradient
// shards, so it need not wait for the host updates): a step no backward
// preceded must still see zero gradients, not the last backward's.
absl::StatusOr<std::pair<float, float>> norms_with_and_without_backward(
    std::shared_ptr<comm::ProcessGroup> pg, const std::string& placement) {
  auto ctx = std::move(*core::Context::create(core::Device::cpu()));
  Branches net(/*use_b=*/true);
  nn::ParameterTable table;
  COLOSSAL_RETURN_IF_ERROR(net.declare(table));
  nn::ParameterStore store = nn::ParameterStore::declare(table);
  COLOSSAL_RETURN_IF_ERROR(net.bind(store));
  GeminiOptions o = small_chunks(placement);
  o.chunks.search_range_m = 0;
  COLOSSAL_ASSIGN_OR_RETURN(auto plugin, GeminiPlugin::create(pg, o));
  Booster booster(std::move(plugin));
  COLOSSAL_RETURN_IF_ERROR(booster.materialize(store, 7, Stream::cpu()));
  COLOSSAL_ASSIGN_OR_RETURN(auto adam, nn::make_adamw({nn::ParamGroup{nn::declared_params(table)}}, {}));
  COLOSSAL_RETURN_IF_ERROR(booster.boost(net, store, *adam));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor x, core::Tensor::empty({2, 4}, DType::kF32, Stream::cpu()));
  for (int i = 0; i < 8; ++i) x.data<float>()[i] = 0.25f * static_cast<float>(i + 1);
  COLOSSAL_ASSIGN_OR_RETURN(nn::ForwardResult out, booster.forward(*ctx, net, x));
  COLOSSAL_RETURN_IF_ERROR(booster.backward(*ctx, net, *out.saved, out.output).status());
  COLOSSAL_ASSIGN_OR_RETURN(nn::MixedPrecisionStepResult first, booster.step({}));
  COLOSSAL_RETURN_IF_ERROR(booster.zero_grad());
  COLOSSAL_ASSIGN_OR_RETURN(nn::MixedPrecisionStepResult second, booster.step({}));
  return std::make_pair(first.grad_norm, second.grad_norm);
}

TEST(Gemini, StepWithoutBackwardSeesZeroGradients) {
  for (const char* placement : {"cuda", "cpu"}) {
    for (int world : {1, 2}) {
      std::vector<absl::StatusOr<std::pair<float, float>>> got(world, absl::UnknownError("not run"));
      run_ranks(world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
        got[rank] = norms_with_and_without_backward(pg, placement);
      });
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(got[r].ok()) << placement << " w" << world << ": " << got[r].status();
        EXPECT_GT(got[r]->first, 0.0f) << placement << " w" << world;
        EXPECT_EQ(got[r]->second, 0.0f) << placement << " w" << world;
      }
    }
  }
}

TEST(Gemini, UnusedParameterGetsAZeroGradient) {
  std::vector<absl::Status> status(2);
  run_ranks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    status[rank] = branches_step(pg, /*use_b=*/false);
  });
  EXPECT_TRUE(status[0].ok()) << status[0];
  EXPECT_TRUE(status[1].ok()) << status[1];
}

TEST(Gemini, DivergentAccessOrderStopsEveryRankNamingTheParameter) {
  std::vector<absl::Status> status(2);
  run_ranks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    status[rank] = branches_step(pg, /*use_b=*/rank == 1);
  });
  for (const absl::Status& s : status) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("different orders"), std::string::npos) << s;
    EXPECT_NE(s.message().find("net.b."), std::string::npos) << s;
  }
}

// ---- checkpoints ----

void expect_same_state(const nn::OptimizerStateDict& a, const nn::OptimizerStateDict& b) {
  EXPECT_EQ(a.meta, b.meta);
  expect_same_tensors(a, b);
}

TEST(Gemini, CheckpointMovesBetweenWorldSizesAndDdpAndResumesExactly) {
  // 4 ranks train 5 steps and save.
  RunSpec spec;
  spec.options = small_chunks("cuda");
  spec.steps = 5;
  nn::ParameterStore saved4;
  std::vector<GeminiRun> four(4);
  run_ranks(4, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    RunSpec mine = spec;
    if (rank == 0) mine.save_model = &saved4;
    four[rank] = gemini_rank_run(pg, mine);
  });
  // 2 ranks load it; with no steps their saves equal what they loaded.
  RunSpec load = spec;
  load.steps = 0;
  load.load_model = &saved4;
  load.load_optimizer = &four[0].optimizer_state;
  std::vector<GeminiRun> two(2);
  run_ranks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) { two[rank] = gemini_rank_run(pg, load); });
  EXPECT_EQ(two[0].run.weights, four[0].run.weights);
  expect_same_state(two[0].optimizer_state, four[0].optimizer_state);
  // One process's nn::Adam (ddp's optimizer) loads it and saves the same.
  auto model = make_zero_model(kSeed);
  auto adam = make_adam(*model);
  ASSERT_TRUE(adam->load_state_dict(two[0].optimizer_state).ok());
  auto again = adam->state_dict();
  ASSERT_TRUE(again.ok());
  nn::OptimizerStateDict copied;
  copied.meta = again->meta;
  for (const auto& [k, t] : again->tensors) copied.tensors[k] = *t.to(core::Device::cpu(), Stream::cpu());
  expect_same_state(copied, four[0].optimizer_state);
  // ... and back into gemini on one rank.
  load.load_optimizer = &copied;
  std::vector<GeminiRun> one(1);
  run_ranks(1, [&](int, std::shared_ptr<comm::ProcessGroup> pg) { one[0] = gemini_rank_run(pg, load); });
  expect_same_state(one[0].optimizer_state, four[0].optimizer_state);
  EXPECT_EQ(one[0].run.weights, four[0].run.weights);

  // Resume: 2 ranks, 4 steps + save + 4 resumed steps == 8 uninterrupted.
  RunSpec whole = spec;
  whole.steps = 8;
  std::vector<GeminiRun> straight(2), first(2), second(2);
  run_ranks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) { straight[rank] = gemini_rank_run(pg, whole); });
  nn::ParameterStore saved2;
  RunSpec a = spec;
  a.steps = 4;
  run_ranks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    RunSpec mine = a;
    if (rank == 0) mine.save_model = &saved2;
    first[rank] = gemini_rank_run(pg, mine);
  });
  RunSpec b = spec;
  b.first_step = 4;
  b.steps = 4;
  b.load_model = &saved2;
  b.load_optimizer = &first[0].optimizer_state;
  run_ranks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) { second[rank] = gemini_rank_run(pg, b); });
  EXPECT_EQ(second[0].run.weights, straight[0].run.weights);
  for (int s = 0; s < 4; ++s) EXPECT_EQ(second[0].run.loss[s], straight[0].run.loss[4 + s]);
  expect_same_state(second[0].optimizer_state, straight[0].optimizer_state);
}

}  // namespace
}  // namespace colossal::parallel
