#include "parallel/gemini/gemini_test_util.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include "core/context/context.h"
#include "nn/models/causal_lm/causal_lm.h"
#include "nn/optim/adam.h"
#include "nn/optim/module_params.h"
#include "nn/optim/param.h"
#include "parallel/booster/booster.h"
#include "parallel/zero/zero_test_util.h"

namespace colossal::parallel::testing {

using core::DType;
using core::Stream;

GeminiOptions small_chunks(const std::string& placement) {
  GeminiOptions o;
  o.placement_policy = placement;
  o.chunks.min_chunk_size_m = 0;
  o.chunks.search_range_m = 64.0 / (1 << 20);
  o.chunks.hidden_dim = 8;
  o.notice = [](const std::string&) {};
  return o;
}

int64_t auto_capacity_bytes(Family family) {
  return family == Family::kGpt2 ? 8 << 10 : 24 << 10;
}

std::unique_ptr<nn::Adam> declared_adam(const nn::CausalLM& model) {
  nn::AdamOptions o;
  o.lr = 1e-2;
  return *nn::make_adamw(nn::split_decay_groups(nn::declared_params(model.table()), kWeightDecay), o);
}

void expect_same_tensors(const nn::OptimizerStateDict& a, const nn::OptimizerStateDict& b) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [key, t] : a.tensors) {
    ASSERT_TRUE(b.tensors.count(key)) << key;
    const core::Tensor& u = b.tensors.at(key);
    ASSERT_EQ(t.nbytes(), u.nbytes()) << key;
    EXPECT_EQ(0, std::memcmp(t.raw_data(), u.raw_data(), t.nbytes())) << key;
  }
}

GeminiRun gemini_rank_run(std::shared_ptr<comm::ProcessGroup> pg, const RunSpec& spec) {
  GeminiRun out;
  const int rank = pg->rank();
  auto ctx = std::move(*core::Context::create(core::Device::cpu()));
  auto model = declare_zero_model(spec.family, spec.checkpoint_ratio);
  auto plugin = GeminiPlugin::create(pg, spec.options);
  EXPECT_TRUE(plugin.ok()) << plugin.status();
  if (!plugin.ok()) return out;
  GeminiPlugin* gemini = plugin->get();
  Booster booster(*std::move(plugin));
  absl::Status st = booster.materialize(model->store(), kSeed, Stream::cpu());
  EXPECT_TRUE(st.ok()) << st;
  if (!st.ok()) return out;
  auto adam = declared_adam(*model);
  st = booster.boost(*model, model->store(), *adam);
  EXPECT_TRUE(st.ok()) << st;
  if (!st.ok()) return out;
  if (spec.load_model != nullptr) {
    EXPECT_TRUE(booster.load_model_state_dict(*spec.load_model, Stream::cpu()).ok());
  }
  if (spec.load_optimizer != nullptr) {
    absl::Status l = booster.load_optimizer_state_dict(*spec.load_optimizer);
    EXPECT_TRUE(l.ok()) << l;
  }
  EquivalenceRun& run = out.run;
  for (int step = spec.first_step; step < spec.first_step + spec.steps; ++step) {
    EXPECT_TRUE(booster.zero_grad().ok());
    double sum = 0;
    for (int i = 0; i < kMicro; ++i) {
      std::optional<Booster::NoSync> no_sync;
      if (spec.no_sync && i + 1 < kMicro) no_sync.emplace(booster.no_sync());
      sum += booster_micro_step(*ctx, booster, *model, micro_batch(step, rank, i), 1.0f / kMicro);
    }
    auto r = booster.step({.max_norm = kMaxNorm});
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return out;
    run.loss.push_back(static_cast<float>(sum / kMicro));
    run.clipped.push_back(r->clip_coef < 1.0f);
    run.grad_norm.push_back(r->grad_norm);
  }
  auto weights = booster.model_state_dict(-1, Stream::cpu());
  EXPECT_TRUE(weights.ok()) << weights.status();
  if (!weights.ok()) return out;
  run.weights = floats_of(weights->flat_values(DType::kF32));
  if (spec.save_model != nullptr) *spec.save_model = *weights;
  auto opt = booster.optimizer_state_dict(-1);
  EXPECT_TRUE(opt.ok()) << opt.status();
  if (opt.ok()) out.optimizer_state = *std::move(opt);
  out.chunks = static_cast<int>(gemini->layout().chunks.size());
  out.on_device = gemini->chunks_on_device();
  out.evictions = gemini->evictions();
  out.gathers_ahead = gemini->gathers_ahead();
  return out;
}

}  // namespace colossal::parallel::testing
