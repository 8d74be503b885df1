// colossal::parallel — the `hybrid_parallel` plugin (Colossal-AI's
// HybridParallelPlugin): tensor parallelism inside the model, data
// parallelism (ddp, or ZeRO stage 1 / 2) across copies of it, on one device
// mesh.
//
// The world's ranks form the mesh (dp, pp, sp, tp), tp varying fastest
// (comm/mesh: neighbouring ranks split one layer, the fastest links):
//   * tp: the model's attention and MLP weights split over the tp group
//     (Megatron's 1D scheme, nn/layers/tensor_parallel.h). The model must
//     be declared as model_split() says before materialize; its table then
//     holds this rank's pieces, which initialise to one process's values.
//   * sp (sp_size > 1: all_to_all sequence parallelism): each
//     rank of the sp group holds 1/sp of every sequence through the whole
//     model (nn/layers/tensor_parallel.h, seq_to_heads); its ranks read the
//     same data, and the inner plugin runs over dp x sp, whose gradients are
//     all partial.
//   * dp: an inner plugin over the dp group trains the local model: ddp
//     (zero_stage 0) or low_level_zero (1 or 2). Every rank of one tp group
//     reads the same data (dp_rank()).
//   * pp: each rank runs one pipeline stage (nn::PipelineStage: a range of
//     blocks, or num_model_chunks ranges, the embedding on the first, the
//     head on the last); a step's micro-batches run through the 1F1B or the
//     interleaved schedule (parallel/booster/pipeline.h) over
//     point-to-point sends on the pp group. A tied head's
//     weight lives on both end stages: its gradients are summed between them
//     before every step, so the copies stay equal. With pp_size > 1:
//     zero_stage <= 1 (as Colossal-AI).
//
// Clipping uses the norm of the whole model: each rank's share counts its
// pieces and, on tp rank 0 only, the parameters every tp rank holds whole
// (norms, biases of row layers, embeddings), summed over the ranks that hold
// different gradients: the world under ZeRO (disjoint slices), the tp group
// under ddp (every dp rank holds the same averaged gradients).
// Checkpoints hold the whole model and optimizer state (pieces gathered over
// tp), so they load at any (dp, tp) layout, into one process, ddp or
// low_level_zero.
//
//   HybridParallelOptions o;  o.tp_size = 2;  o.zero_stage = 1;
//   COLOSSAL_ASSIGN_OR_RETURN(auto plugin, HybridParallelPlugin::create(world, o));
//   COLOSSAL_ASSIGN_OR_RETURN(nn::ModelSplit split, plugin->model_split(*declared));
//   COLOSSAL_ASSIGN_OR_RETURN(auto model, declared->redeclare(dtype, split));
//   Booster booster(std::move(plugin));  ... materialize, boost, train as any plugin
// (parallel/hybrid/hybrid_parallel_test.cc)
#ifndef COLOSSAL_PARALLEL_HYBRID_HYBRID_PARALLEL_PLUGIN_H_
#define COLOSSAL_PARALLEL_HYBRID_HYBRID_PARALLEL_PLUGIN_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/mesh/device_mesh.h"
#include "comm/process_group/process_group.h"
#include "parallel/booster/plugin.h"

