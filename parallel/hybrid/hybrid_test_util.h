// Test helpers of parallel/hybrid: one rank's run of a hybrid_parallel case
// (a tiny GPT-2 or Llama split as the case says, AdamW, micro-batches of its
// data-parallel rank's data, 1F1B with pipelines), the one-process reference
// and the comparison, shared by the thread and the process tests.
#ifndef COLOSSAL_PARALLEL_HYBRID_HYBRID_TEST_UTIL_H_
#define COLOSSAL_PARALLEL_HYBRID_HYBRID_TEST_UTIL_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group/process_group.h"
#include "core/context/context.h"
#include "nn/models/causal_lm/causal_lm.h"
#include "nn/optim/adam.h"
#include "nn/optim/state_dict.h"
#include "parallel/booster/booster.h"
#include "parallel/ddp/ddp_test_util.h"
#include "parallel/hybrid/hybrid_parallel_plugin.h"

namespace colossal::parallel::testing {

// Ten steps (more let AdamW magnify the float32 rounding of a different
// summation order past kRelTol).
constexpr int kHybridSteps = 10;
// Weights after kHybridSteps of AdamW. Tensor parallelism sums in another order
// than one process (a row layer's partial outputs, a column layer's partial
// input gradients), so gradients differ by float32 rounding: at most 2·γ_n
// (n <= 24 terms here, γ_24 ≈ 1.4e-6) of the sum of the terms' magnitudes.
// AdamW divides each update by the root of the element's own squared-gradient
// average, so an element whose terms cancel passes that difference on at
// its terms' scale rather than the gradient's: up to lr = 1e-2 per step, 10
// steps, against weights of order 1. Losses and norms (no division) keep
// kRelTol; the weights get ten times it.
constexpr double kWeightTol = 10 * kRelTol;

struct HybridCase {
  Family family;
  int world;
  int tp;
  int zero_stage;
  int pp = 1;
  int layers = 2;  // the tiny models' (pp4 takes four)
  int heads = 2;   // GPT-2's n_head (tp4 takes four)
  bool sp = false;  // sequence parallelism (split_gather)
  int chunks = 1;   // model chunks per pipeline stage (> 1: the interleaved schedule)
  int micro = kMicro;  // micro-batches per step and data-parallel rank
  int a2a = 1;  // all_to_all (Ulysses) sequence-parallel ranks (sp_size)
  // num_layers_per_stage: one layer in each virtual stage but the last, which
  // takes the rest (not the even split).
  bool uneven = false;
};
// The case's num_layers_per_stage (empty unless c.uneven).
std::vector<int64_t> layers_per_stage(const HybridCase& c);

// The case's tiny model, declared: the shared test model, or one with more
// layers or heads.
std::unique_ptr<nn::CausalLM> declare_case_model(const HybridCase& c);
// "gpt2_world4_tp2_pp1_zero1", with "_layers4" / "_heads4" / "_sp" /
// "_chunks2" / "_micro4" / "_a2a2" / "_uneven" where they differ.
std::string case_name(const HybridCase& c);
// The case a case_name() names (NotFound otherwise).
absl::StatusOr<HybridCase> case_of(const std::string& name);

// The plugin options of case `c`.
HybridParallelOptions options_of(const HybridCase& c);

// One rank's model of case `c`, declared as the plugin splits it, materialized
// (kSeed) and boosted with an Adam; GTest failures (and a null model) on errors.
struct BoostedCase {
  std::unique_ptr<nn::CausalLM> model;
  std::unique_ptr<nn::Adam> adam;
  std::unique_ptr<Booster> booster;
};
BoostedCase boost_case(std::shared_ptr<comm::ProcessGroup> world, const HybridCase& c);

// Steps [first_step, first_step + steps) of case `c` on a boosted rank (its
// data-parallel rank's micro-batches; 1F1B with pipelines), each step's
// loss, clipping and norm appended to `out` (may be null). GTest failures
// and false on errors.
bool train_case(core::Context& ctx, Booster& booster, nn::CausalLM& model, const HybridCase& c,
                int first_step, int steps, EquivalenceRun* out);

struct RankRun {
  EquivalenceRun run;
  nn::ParameterStore whole;          // the whole model after the last step
  nn::OptimizerStateDict optimizer;  // the whole optimizer state after the last step
};
// One rank's `steps` steps of case `c` from `first_step`; `after_boost` may
// load a checkpoint. GTest failures on errors.
RankRun hybrid_rank_run(std::shared_ptr<comm::ProcessGroup> world, const HybridCase& c, int steps,
                        int first_step = 0,
                        const std::function<void(Booster&, nn::Optimizer&)>& after_boost = {});
// The uninterrupted one-process run of `c`'s model over `dp` data ranks
// (c.micro micro-batches each).
EquivalenceRun one_process(const HybridCase& c, int dp, int steps);
// Every rank's losses (averaged) and clipping against `ref` at kRelTol, norms at
// kRelTol on the run's first step and kWeightTol after, weights at
// kWeightTol. `first_step`: the step runs[*] and ref start at (a resumed run).
void expect_equal_to_reference(const std::vector<EquivalenceRun>& runs, const EquivalenceRun& ref,
                               int first_step = 0);

}  // namespace colossal::parallel::testing

#endif  // COLOSSAL_PARALLEL_HYBRID_HYBRID_TEST_UTIL_H_
