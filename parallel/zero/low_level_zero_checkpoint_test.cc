// Checkpoints of the low_level_zero plugin through the Booster (CPU, builtin
// backend, ranks as threads; the tiny GPT-2 of zero_test_util.h, whose slices
// are padded and cut parameters; AdamW with decay groups; clipping on):
//   * the gathered optimizer_state_dict is one process's nn::Adam state_dict
//     after the same training: same keys, meta and step counts, moments within
//     kStateTol (the gradients differ by summation order); every rank gets the
//     same dict (asked for one rank, only that one gets the tensors, the
//     others the meta); it holds the ranks' shards bitwise; nn::Adam loads it;
//   * resuming at the same world size (k steps, save, a fresh model,
//     optimizer and plugin, load, m steps) equals k + m straight steps
//     bitwise, weights and state, whichever of weights and state loads first;
//   * resuming at another world size (2 -> 3, 3 -> 2), from one process's
//     nn::Adam state into the plugin and from the plugin's into nn::Adam,
//     matches one process training on the same data within kRelTol;
//   * errors: before boost, another optimizer, an SGD state, a missing
//     parameter, differing step counts; nothing changes on an error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/context/context.h"
#include "nn/optim/sgd.h"
#include "nn/optim/state_dict.h"
#include "nn/train/train_step.h"
#include "parallel/booster/booster.h"
#include "parallel/ddp/ddp_test_util.h"
#include "parallel/zero/low_level_zero_plugin.h"
#include "parallel/zero/zero_test_util.h"