namespace colossal::parallel {

struct HybridParallelOptions {
  int tp_size = 1;
  int pp_size = 1;
  // Model chunks per pipeline stage: 1 runs the 1F1B schedule, more the
  // interleaved one (Colossal-AI's pp_style "interleaved").
  int num_model_chunks = 1;
  // Colossal-AI's num_layers_per_stage: blocks per virtual stage
  // (nn::pipeline_stage), pp_size * num_model_chunks entries; empty: the
  // even split.
  std::vector<int64_t> layers_per_stage;
  // Colossal-AI's enable_sequence_parallelism with sequence_parallelism_mode
  // "split_gather" (nn/layers/tensor_parallel.h): tp_size > 1 and
  // zero_stage <= 1; pipeline stages pass on their ranks' positions.
  bool sequence_parallel = false;
  // Colossal-AI's sequence_parallelism_mode "all_to_all" (Ulysses,
  // nn/layers/tensor_parallel.h) over sp_size ranks (> 1): each holds
  // seq_len / sp_size positions through the whole model, heads are exchanged
  // for positions around attention, and the inner plugin reduces gradients
  // over dp x sp. Composes with tensor parallelism (heads split over tp x sp)
  // and pipeline stages; not with split_gather; any zero_stage.
  int sp_size = 1;
  // 0: ddp over the dp group; 1 or 2: low_level_zero at that stage.
  int zero_stage = 0;
  double ddp_bucket_cap_mb = 25.0;      // zero_stage 0
  double zero_bucket_size_in_m = 12.0;  // zero_stage 1, 2
  bool cpu_offload = false;             // zero_stage 1, 2
  int cpu_offload_threads = 0;
  // Colossal-AI's overlap_communication: false reduces the data-parallel
  // gradients after the backward instead of beside it (ddp or ZeRO alike).
  bool overlap_communication = true;
};

class HybridParallelPlugin : public Plugin {
 public:
  // Builds the mesh and its groups over `world` (collective: every rank
  // calls it). Errors (InvalidArgument naming the option): sizes below 1, a
  // world not divisible by tp_size * pp_size, a zero_stage outside 0..2 (or
  // 2 with pp_size > 1); the inner plugin's.
  static absl::StatusOr<std::unique_ptr<HybridParallelPlugin>> create(
      std::shared_ptr<comm::ProcessGroup> world, const HybridParallelOptions& options);
  ~HybridParallelPlugin() override;

  const char* name() const override { return "hybrid_parallel"; }
  int dp_rank() const override;
  int dp_size() const override;
  absl::StatusOr<nn::ModelSplit> model_split(const nn::CausalLM& model) const override;
  const Pipeline* pipeline() const override;
  const comm::DeviceMesh& mesh() const;

  // The default materialize, after checking that the store is split over
  // this plugin's tp group (FailedPrecondition naming the fix otherwise).
  absl::Status materialize(nn::ParameterStore& store, uint64_t seed,
                           const core::Stream& stream) override;
  absl::Status boost(nn::Module& model, const nn::ParameterStore& store,
                     nn::Optimizer& optimizer) override;
  absl::Status begin_forward(core::Context& ctx) override;
  absl::Status end_forward(bool ok) override;
  absl::Status begin_backward(core::Context& ctx, bool sync) override;
  absl::Status end_backward(bool ok) override;
  absl::Status before_step(const core::Stream& stream) override;
  bool owns_step() const override { return true; }
  // With ZeRO over dp (low_level_zero's); ddp steps the optimizer's tensors.
  bool steps_declared_optimizer() const override;
  absl::Status zero_grad() override;
  absl::Status sync_weights() override;
  absl::StatusOr<nn::MixedPrecisionStepResult> step(nn::DynamicLossScaler* scaler,
                                                    float max_norm) override;

  // The whole model (one process's table), gathered over tp.
  absl::StatusOr<nn::ParameterStore> model_state_dict(const nn::ParameterStore& store, int to_rank,
                                                      const core::Stream& stream) override;
  // `state` holds the whole model; each rank keeps its pieces.
  absl::Status load_model_state_dict(nn::ParameterStore& store, const nn::ParameterStore& state,
                                     const core::Stream& stream) override;
  absl::StatusOr<nn::OptimizerStateDict> optimizer_state_dict(const nn::Optimizer& optimizer,
                                                              int to_rank) override;
  absl::Status load_optimizer_state_dict(nn::Optimizer& optimizer,
                                         const nn::OptimizerStateDict& state) override;
  // Saves stream (to rank 0 only; InvalidArgument for another to_rank): each
  // tensor is gathered whole over tp by the data-parallel copy rank 0
  // belongs to and sent on from its stage, so no rank holds more than a few
  // whole tensors beyond the inner plugin's own gathers. Pieces are indexed
  // by the whole model's table (and the whole state's list). A save's
  // model_state_dict / optimizer_state_dict (to_rank 0) collect the same
  // streams.
  bool streams_state() const override { return true; }
  absl::Status stream_model_state(const nn::ParameterStore& store, int to_rank,
                                  const nn::StatePieceFn& piece) override;
  absl::StatusOr<nn::StreamedOptimizerState> stream_optimizer_state(const nn::Optimizer& optimizer,
                                                                    int to_rank) override;

  struct State;

 private:
  explicit HybridParallelPlugin(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_HYBRID_HYBRID_PARALLEL_PLUGIN_H_
