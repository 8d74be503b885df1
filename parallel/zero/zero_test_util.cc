#include "parallel/zero/zero_test_util.h"

#include <optional>
#include <utility>

#include "core/context/context.h"
#include "parallel/booster/booster.h"
#include "parallel/ddp/ddp_plugin.h"

namespace colossal::parallel::testing {

using core::DType;

EquivalenceRun adam_reference_run(int world, Family family) {
  auto model = make_zero_model(family, kSeed);
  auto adam = make_adam(*model);
  return reference_run(*model, *adam, world);
}

ZeroRun rank_run(std::shared_ptr<comm::ProcessGroup> pg, std::unique_ptr<Plugin> plugin,
                 bool use_no_sync, Family family, bool by_plugin) {
  ZeroRun out;
  EquivalenceRun& run = out.run;
  const int rank = pg->rank();
  auto ctx = std::move(*core::Context::create(core::Device::cpu()));
  auto* zero = dynamic_cast<LowLevelZeroPlugin*>(plugin.get());
  auto* ddp = dynamic_cast<DdpPlugin*>(plugin.get());
  Booster booster(std::move(plugin));
  // Boost broadcasts rank 0's weights.
  std::unique_ptr<nn::CausalLM> model =
      by_plugin ? declare_zero_model(family) : make_zero_model(family, kSeed + rank);
  if (by_plugin) {
    const absl::Status made = booster.materialize(model->store(), kSeed + rank, core::Stream::cpu());
    EXPECT_TRUE(made.ok()) << made;
    if (!made.ok()) return out;
  }
  auto adam = make_adam(*model, by_plugin && booster.plugin().steps_declared_optimizer());
  out.declared_optimizer = adam->declared();
  const absl::Status boosted = booster.boost(*model, model->store(), *adam);
  EXPECT_TRUE(boosted.ok()) << boosted;
  if (!boosted.ok()) return out;
  EXPECT_EQ(booster.plugin().dp_rank(), rank);
  EXPECT_EQ(booster.plugin().dp_size(), pg->size());
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_TRUE(booster.zero_grad().ok());
    double sum = 0;
    for (int i = 0; i < kMicro; ++i) {
      std::optional<Booster::NoSync> no_sync;
      if (use_no_sync && i + 1 < kMicro) no_sync.emplace(booster.no_sync());
      sum += booster_micro_step(*ctx, booster, *model, micro_batch(step, rank, i), 1.0f / kMicro);
    }
    auto r = booster.step({.max_norm = kMaxNorm});
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return out;
    run.loss.push_back(static_cast<float>(sum / kMicro));
    run.clipped.push_back(r->clip_coef < 1.0f);
    run.grad_norm.push_back(r->grad_norm);
  }
  EXPECT_TRUE(booster.sync_weights().ok());  // overlap_allgather: the last step's pieces
  run.weights = floats_of(model->store().flat_values(DType::kF32));
  if (ddp != nullptr) {
    run.buckets = ddp->buckets().size();
    run.issued = ddp->reductions_issued();
    run.issued_in_hooks = ddp->reductions_issued_in_hooks();
  }
  if (zero != nullptr) {
    out.shard = zero->shard();
    out.pieces = zero->pieces();
    out.master = zero->master_shard();
    out.issued = zero->reductions_issued();
    out.issued_in_hooks = zero->reductions_issued_in_hooks();
    out.gathers = zero->gathers_issued();
  }
  out.numel = model->store().table().buffer_numel(DType::kF32);
  out.key_bias = key_bias_ranges(model->store().table());  // compared separately
  return out;
}

ZeroRun zero_rank_run(std::shared_ptr<comm::ProcessGroup> pg, const LowLevelZeroOptions& options,
                      Family family, bool by_plugin) {
  auto plugin = LowLevelZeroPlugin::create(pg, options);
  EXPECT_TRUE(plugin.ok()) << plugin.status();
  if (!plugin.ok()) return {};
  return rank_run(std::move(pg), std::move(*plugin), /*use_no_sync=*/options.stage == 1, family,
                  by_plugin);
}

std::vector<ZeroRun> zero_runs(int world, const LowLevelZeroOptions& options, Family family,
                               bool by_plugin) {
  std::vector<ZeroRun> runs(world);
  run_ranks(world, [&](int r, std::shared_ptr<comm::ProcessGroup> pg) {
    runs[r] = zero_rank_run(std::move(pg), options, family, by_plugin);
  });
  return runs;
}

}  // namespace colossal::parallel::testing
