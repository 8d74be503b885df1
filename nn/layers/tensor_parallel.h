// colossal::nn — tensor parallelism inside layers (Megatron-LM's 1D scheme,
// Colossal-AI's shardformer Linear1D_Col / Linear1D_Row).
//
// A TensorParallel names the group of ranks that split one layer's weights.
// Layers built with one declare their parameters whole, with a TensorSplit
// (nn/module/parameter.h), so each rank's table holds its piece and the
// pieces initialise to the one-process values. The layers exchange
// activations themselves:
//   * column-parallel Linear: each rank computes out/size output features from
//     the whole input; no communication in the layer. The input gradient is a
//     partial sum, reduced once where the parallel region begins (the
//     attention or MLP module: Llama's q, k and v projections share one
//     reduction).
//   * row-parallel Linear: each rank takes in/size input features (a column
//     layer's output), and the partial outputs are summed over the group
//     (all_reduce_sum) before the bias, which rank 0 adds alone.
// So between regions every rank holds the same activations, and gradients of
// unsplit parameters (norms, biases of row layers) come out equal on every
// rank without communication.
//
// Sequence parallelism (Megatron's, Colossal-AI's split_gather): between
// regions each rank holds T / size positions of every sequence instead (norms,
// residuals and dropout work on 1/size of the activations); a region's input
// is all-gathered along the sequence (its gradient reduce-scattered back) and
// a row layer reduce-scatters its partial outputs along the sequence (its
// gradient all-gathered). Gradients of unsplit parameters are then partial
// sums (each rank's positions' part), which the plugin adds up over the
// group before the step.
//
//   TensorParallel tp{group};                     // group: comm/process_group
//   Linear fc(name, 768, 3072, {.parallel = Parallel::kColumn, .tp = tp});
//   COLOSSAL_RETURN_IF_ERROR(all_reduce_sum(ctx, tp, dx, "the MLP's input gradient"));
#ifndef COLOSSAL_NN_LAYERS_TENSOR_PARALLEL_H_
#define COLOSSAL_NN_LAYERS_TENSOR_PARALLEL_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/process_group/process_group.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "nn/module/module.h"
#include "nn/module/parameter.h"

namespace colossal::nn {

struct TensorParallel {
  std::shared_ptr<comm::ProcessGroup> group;  // null: no tensor parallelism
  bool sequence_parallel = false;             // split_gather between regions
  // Ulysses sequence parallelism (Colossal-AI's sequence_parallelism_mode
  // "all_to_all"; null: none): the ranks of this group each hold T / n
  // positions of every sequence through the whole model, with whole weights;
  // around attention an all-to-all trades positions for heads
  // (seq_to_heads), so each rank attends over every position with heads / n
  // heads, and back (heads_to_seq). Every parameter's gradient is then a
  // partial sum over the group, which the plugin reduces with the data-
  // parallel ones.
  std::shared_ptr<comm::ProcessGroup> sequence_group{};

