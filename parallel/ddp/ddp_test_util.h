// Test helpers for parallel/ddp: a tiny model of each family (GPT-2, Llama
// with an untied or a tied head), deterministic micro-batches, the
// single-process reference run on the union of the ranks' data, and one
// rank's Booster training loop (no_sync on all micro-batches but the last,
// clipping by global norm). Everything takes nn::CausalLM, the contract the
// plugins see.
//
//   const DdpRunSpec spec{.family = Family::kLlama, .adamw = true};
//   EquivalenceRun ref = reference_run(/*world=*/2, spec);
//   ... on each rank: EquivalenceRun mine = ddp_rank_run(pg, {.bucket_cap_mb = 25}, spec);
//   // mine.loss[s] averaged over ranks ~ ref.loss[s]; mine.weights ~ ref.weights
#ifndef COLOSSAL_PARALLEL_DDP_DDP_TEST_UTIL_H_
#define COLOSSAL_PARALLEL_DDP_DDP_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/builtin/process_group_builtin.h"
#include "comm/process_group/process_group.h"
#include "comm/store/tcp_store.h"
#include "core/context/context.h"
#include "nn/layers/linear.h"
#include "nn/models/causal_lm/causal_lm.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/models/llama/llama.h"
#include "nn/optim/adam.h"
#include "nn/optim/optimizer.h"
#include "nn/optim/sgd.h"
#include "nn/train/train_step.h"
#include "parallel/booster/booster.h"
#include "parallel/ddp/ddp_plugin.h"

