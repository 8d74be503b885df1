#include "parallel/hybrid/hybrid_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/models/llama/llama.h"
#include "parallel/booster/pipeline.h"
#include "parallel/hybrid/hybrid_parallel_plugin.h"

namespace colossal::parallel::testing {

using core::DType;
using core::Stream;

std::unique_ptr<nn::CausalLM> declare_case_model(const HybridCase& c) {
  if (c.layers == 2 && c.heads == 2) return declare_model(c.family);
  if (c.family == Family::kGpt2) {
    nn::GPT2Config g = tiny_config();
    g.n_layer = c.layers;
    g.n_head = c.heads;
    g.n_embd = 4 * c.heads;
    return *nn::GPT2::declare(g, DType::kF32);
  }
  nn::LlamaConfig l = tiny_llama_config(c.family);
  l.num_hidden_layers = c.layers;
  return *nn::Llama::declare(l, DType::kF32);
}

std::string case_name(const HybridCase& c) {
  return absl::StrCat(family_name(c.family), "_world", c.world, "_tp", c.tp, "_pp", c.pp, "_zero",
                      c.zero_stage, c.layers == 2 ? "" : absl::StrCat("_layers", c.layers),
                      c.heads == 2 ? "" : absl::StrCat("_heads", c.heads), c.sp ? "_sp" : "",
                      c.chunks == 1 ? "" : absl::StrCat("_chunks", c.chunks),
                      c.micro == kMicro ? "" : absl::StrCat("_micro", c.micro),
                      c.a2a == 1 ? "" : absl::StrCat("_a2a", c.a2a), c.uneven ? "_uneven" : "");
}

std::vector<int64_t> layers_per_stage(const HybridCase& c) {
  if (!c.uneven) return {};
  std::vector<int64_t> per(int64_t{c.pp} * c.chunks, 1);
  per.back() = c.layers - static_cast<int64_t>(per.size()) + 1;
  return per;
}

absl::StatusOr<HybridCase> case_of(const std::string& name) {
  for (Family f : {Family::kGpt2, Family::kLlama, Family::kLlamaTied, Family::kQwen2}) {
    for (int world : {1, 2, 4, 8}) {
      for (int tp : {1, 2, 4}) {
        for (int pp : {1, 2, 4}) {
          for (int zero : {0, 1, 2}) {
            for (int layers : {2, 4, 6, 8}) {
              for (int heads : {2, 4}) {
                for (bool sp : {false, true}) {
                  for (int chunks : {1, 2, 3}) {
                    for (int micro : {2, 4, 8}) {
                      for (int a2a : {1, 2, 4}) {
                        for (bool uneven : {false, true}) {
                          const HybridCase c{f,     world,  tp,    zero, pp,    layers,
                                             heads, sp,     chunks, micro, a2a, uneven};
                          if (case_name(c) == name) return c;
                        }
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return absl::NotFoundError(absl::StrCat("no hybrid case \"", name, "\""));
}

HybridParallelOptions options_of(const HybridCase& c) {
  HybridParallelOptions o;
  o.tp_size = c.tp;
  o.pp_size = c.pp;
  o.num_model_chunks = c.chunks;
  o.layers_per_stage = layers_per_stage(c);
  o.sp_size = c.a2a;
  o.zero_stage = c.zero_stage;
  o.sequence_parallel = c.sp;
  return o;
}

BoostedCase boost_case(std::shared_ptr<comm::ProcessGroup> world, const HybridCase& c) {
  BoostedCase out;
  auto plugin = HybridParallelPlugin::create(world, options_of(c));
  EXPECT_TRUE(plugin.ok()) << plugin.status();
  if (!plugin.ok()) return out;
  auto declared = declare_case_model(c);
  auto split = (*plugin)->model_split(*declared);
  EXPECT_TRUE(split.ok()) << split.status();
  if (!split.ok()) return out;
  auto model = *declared->redeclare(DType::kF32, *split);
  auto booster = std::make_unique<Booster>(std::move(*plugin));
  absl::Status st = booster->materialize(model->store(), kSeed, Stream::cpu());
  EXPECT_TRUE(st.ok()) << st;
  if (!st.ok()) return out;
  auto adam = make_adam(*model);
  st = booster->boost(*model, model->store(), *adam);
  EXPECT_TRUE(st.ok()) << st;
  if (!st.ok()) return out;
  out.model = std::move(model);
  out.adam = std::move(adam);
  out.booster = std::move(booster);
  return out;
}

bool train_case(core::Context& ctx, Booster& booster, nn::CausalLM& model, const HybridCase& c,
                int first_step, int steps, EquivalenceRun* out) {
  const int data_rank = booster.plugin().dp_rank();
  for (int step = first_step; step < first_step + steps; ++step) {
    EXPECT_TRUE(booster.zero_grad().ok());
    double sum = 0;
    if (c.pp > 1) {
      std::vector<nn::MicroBatch> mbs;
      for (int i = 0; i < c.micro; ++i) mbs.push_back(micro_batch(step, data_rank, i));
      auto r = execute_pipeline(ctx, booster, model, mbs);
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return false;
      sum = r->loss * c.micro;
    }
    for (int i = 0; i < c.micro && c.pp == 1; ++i) {
      std::optional<Booster::NoSync> no_sync;
      if (c.zero_stage < 2 && i + 1 < c.micro) no_sync.emplace(booster.no_sync());
      sum += booster_micro_step(ctx, booster, model, micro_batch(step, data_rank, i), 1.0f / c.micro);
    }
    auto r = booster.step({.max_norm = kMaxNorm});
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return false;
    if (out == nullptr) continue;
    out->loss.push_back(static_cast<float>(sum / c.micro));
    out->clipped.push_back(r->clip_coef < 1.0f);
    out->grad_norm.push_back(r->grad_norm);
  }
  return true;
}

RankRun hybrid_rank_run(std::shared_ptr<comm::ProcessGroup> world, const HybridCase& c, int steps,
                        int first_step,
                        const std::function<void(Booster&, nn::Optimizer&)>& after_boost) {
  RankRun out;
  auto ctx = std::move(*core::Context::create(core::Device::cpu()));
  BoostedCase boosted = boost_case(world, c);
  if (boosted.model == nullptr) return out;
  Booster& booster = *boosted.booster;
  if (after_boost) after_boost(booster, *boosted.adam);
  if (!train_case(*ctx, booster, *boosted.model, c, first_step, steps, &out.run)) return out;
  auto whole = booster.model_state_dict(/*to_rank=*/-1, Stream::cpu());
  EXPECT_TRUE(whole.ok()) << whole.status();
  if (!whole.ok()) return out;
  out.whole = *whole;
  out.run.weights = floats_of(whole->flat_values(DType::kF32));
  // A save's model (to_rank 0, streamed): the same values on rank 0, no memory elsewhere.
  auto saved_model = booster.model_state_dict(/*to_rank=*/0, Stream::cpu());
  EXPECT_TRUE(saved_model.ok()) << saved_model.status();
  if (saved_model.ok()) {
    EXPECT_EQ(saved_model->materialized(), world->rank() == 0) << "rank " << world->rank();
    if (world->rank() == 0) {
      EXPECT_EQ(saved_model->table().size(), whole->table().size());
      for (size_t i = 0; i < std::min(whole->table().size(), saved_model->table().size()); ++i) {
        EXPECT_EQ(saved_model->table().entries()[i].name, whole->table().entries()[i].name);
      }
      for (core::DType dt : whole->table().dtypes()) {
        const core::Tensor a = whole->flat_values(dt), b = saved_model->flat_values(dt);
        EXPECT_TRUE(a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0)
            << "the save's model differs from the whole one";
      }
    }
  }
  auto sd = booster.optimizer_state_dict(/*to_rank=*/-1);
  EXPECT_TRUE(sd.ok()) << sd.status();
  if (!sd.ok()) return out;
  // A save's dict (to_rank 0): the same state on rank 0, no tensors on the
  // others (only world rank 0's data-parallel copy gathers whole).
  auto saved = booster.optimizer_state_dict(/*to_rank=*/0);
  EXPECT_TRUE(saved.ok()) << saved.status();
  if (saved.ok()) {
    if (world->rank() == 0) {
      EXPECT_TRUE(saved->meta == sd->meta);
      EXPECT_EQ(saved->tensors.size(), sd->tensors.size());
      for (const auto& [key, t] : sd->tensors) {
        auto it = saved->tensors.find(key);
        const bool same = it != saved->tensors.end() && it->second.nbytes() == t.nbytes() &&
                          std::memcmp(it->second.raw_data(), t.raw_data(), t.nbytes()) == 0;
        EXPECT_TRUE(same) << key << ": the save's dict differs from the whole one";
      }
    } else {
      EXPECT_TRUE(saved->tensors.empty()) << "rank " << world->rank();
    }
  }
  out.optimizer = *std::move(sd);
  return out;
}

EquivalenceRun one_process(const HybridCase& c, int dp, int steps) {
  auto model = materialized(declare_case_model(c), kSeed);
  auto adam = make_adam(*model);
  return reference_run(*model, *adam, dp, steps, c.micro);
}

void expect_equal_to_reference(const std::vector<EquivalenceRun>& runs, const EquivalenceRun& ref,
                               int first_step) {
  const int world = static_cast<int>(runs.size());
  for (int r = 0; r < world; ++r) ASSERT_EQ(runs[r].loss.size(), ref.loss.size()) << "rank " << r;
  for (size_t step = 0; step < ref.loss.size(); ++step) {
    // Tensor-parallel ranks and pipeline stages report their copy's loss:
    // the mean over all ranks is the mean over data-parallel copies.
    double mean = 0;
    for (int r = 0; r < world; ++r) mean += runs[r].loss[step];
    mean /= world;
    EXPECT_LE(std::abs(mean - ref.loss[step]) / std::abs(double(ref.loss[step])), kRelTol)
        << "step " << step << ": " << mean << " vs one process " << ref.loss[step];
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(runs[r].clipped[step], ref.clipped[step]) << "step " << step << " rank " << r;
      // After the first step the norm is taken at weights that already
      // differ by up to kWeightTol (AdamW's amplification, above).
      const double norm_tol = first_step + step == 0 ? kRelTol : kWeightTol;
      EXPECT_LE(std::abs(runs[r].grad_norm[step] - ref.grad_norm[step]),
                norm_tol * std::abs(ref.grad_norm[step]))
          << "step " << step << " rank " << r;
    }
  }
  for (int r = 0; r < world; ++r) {
    EXPECT_LE(rel_diff(runs[r].weights, ref.weights), kWeightTol) << "rank " << r;
  }
  std::cout << "worst weight difference " << rel_diff(runs[0].weights, ref.weights) << "\n";
}

}  // namespace colossal::parallel::testing