  int size() const { return group != nullptr ? group->size() : 1; }
  int rank() const { return group != nullptr ? group->rank() : 0; }
  bool enabled() const { return size() > 1; }
  bool splits_sequence() const { return enabled() && sequence_parallel; }
  int sequence_size() const { return sequence_group != nullptr ? sequence_group->size() : 1; }
  int sequence_rank() const { return sequence_group != nullptr ? sequence_group->rank() : 0; }
  bool all_to_all() const { return sequence_size() > 1; }
  // Activations between layers hold this rank's positions only (either
  // mode): the model chunks the embedding's output and pads its gradient.
  bool chunks_sequence() const { return splits_sequence() || all_to_all(); }
  // The attention heads one rank computes.
  int64_t local_heads(int64_t heads) const { return heads / size() / sequence_size(); }
  // This rank's split of dimension `dim` (blocks: see TensorSplit).
  TensorSplit split(int dim, int blocks = 1) const {
    return enabled() ? TensorSplit{dim, blocks, size(), rank()} : TensorSplit{};
  }
};

// Reduces `t` over tp's group in place with `op` (nothing without tensor
// parallelism). CUDA tensors: issued after the work on ctx's compute stream,
// which then waits for it (no host wait); CPU tensors: returns once done.
// `what` names the tensor in errors. all_reduce_sum: op kSum.
absl::Status all_reduce(core::Context& ctx, const TensorParallel& tp, const core::Tensor& t,
                        comm::ReduceOp op, const char* what);
absl::Status all_reduce_sum(core::Context& ctx, const TensorParallel& tp, const core::Tensor& t,
                            const char* what);

// Sequence pieces of [B, T, C] activations (T divisible by the group's size,
// else InvalidArgument naming T): this rank's positions [r T/size, (r+1) T/size)
// of x; every rank's chunk gathered back into [B, T, C]; the sum over the
// group of x's chunk for this rank (reduce-scatter); and a chunk's gradient
// as [B, T, C] zero outside this rank's positions. sequence_chunk and
// pad_sequence split over the sequence group under all_to_all (x may be any
// [B, T, ...] tensor, int32 targets too), else over tp's group.
absl::StatusOr<core::Tensor> sequence_chunk(core::Context& ctx, const TensorParallel& tp,
                                            const core::Tensor& x);
absl::StatusOr<core::Tensor> gather_sequence(core::Context& ctx, const TensorParallel& tp,
                                             const core::Tensor& chunk);
absl::StatusOr<core::Tensor> reduce_scatter_sequence(core::Context& ctx, const TensorParallel& tp,
                                                     const core::Tensor& x);
absl::StatusOr<core::Tensor> pad_sequence(core::Context& ctx, const TensorParallel& tp,
                                          const core::Tensor& chunk);

// all_to_all sequence parallelism (no-ops without it): x [B, T/n, G * c] of
// this rank's positions, whose last dimension is G groups (GPT-2's q | k | v:
// 3; one projection: 1) of c columns each, n blocks of c / n (heads) per
// group -> [B, T, G * c / n]: every position, this rank's block of each
// group. heads_to_seq is its inverse (and each is the other's backward).
// InvalidArgument when the columns do not split over the group.
absl::StatusOr<core::Tensor> seq_to_heads(core::Context& ctx, const TensorParallel& tp,
                                          const core::Tensor& x, int groups);
absl::StatusOr<core::Tensor> heads_to_seq(core::Context& ctx, const TensorParallel& tp,
                                          const core::Tensor& y, int groups);

// A host value summed over `group` (a collective over it; staged through
// ctx's device where that is a GPU, so NCCL groups take it too). `what`
// names it in errors.
absl::StatusOr<double> sum_over(core::Context& ctx, comm::ProcessGroup& group, double value,
                                const char* what);
// `value` summed over the sequence group under all_to_all, else `value`.
absl::StatusOr<double> sum_over_sequence(core::Context& ctx, const TensorParallel& tp,
                                         double value);

// A region's input: all-gathered along the sequence with sequence
// parallelism, else `x` (its gradient is RegionGrad's below).
absl::StatusOr<core::Tensor> region_input(core::Context& ctx, const TensorParallel& tp,
                                          const core::Tensor& x);

// The input gradient of a parallel region whose first layers are column
// Linears reading one input (GPT-2's c_attn, or c_fc; Llama's q, k, v, or
// gate, up), reduce-scattered back along the sequence with sequence
// parallelism (else summed over the group) while the last of them
// computes its weight gradient (Megatron-LM's asynchronous gradient
// all-reduce): each Linear's backward computes its input gradient first and
// adds it into sum() (accumulating GEMMs, no separate add), contributed()
// starts the reduction once all `contributors` have added theirs, then the
// Linear runs its weight- and bias-gradient GEMMs while the collective runs
// (CUDA: on the group's stream, after the compute stream's work so far; CPU:
// on the group's worker thread). The region's owner calls finish() for the
// reduced gradient. reset() (the owner's forward) forgets a backward that
// failed midway. Without tensor parallelism nothing is communicated and
// finish() returns the sum.
class RegionGrad {
 public:
  RegionGrad(TensorParallel tp, int contributors) : tp_(std::move(tp)), contributors_(contributors) {}
  RegionGrad(const RegionGrad&) = delete;
  RegionGrad& operator=(const RegionGrad&) = delete;
  ~RegionGrad();

  // The running sum (in the region input's shape), empty before the first contributor.
  const core::Tensor& sum() const { return sum_; }
  // `sum` is the running sum with one more contributor's gradient added; the
  // last contributor's call starts the reduction. Internal error past
  // `contributors` in one backward.
  absl::Status contributed(core::Context& ctx, core::Tensor sum);
  // The reduced input gradient; Internal error unless every contributor has
  // added its part. Ready for the next backward after.
  absl::StatusOr<core::Tensor> finish(core::Context& ctx);
  void reset();

 private:
  absl::Status start(core::Context& ctx);
  TensorParallel tp_;
  int contributors_;
  int arrived_ = 0;
  core::Tensor sum_, packed_, result_;  // packed_: the reduce-scatter's input, kept until done
  comm::WorkPtr work_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_TENSOR_PARALLEL_H_