namespace colossal::parallel {
namespace {

using core::DType;
using core::Stream;
using core::Tensor;
using namespace ::colossal::parallel::testing;  // NOLINT: test helpers

constexpr int kSaveAt = 6;  // steps before the checkpoint
constexpr int kMore = 4;    // steps after it
// Moments against one process's nn::Adam: max |a - b| / max |b| per tensor.
// The ranks' gradients are the same sums in another order (fp32 rounding,
// ~1e-7 relative), which the moments carry through the steps (measured: up
// to 1.4e-6 after 6 steps).
constexpr double kStateTol = 1e-5;

// One rank's model, AdamW and Booster with a low_level_zero plugin (buckets
// of 1 KiB: several).
struct Rank {
  std::unique_ptr<core::Context> ctx;
  std::unique_ptr<nn::GPT2> model;
  std::unique_ptr<nn::Adam> adam;
  LowLevelZeroPlugin* zero = nullptr;
  std::unique_ptr<Booster> booster;
};

Rank boosted_rank(std::shared_ptr<comm::ProcessGroup> pg, int stage, uint64_t seed) {
  Rank r;
  r.ctx = std::move(*core::Context::create(core::Device::cpu()));
  r.model = make_zero_model(seed);
  r.adam = make_adam(*r.model);
  LowLevelZeroOptions o;
  o.stage = stage;
  o.reduce_bucket_size_in_m = 1.0 / 4096;
  auto plugin = LowLevelZeroPlugin::create(std::move(pg), o);
  EXPECT_TRUE(plugin.ok()) << plugin.status();
  r.zero = plugin->get();
  r.booster = std::make_unique<Booster>(std::move(*plugin));
  const absl::Status s = r.booster->boost(*r.model, r.model->store(), *r.adam);
  EXPECT_TRUE(s.ok()) << s;
  return r;
}

// Steps [from, to) on this rank's micro-batches, as low_level_zero_test's
// rank_run: stage 1 reduces the last micro-batch only (no_sync), stage 2 all.
void train(Rank& r, int rank, int stage, int from, int to) {
  for (int step = from; step < to; ++step) {
    ASSERT_TRUE(r.booster->zero_grad().ok());
    for (int i = 0; i < kMicro; ++i) {
      std::optional<Booster::NoSync> no_sync;
      if (stage == 1 && i + 1 < kMicro) no_sync.emplace(r.booster->no_sync());
      booster_micro_step(*r.ctx, *r.booster, *r.model, micro_batch(step, rank, i), 1.0f / kMicro);
    }
    auto res = r.booster->step({.max_norm = kMaxNorm});
    ASSERT_TRUE(res.ok()) << res.status();
  }
  // The tests read the weights directly: the last step's pieces land first.
  ASSERT_TRUE(r.booster->sync_weights().ok());
}

// One process, steps [from, to) on the union of `world` ranks' micro-batches.
void train_one_process(nn::GPT2& model, nn::Optimizer& optimizer, int world, int from, int to) {
  auto ctx = std::move(*core::Context::create(core::Device::cpu()));
  for (int step = from; step < to; ++step) {
    std::vector<nn::MicroBatch> mbs;
    for (int r = 0; r < world; ++r) {
      for (int i = 0; i < kMicro; ++i) mbs.push_back(micro_batch(step, r, i));
    }
    nn::TrainStepOptions o;
    o.max_norm = kMaxNorm;
    auto res = nn::train_step(*ctx, model, optimizer, zero_config().vocab_size, mbs, o);
    ASSERT_TRUE(res.ok()) << res.status();
  }
}

std::vector<float> weights(nn::GPT2& model) {
  return floats_of(model.store().flat_values(DType::kF32));
}
void set_weights(nn::GPT2& model, const std::vector<float>& w) {
  Tensor v = model.store().flat_values(DType::kF32);
  ASSERT_EQ(static_cast<size_t>(v.numel()), w.size());
  std::memcpy(v.data<float>(), w.data(), sizeof(float) * w.size());
}

// A deep copy (nn::Adam's state_dict holds views of its memory).
nn::OptimizerStateDict copy_of(const nn::OptimizerStateDict& sd) {
  nn::OptimizerStateDict out;
  out.meta = sd.meta;
  for (const auto& [key, t] : sd.tensors) {
    Tensor c = *Tensor::empty(t.shape(), t.dtype(), Stream::cpu());
    EXPECT_TRUE(c.copy_from(t, Stream::cpu()).ok());
    out.tensors[key] = std::move(c);
  }
  return out;
}

bool bitwise_equal(const nn::OptimizerStateDict& a, const nn::OptimizerStateDict& b) {
  if (!(a.meta == b.meta) || a.tensors.size() != b.tensors.size()) return false;
  for (const auto& [key, t] : a.tensors) {
    const auto it = b.tensors.find(key);
    if (it == b.tensors.end() || it->second.dtype() != t.dtype() ||
        it->second.shape() != t.shape() ||
        std::memcmp(it->second.raw_data(), t.raw_data(), t.nbytes()) != 0) {
      return false;
    }
  }
  return true;
}

// Worst per-tensor max |a - b| / max |b| of state `name` over the parameters.
double moment_diff(const nn::OptimizerStateDict& a, const nn::OptimizerStateDict& ref,
                   const std::string& name) {
  double worst = 0;
  for (const nn::GroupState& g : ref.meta.groups) {
    for (const std::string& p : g.params) {
      const std::string key = nn::state_key(p, name);
      worst =
          std::max(worst, rel_diff(floats_of(a.tensors.at(key)), floats_of(ref.tensors.at(key))));
    }
  }
  return worst;
}

// State `name` of `sd` laid out as the model's flat buffer (gaps 0).
std::vector<float> flat_state(const nn::OptimizerStateDict& sd, const nn::ParameterTable& table,
                              const std::string& name) {
  std::vector<float> out(table.buffer_numel(DType::kF32), 0.0f);
  for (const auto& [key, t] : sd.tensors) {
    const std::string suffix = "." + name;
    if (key.size() <= suffix.size() ||
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string param = key.substr(6, key.size() - 6 - suffix.size());  // "state."
    const nn::ParameterEntry* e = table.find(param);
    if (e == nullptr) continue;
    std::memcpy(out.data() + e->offset, t.data<float>(), t.nbytes());
  }
  return out;
}

struct Case {
  int stage;
  int world;
};
std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return absl::StrCat("stage", info.param.stage, "_world", info.param.world);
}
const std::vector<Case> kCases = {{1, 2}, {1, 3}, {2, 2}, {2, 3}};

class StateDict : public ::testing::TestWithParam<Case> {};

TEST_P(StateDict, IsOneProcessAdamsStateDict) {
  const int W = GetParam().world, stage = GetParam().stage;
  auto ref_model = make_zero_model(kSeed);
  auto ref_adam = make_adam(*ref_model);
  train_one_process(*ref_model, *ref_adam, W, 0, kSaveAt);
  const nn::OptimizerStateDict ref = *ref_adam->state_dict();

  std::vector<nn::OptimizerStateDict> sds(W);
  std::vector<ZeroShard> shards(W);
  std::vector<std::vector<float>> exp_avg(W), exp_avg_sq(W);
  run_ranks(W, [&](int r, std::shared_ptr<comm::ProcessGroup> pg) {
    Rank x = boosted_rank(pg, stage, kSeed + r);
    train(x, r, stage, 0, kSaveAt);
    auto sd = x.booster->optimizer_state_dict();
    ASSERT_TRUE(sd.ok()) << sd.status();
    sds[r] = std::move(*sd);
    // For the writing rank only (the last): it gets the same dict, the
    // others the meta alone.
    auto to_last = x.booster->optimizer_state_dict(/*to_rank=*/W - 1);
    ASSERT_TRUE(to_last.ok()) << to_last.status();
    EXPECT_TRUE(to_last->meta == sds[r].meta) << "rank " << r;
    if (r == W - 1) {
      EXPECT_TRUE(bitwise_equal(*to_last, sds[r])) << "rank " << r;
    } else {
      EXPECT_TRUE(to_last->tensors.empty()) << "rank " << r << " got tensors it does not write";
    }
    shards[r] = x.zero->shard();
    exp_avg[r] = x.zero->exp_avg_shard();
    exp_avg_sq[r] = x.zero->exp_avg_sq_shard();
    EXPECT_EQ(x.zero->step_count(), kSaveAt);
  });
  for (int r = 0; r < W; ++r) {
    ASSERT_EQ(sds[r].tensors.size(), ref.tensors.size()) << "rank " << r;
    EXPECT_TRUE(bitwise_equal(sds[r], sds[0])) << "rank " << r << "'s dict differs from rank 0's";
  }
  const nn::OptimizerStateDict& sd = sds[0];
  EXPECT_TRUE(sd.meta == ref.meta);
  for (const auto& [key, t] : ref.tensors) {
    ASSERT_EQ(sd.tensors.count(key), 1u) << key;
    const Tensor& mine = sd.tensors.at(key);
    EXPECT_EQ(mine.dtype(), t.dtype()) << key;
    EXPECT_EQ(mine.shape(), t.shape()) << key;
    EXPECT_TRUE(mine.device().is_cpu()) << key;
    if (t.dtype() == DType::kI64) {
      EXPECT_EQ(*mine.data<int64_t>(), kSaveAt) << key;
    }
  }
  const double d1 = moment_diff(sd, ref, "exp_avg"), d2 = moment_diff(sd, ref, "exp_avg_sq");
  EXPECT_LE(d1, kStateTol);
  EXPECT_LE(d2, kStateTol);
  // The dict holds every rank's shard bitwise.
  const nn::ParameterTable& table = ref_model->store().table();
  const std::vector<float> fa = flat_state(sd, table, "exp_avg"),
                           fs = flat_state(sd, table, "exp_avg_sq");
  for (int r = 0; r < W; ++r) {
    EXPECT_EQ(std::vector<float>(fa.begin() + shards[r].begin, fa.begin() + shards[r].end),
              exp_avg[r])
        << "rank " << r;
    EXPECT_EQ(std::vector<float>(fs.begin() + shards[r].begin, fs.begin() + shards[r].end),
              exp_avg_sq[r])
        << "rank " << r;
  }
  // Its format is nn::Adam's: one process loads it.
  auto fresh_model = make_zero_model(kSeed);
  auto fresh = make_adam(*fresh_model);
  const absl::Status loaded = fresh->load_state_dict(sd);
  EXPECT_TRUE(loaded.ok()) << loaded;
  std::cout << "stage " << stage << ", world " << W << ": exp_avg rel diff " << d1
            << ", exp_avg_sq " << d2 << " (vs one process's nn::Adam)\n";
}

INSTANTIATE_TEST_SUITE_P(StagesAndWorlds, StateDict, ::testing::ValuesIn(kCases), case_name);

class Resume : public ::testing::TestWithParam<Case> {};

TEST_P(Resume, EqualsStraightTrainingBitwise) {
  const int W = GetParam().world, stage = GetParam().stage;
  std::vector<std::vector<float>> straight_w(W), resumed_w(W);
  std::vector<nn::OptimizerStateDict> straight_sd(W), resumed_sd(W);
  run_ranks(W, [&](int r, std::shared_ptr<comm::ProcessGroup> pg) {
    Rank x = boosted_rank(pg, stage, kSeed + r);
    train(x, r, stage, 0, kSaveAt + kMore);
    straight_w[r] = weights(*x.model);
    straight_sd[r] = *x.booster->optimizer_state_dict();
  });
  run_ranks(W, [&](int r, std::shared_ptr<comm::ProcessGroup> pg) {
    nn::OptimizerStateDict saved;
    std::vector<float> saved_w;
    {
      Rank x = boosted_rank(pg, stage, kSeed + r);
      train(x, r, stage, 0, kSaveAt);
      saved = *x.booster->optimizer_state_dict();
      saved_w = weights(*x.model);
    }
    // Other initial weights: everything must come from the checkpoint. Both
    // orders of loading weights and state (after boost) work.
    Rank y = boosted_rank(pg, stage, kSeed + 50 + r);
    const bool weights_first = r % 2 == 0;
    if (weights_first) set_weights(*y.model, saved_w);
    const absl::Status s = y.booster->load_optimizer_state_dict(saved);
    ASSERT_TRUE(s.ok()) << s;
    if (!weights_first) set_weights(*y.model, saved_w);
    EXPECT_EQ(y.zero->step_count(), kSaveAt);
    train(y, r, stage, kSaveAt, kSaveAt + kMore);
    resumed_w[r] = weights(*y.model);
    resumed_sd[r] = *y.booster->optimizer_state_dict();
  });
  for (int r = 0; r < W; ++r) {
    EXPECT_EQ(resumed_w[r], straight_w[r]) << "rank " << r;
    EXPECT_TRUE(bitwise_equal(resumed_sd[r], straight_sd[r])) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(StagesAndWorlds, Resume, ::testing::ValuesIn(kCases), case_name);

struct WorldChange {
  int stage;
  int from, to;  // world sizes before and after the checkpoint
};

class ResumeElsewhere : public ::testing::TestWithParam<WorldChange> {};

// Within kRelTol of `ref` (c_attn's key bias: near 0, see key_bias_ranges).
void expect_near_reference(const std::vector<float>& w, const std::vector<float>& ref,
                           const nn::ParameterTable& table, const std::string& what) {
  const auto [d, key_bias] = rel_diff_outside(w, ref, key_bias_ranges(table));
  EXPECT_LE(d, kRelTol) << what;
  EXPECT_LE(key_bias, 1e-3) << what;
  std::cout << what << ": weights rel diff " << d << " vs one process\n";
}

TEST_P(ResumeElsewhere, MatchesOneProcess) {
  const WorldChange c = GetParam();
  // One process: kSaveAt steps on `from` ranks' data, then kMore on `to` ranks'.
  auto ref_model = make_zero_model(kSeed);
  auto ref_adam = make_adam(*ref_model);
  train_one_process(*ref_model, *ref_adam, c.from, 0, kSaveAt);
  const nn::OptimizerStateDict ref_saved = copy_of(*ref_adam->state_dict());
  const std::vector<float> ref_saved_w = weights(*ref_model);
  train_one_process(*ref_model, *ref_adam, c.to, kSaveAt, kSaveAt + kMore);
  const std::vector<float> ref_w = weights(*ref_model);
  const nn::ParameterTable& table = ref_model->store().table();

  nn::OptimizerStateDict saved;
  std::vector<float> saved_w;
  run_ranks(c.from, [&](int r, std::shared_ptr<comm::ProcessGroup> pg) {
    Rank x = boosted_rank(pg, c.stage, kSeed + r);
    train(x, r, c.stage, 0, kSaveAt);
    auto sd = x.booster->optimizer_state_dict();
    ASSERT_TRUE(sd.ok()) << sd.status();
    if (r == 0) {
      saved = std::move(*sd);
      saved_w = weights(*x.model);
    }
  });
  // `to` ranks resume from the plugin's checkpoint and from one process's.
  for (bool from_adam : {false, true}) {
    std::vector<std::vector<float>> w(c.to);
    run_ranks(c.to, [&](int r, std::shared_ptr<comm::ProcessGroup> pg) {
      Rank y = boosted_rank(pg, c.stage, kSeed + 50 + r);
      set_weights(*y.model, from_adam ? ref_saved_w : saved_w);
      const absl::Status s = y.booster->load_optimizer_state_dict(from_adam ? ref_saved : saved);
      ASSERT_TRUE(s.ok()) << s;
      train(y, r, c.stage, kSaveAt, kSaveAt + kMore);
      w[r] = weights(*y.model);
    });
    for (int r = 1; r < c.to; ++r) EXPECT_EQ(w[r], w[0]) << "rank " << r;
    const std::string from = from_adam ? "nn::Adam" : absl::StrCat("world ", c.from);
    expect_near_reference(w[0], ref_w, table,
                          absl::StrCat("stage ", c.stage, ": ", from, " -> world ", c.to));
  }
  // One process's nn::Adam resumes from the plugin's checkpoint.
  auto model = make_zero_model(kSeed + 50);
  auto adam = make_adam(*model);
  set_weights(*model, saved_w);
  const absl::Status s = adam->load_state_dict(saved);
  ASSERT_TRUE(s.ok()) << s;
  train_one_process(*model, *adam, c.to, kSaveAt, kSaveAt + kMore);
  expect_near_reference(weights(*model), ref_w, table,
                        absl::StrCat("stage ", c.stage, ": world ", c.from, " -> nn::Adam"));
}

INSTANTIATE_TEST_SUITE_P(Worlds, ResumeElsewhere,
                         ::testing::Values(WorldChange{1, 2, 3}, WorldChange{2, 2, 3},
                                           WorldChange{2, 3, 2}, WorldChange{1, 4, 2},
                                           WorldChange{2, 4, 2}),
                         [](const ::testing::TestParamInfo<WorldChange>& info) {
                           return absl::StrCat("stage", info.param.stage, "_world", info.param.from,
                                               "_to_", info.param.to);
                         });

TEST(LowLevelZeroCheckpoint, Errors) {
  run_ranks(2, [](int r, std::shared_ptr<comm::ProcessGroup> pg) {
    {
      auto model = make_zero_model(kSeed);
      auto adam = make_adam(*model);
      Booster booster(*LowLevelZeroPlugin::create(pg));
      EXPECT_EQ(booster.optimizer_state_dict().status().code(),
                absl::StatusCode::kFailedPrecondition);
      EXPECT_EQ(booster.load_optimizer_state_dict({}).code(),
                absl::StatusCode::kFailedPrecondition);
    }
    Rank x = boosted_rank(pg, 2, kSeed);
    train(x, r, 2, 0, 2);
    const nn::OptimizerStateDict good = *x.booster->optimizer_state_dict();
    const std::vector<float> before = x.zero->exp_avg_shard();
    auto expect_invalid = [&](const nn::OptimizerStateDict& sd, const std::string& needle) {
      const absl::Status s = x.booster->load_optimizer_state_dict(sd);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_NE(s.message().find(needle), std::string::npos) << s;
      EXPECT_EQ(x.zero->exp_avg_shard(), before) << "changed on an error";
      EXPECT_EQ(x.zero->step_count(), 2);
    };
    // Another optimizer than the boosted one (over a twin: stage 2 took the
    // boosted model's gradients).
    auto twin = make_zero_model(kSeed);
    auto other = make_adam(*twin);
    EXPECT_EQ(x.booster->plugin().optimizer_state_dict(*other).status().code(),
              absl::StatusCode::kInvalidArgument);
    // An SGD state.
    auto sgd = make_sgd(*twin);
    expect_invalid(*sgd->state_dict(), "sgd");
    // A parameter missing (another model's state).
    nn::OptimizerStateDict missing = good;
    const std::string p = missing.meta.groups[0].params.back();
    missing.meta.groups[0].params.pop_back();
    for (const char* k : {"exp_avg", "exp_avg_sq", "step"})
      missing.tensors.erase(nn::state_key(p, k));
    expect_invalid(missing, "param_groups[0]");
    // Differing step counts: this plugin keeps one.
    nn::OptimizerStateDict steps = copy_of(good);
    *steps.tensors.at(nn::state_key(p, "step")).data<int64_t>() = 5;
    expect_invalid(steps, "one step count");
    // Still loads the good one.
    EXPECT_TRUE(x.booster->load_optimizer_state_dict(good).ok());
    // A saved master (a 16-bit run's dict) becomes the float32 weights, as
    // nn::Adam's load writes it, and the slice steps from it.
    nn::OptimizerStateDict with_master = copy_of(good);
    const nn::ParameterEntry* e = x.model->store().table().find(p);
    ASSERT_NE(e, nullptr);
    Tensor saved = *Tensor::empty(e->shape, DType::kF32, core::Stream::cpu());
    for (int64_t i = 0; i < saved.numel(); ++i) saved.data<float>()[i] = 0.25f + 0.001f * i;
    with_master.tensors[nn::state_key(p, "master")] = saved;
    ASSERT_TRUE(x.booster->load_optimizer_state_dict(with_master).ok());
    const float* w = x.model->store().flat_values(DType::kF32).data<float>() + e->offset;
    EXPECT_EQ(std::vector<float>(w, w + e->numel()),
              std::vector<float>(saved.data<float>(), saved.data<float>() + saved.numel()))
        << "rank " << r;
  });
}

}  // namespace
}  // namespace colossal::parallel
