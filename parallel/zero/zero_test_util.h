// Test helpers for parallel/zero: the tiny GPT-2 whose flat buffer forces
// padding and slice boundaries inside parameters (or ddp_test_util's tiny
// Llama), AdamW with decay groups, and the weight comparison that sets
// c_attn's key bias apart.
#ifndef COLOSSAL_PARALLEL_ZERO_ZERO_TEST_UTIL_H_
#define COLOSSAL_PARALLEL_ZERO_ZERO_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/models/causal_lm/causal_lm.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/optim/adam.h"
#include "nn/optim/module_params.h"
#include "nn/optim/param.h"
#include "parallel/booster/plugin.h"
#include "parallel/ddp/ddp_test_util.h"
#include "parallel/zero/low_level_zero_plugin.h"

namespace colossal::parallel::testing {

// tiny_config with n_embd 6 (head size 3) and an unpadded vocabulary of 11:
// the flat buffer is not a multiple of 3 or 4, so those worlds pad, and slice
// boundaries fall inside parameters (low_level_zero_test checks both).
inline nn::GPT2Config zero_config() {
  nn::GPT2Config c = tiny_config();
  c.n_embd = 6;
  c.n_head = 2;
  c.padded_vocab_multiple = 1;
  return c;
}

inline std::unique_ptr<nn::GPT2> make_zero_model(uint64_t seed) {
  auto model = *nn::GPT2::create(zero_config(), core::DType::kF32, core::Stream::cpu());
  EXPECT_TRUE(model->init(seed).ok());
  return model;
}

// The ZeRO tests' model of `family`, declared (no memory): GPT-2 with
// zero_config, Llama with tiny_llama_config.
inline std::unique_ptr<nn::CausalLM> declare_zero_model(Family family,
                                                        double checkpoint_ratio = 0.0) {
  if (family != Family::kGpt2) return declare_model(family, checkpoint_ratio);
  nn::GPT2Config config = zero_config();
  config.checkpoint_ratio = checkpoint_ratio;
  return *nn::GPT2::declare(config, core::DType::kF32);
}

// declare_zero_model(family) allocated on the CPU and initialised with `seed`.
inline std::unique_ptr<nn::CausalLM> make_zero_model(Family family, uint64_t seed) {
  return materialized(declare_zero_model(family), seed);
}

// (offset, numel) in the flat buffer of the key third of every c_attn bias.
// It cannot change attention (softmax is invariant to it): its true gradient
// is 0 and what backward computes is rounding noise, which Adam normalises
// into lr-sized steps. Its values therefore depend on the order of summation
// (1e-5-sized, not 1e-8) and are compared to a reference separately. Llama
// has no such parameter (its table has no c_attn): the list is empty.
inline std::vector<std::pair<int64_t, int64_t>> key_bias_ranges(const nn::ParameterTable& table) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const nn::ParameterEntry& e : table.entries()) {
    if (e.name.find("attn.c_attn.bias") != std::string::npos) {
      const int64_t c = zero_config().n_embd;
      out.emplace_back(e.offset + c, c);
    }
  }
  return out;
}

// max |a - b| / max |b| over the elements outside `skip`, and max |a| inside.
inline std::pair<double, double> rel_diff_outside(
    const std::vector<float>& a, const std::vector<float>& b,
    const std::vector<std::pair<int64_t, int64_t>>& skip) {
  std::vector<char> out(a.size(), 0);
  for (const auto& [off, n] : skip) std::fill(out.begin() + off, out.begin() + off + n, 1);
  double d = 0, m = 1e-30, inside = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::abs(double(b[i])));
    if (out[i]) {
      inside = std::max(inside, std::abs(double(a[i])));
    } else {
      d = std::max(d, std::abs(double(a[i]) - b[i]));
    }
  }
  return {d / m, inside};
}

// One process over the union of `world` ranks' data: make_zero_model(family,
// kSeed) with make_adam, the result every plugin's ranks must match.
EquivalenceRun adam_reference_run(int world, Family family = Family::kGpt2);

struct ZeroRun {
  EquivalenceRun run;
  ZeroShard shard;
  std::vector<ShardPiece> pieces;
  std::vector<float> master;
  int64_t issued = 0, issued_in_hooks = 0;
  int64_t gathers = 0;  // the weights' rounds of pieces (overlap_allgather)
  int64_t numel = 0;
  std::vector<std::pair<int64_t, int64_t>> key_bias;  // (offset, numel) of c_attn's key bias
  bool declared_optimizer = false;  // make_adam gave declared parameters
};

// This rank's kSteps of make_zero_model(family) through a Booster with
// `plugin` (make_adam; GTest failures on errors). The slice fields are filled
// for low_level_zero. no_sync on all micro-batches but the last (ddp, stage
// 1), or every micro-batch reduced (stage 2: the gradient shards accumulate).
// by_plugin: the model is declared and the Booster has the plugin
// materialize it (the same values), and its optimizer is declared where the
// plugin steps_declared_optimizer (as colossal's Lua API builds it).
ZeroRun rank_run(std::shared_ptr<comm::ProcessGroup> pg, std::unique_ptr<Plugin> plugin,
                 bool use_no_sync = true, Family family = Family::kGpt2, bool by_plugin = false);
// rank_run with a low_level_zero plugin of `options`.
ZeroRun zero_rank_run(std::shared_ptr<comm::ProcessGroup> pg, const LowLevelZeroOptions& options,
                      Family family = Family::kGpt2, bool by_plugin = false);
// zero_rank_run on each of `world` ranks (threads, run_ranks), by rank.
std::vector<ZeroRun> zero_runs(int world, const LowLevelZeroOptions& options,
                               Family family = Family::kGpt2, bool by_plugin = false);

}  // namespace colossal::parallel::testing

#endif  // COLOSSAL_PARALLEL_ZERO_ZERO_TEST_UTIL_H_