namespace colossal::parallel::testing {

// fp32 tolerance for "W ranks equal one process": relative to the reference's
// magnitude (losses: |a - b| / |b|; tensors: max |a - b| / max |b|).
constexpr double kRelTol = 1e-5;
constexpr int64_t kT = 4;     // sequence length
constexpr int64_t kRows = 1;  // rows per micro-batch
constexpr int kMicro = 2;     // micro-batches per step and rank
constexpr int kSteps = 20;
constexpr float kMaxNorm = 0.9f;
constexpr uint64_t kSeed = 100;  // rank r initialises with kSeed + r
constexpr double kWeightDecay = 0.1;

// The model families every plugin is tested on: GPT-2 (its head tied to wte)
// and Llama with an untied head (lm_head) or a tied one (reads embed_tokens).
// kQwen2: the tied tiny Llama with Qwen2's q/k/v biases.
enum class Family { kGpt2, kLlama, kLlamaTied, kQwen2 };
// "gpt2", "llama", "llama_tied", "qwen2".
const char* family_name(Family family);
// What test and scenario names end with: "" for GPT-2 (the names the tests
// had before Llama), else "_" + family_name.
std::string family_suffix(Family family);

// checkpoint_ratio: activation checkpointing of the first blocks (GPT2Config).
nn::GPT2Config tiny_config(double checkpoint_ratio = 0.0);
// A tiny Llama with the tokens of micro_batch (vocabulary 11, padded to 16):
// 2 layers, hidden 16, 4 query heads over 2 key/value heads (head size 4),
// SwiGLU 24, rope_theta 100 with Llama 3 scaling that changes both
// frequencies (factor 8 over an original range of 8 positions).
nn::LlamaConfig tiny_llama_config(bool tied, double checkpoint_ratio = 0.0);
// tiny_llama_config of a Llama family (kQwen2: tied, with qkv_bias).
nn::LlamaConfig tiny_llama_config(Family family, double checkpoint_ratio = 0.0);
// kRows rows of kT (+1) tokens below 11, a function of (step, rank, micro) only.
nn::MicroBatch micro_batch(int step, int rank, int micro);
// The tiny model of `family` (tiny_config, tiny_llama_config), declared: no memory.
std::unique_ptr<nn::CausalLM> declare_model(Family family, double checkpoint_ratio = 0.0);
// A tiny GPT-2 initialised with `seed` (GPT2::init).
std::unique_ptr<nn::GPT2> make_model(uint64_t seed, double checkpoint_ratio = 0.0);
// declare_model(family), allocated on the CPU and initialised with `seed`.
std::unique_ptr<nn::CausalLM> make_model(Family family, uint64_t seed,
                                         double checkpoint_ratio = 0.0);
// `model` allocated on the CPU and initialised with `seed` (GTest failures on errors).
std::unique_ptr<nn::CausalLM> materialized(std::unique_ptr<nn::CausalLM> model, uint64_t seed);
// SGD over the model's parameters (lr 0.1).
std::unique_ptr<nn::Sgd> make_sgd(nn::CausalLM& model);
// AdamW (lr 1e-2), decay kWeightDecay on matrices, none on biases and norms; over
// nn::model_optimizer_params (declared where a plugin keeps the gradients),
// or declared parameters (a plugin that steps_declared_optimizer).
std::unique_ptr<nn::Adam> make_adam(nn::CausalLM& model, bool declared = false);
std::vector<float> floats_of(const core::Tensor& t);
// A float vector to a binary stream (its length, then the values) and back
// (empty on a short or oversized read): how spawned ranks hand results to the
// parent test.
void write_floats(std::ostream& out, const std::vector<float>& v);
std::vector<float> read_floats(std::istream& in);
// max |a - b| / max |b|.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b);
// Booster::forward, cross entropy with `dloss` over the model's vocabulary,
// Booster::backward; returns the loss.
float booster_micro_step(core::Context& ctx, Booster& booster, nn::CausalLM& model,
                         const nn::MicroBatch& mb, float dloss);

struct EquivalenceRun {
  std::vector<float> loss;      // per step
  std::vector<char> clipped;    // per step: clip_coef < 1
  std::vector<float> grad_norm;  // per step: the global pre-clip norm
  std::vector<float> weights;   // after the last step
  size_t buckets = 0;           // ddp only
  int64_t issued = 0;           // ddp only: all-reduces issued
  int64_t issued_in_hooks = 0;  // ddp only
};

// The rendezvous store, served on 127.0.0.1 at an ephemeral port (port()).
absl::StatusOr<std::unique_ptr<comm::TcpStore>> serve_loopback_store();

// A builtin group for `rank` of `world` over `transport`, meeting the others
// through the TCP store served at 127.0.0.1:`port`.
absl::StatusOr<std::shared_ptr<comm::ProcessGroup>> connect_builtin_group(
    int port, int rank, int world, comm::TransportKind transport);

// Runs fn(rank, pg) on `world` threads, each with its own builtin group over
// the in-process transport (rendezvous through a loopback TCP store).
void run_ranks(int world,
               const std::function<void(int, std::shared_ptr<comm::ProcessGroup>)>& fn);

// One process, `steps` train_steps (clipping at kMaxNorm) of `model` with
// `optimizer` over the world * micro micro-batches of every step: the result
// every plugin's ranks must match.
EquivalenceRun reference_run(nn::CausalLM& model, nn::Optimizer& optimizer, int world,
                             int steps = kSteps, int micro = kMicro);

// What the ddp ranks train, and their one-process reference.
struct DdpRunSpec {
  int steps = kSteps;
  double checkpoint_ratio = 0.0;  // activation checkpointing on the ranks only
  Family family = Family::kGpt2;
  // make_adam instead of make_sgd. A tiny Llama's gradient norm under SGD is
  // the random tokens' noise, about 1.9 / sqrt(world) on every step, so no
  // one kMaxNorm clips some steps and not others at every world; under AdamW
  // it falls as the model learns, as GPT-2's does under SGD.
  bool adamw = false;
};
// The same for make_model(spec.family, kSeed) (rank 0's weights).
EquivalenceRun reference_run(int world, const DdpRunSpec& spec = {});
// This rank's spec.steps of make_model(spec.family) through a Booster with
// the ddp plugin (GTest failures on errors).
EquivalenceRun ddp_rank_run(std::shared_ptr<comm::ProcessGroup> pg, const DdpOptions& options,
                            const DdpRunSpec& spec = {});

// Two linear branches: forward uses `a`, or `b` when use_b; backward the same
// (the other branch's parameters are never reached: an unused parameter).
class Branches : public nn::Module {
 public:
  explicit Branches(bool use_b)
      : Module("net"), a_("net.a", 4, 4, {}), b_("net.b", 4, 4, {}), use_b_(use_b) {
    register_child(&a_);
    register_child(&b_);
  }
  const char* type() const override { return "Branches"; }

 protected:
  absl::StatusOr<nn::ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& x) override {
    return (use_b_ ? b_ : a_).forward(ctx, x);
  }
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, nn::Saved& saved,
                                             const core::Tensor& dy) override {
    return (use_b_ ? b_ : a_).backward(ctx, saved, dy);
  }

 private:
  nn::Linear a_, b_;
  bool use_b_;
};

}  // namespace colossal::parallel::testing

#endif  // COLOSSAL_PARALLEL_DDP_DDP_TEST_UTIL_H_
