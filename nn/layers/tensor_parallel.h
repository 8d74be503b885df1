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
//   TensorParallel tp{group};                     // group: comm/process_group
//   Linear fc(name, 768, 3072, {.parallel = Parallel::kColumn, .tp = tp});
//   COLOSSAL_RETURN_IF_ERROR(all_reduce_sum(ctx, tp, dx, "the MLP's input gradient"));
#ifndef COLOSSAL_NN_LAYERS_TENSOR_PARALLEL_H_
#define COLOSSAL_NN_LAYERS_TENSOR_PARALLEL_H_

#include <memory>

#include "absl/status/status.h"
#include "comm/process_group/process_group.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "nn/module/module.h"
#include "nn/module/parameter.h"

namespace colossal::nn {

struct TensorParallel {
  std::shared_ptr<comm::ProcessGroup> group;  // null: no tensor parallelism

  int size() const { return group != nullptr ? group->size() : 1; }
  int rank() const { return group != nullptr ? group->rank() : 0; }
  bool enabled() const { return size() > 1; }
  // This rank's split of dimension `dim` (blocks: see TensorSplit).
  TensorSplit split(int dim, int blocks = 1) const {
    return enabled() ? TensorSplit{dim, blocks, size(), rank()} : TensorSplit{};
  }
};

// Sums `t` over tp's group in place (nothing without tensor parallelism).
// CUDA tensors: issued after the work on ctx's compute stream, which then
// waits for it (no host wait); CPU tensors: returns once done. `what` names
// the tensor in errors.
absl::Status all_reduce_sum(core::Context& ctx, const TensorParallel& tp, const core::Tensor& t,
                            const char* what);

// Where a parallel region begins (Megatron's copy_to_tensor_model_parallel_region):
// the forward passes its input on unchanged, the backward sums the input
// gradient over the group. Has no parameters; a Sequential region (GPT-2's
// MLP) puts one first.
class TensorParallelRegion : public Module {
 public:
  TensorParallelRegion(std::string name, TensorParallel tp)
      : Module(std::move(name)), tp_(std::move(tp)) {}
  const char* type() const override { return "TensorParallelRegion"; }

 protected:
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;

 private:
  TensorParallel tp_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_TENSOR_PARALLEL_H_
