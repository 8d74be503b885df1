// Test helpers for parallel/gemini: options with small chunks (so the tiny
// GPT-2 of zero_test_util and the tiny Llama of ddp_test_util have several),
// and one rank's training run through a Booster with the gemini plugin
// (materialize, boost, kSteps of kMicro micro-batches with clipping, optional
// checkpoint load and save).
#ifndef COLOSSAL_PARALLEL_GEMINI_GEMINI_TEST_UTIL_H_
#define COLOSSAL_PARALLEL_GEMINI_GEMINI_TEST_UTIL_H_

#include <memory>
#include <string>

#include "comm/process_group/process_group.h"
#include "nn/models/causal_lm/causal_lm.h"
#include "nn/module/parameter.h"
#include "nn/optim/adam.h"
#include "nn/optim/state_dict.h"
#include "parallel/ddp/ddp_test_util.h"
#include "parallel/gemini/gemini_plugin.h"

namespace colossal::parallel::testing {

// `placement` with chunks of a few hundred elements and silent notices.
GeminiOptions small_chunks(const std::string& placement);

// A stand-in device capacity under which "auto" keeps a few of the chunks of
// declare_zero_model(family) on the device, not all (small_chunks' layout).
int64_t auto_capacity_bytes(Family family);

struct GeminiRun {
  EquivalenceRun run;
  int chunks = 0, on_device = 0;
  int64_t evictions = 0, gathers_ahead = 0;
  nn::OptimizerStateDict optimizer_state;
};

struct RunSpec {
  GeminiOptions options;
  Family family = Family::kGpt2;  // the model: declare_zero_model(family)
  double checkpoint_ratio = 0.0;
  bool no_sync = false;
  int first_step = 0, steps = kSteps;
  // Loaded before the first step (a resume); written after the last (a save).
  const nn::ParameterStore* load_model = nullptr;
  const nn::OptimizerStateDict* load_optimizer = nullptr;
  nn::ParameterStore* save_model = nullptr;
};

// AdamW (lr 1e-2, decay groups) over `model`'s declared parameters: what
// gemini_rank_run boosts.
std::unique_ptr<nn::Adam> declared_adam(const nn::CausalLM& model);

// The two states hold the same keys with bitwise equal tensors (host tensors).
void expect_same_tensors(const nn::OptimizerStateDict& a, const nn::OptimizerStateDict& b);

// This rank's run of declare_zero_model(spec.family) (initialised with kSeed,
// AdamW as make_adam over declared parameters); GTest failures on errors.
GeminiRun gemini_rank_run(std::shared_ptr<comm::ProcessGroup> pg, const RunSpec& spec);

}  // namespace colossal::parallel::testing

#endif  // COLOSSAL_PARALLEL_GEMINI_GEMINI_TEST_UTIL_H_
