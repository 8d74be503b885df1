// colossal::nn — a sparse mixture of experts (Mixtral's block_sparse_moe):
// each token goes to the top_k of num_experts gated MLPs its router picks,
// and the layer's output is their outputs weighted by the router.
//
//   logits = gate(x)                        [N, E]   (no bias)
//   experts, w = top_k of softmax(logits)   (w renormalised to sum 1 with
//                                            normalize_top_k: Mixtral's rule)
//   out[t] = sum_i w[t, i] * expert_{experts[t, i]}(x[t])
//
// Children (Linear, WeightLayout::kOutIn, Hugging Face Mixtral's names with
// name "model.layers.<i>.block_sparse_moe"): "<name>.gate" [E, C] and, per
// expert j, a LlamaMlp "<name>.experts.<j>" whose projections are "w1" (gate,
// [I, C]), "w3" (up, [I, C]) and "w2" (down, [C, I]).
//
// The routing is kernels/moe: the router's choice comes to the host (one
// stream synchronisation per forward; the expert GEMMs need their row counts
// there), the rows are sorted by expert, each expert runs once on its
// contiguous rows, and one kernel sums the weighted outputs (plus the
// residual in forward_add). Every expert runs its forward and backward even
// when it receives no rows, so the per-module hooks of ZeRO-3, Gemini and
// DDP's buckets see every parameter every step (its gradient is += 0).
// The gradient reaches the router through the weights (route_backward); the
// choice itself is held fixed, as in PyTorch.
//
// Saves the logits, the choice, the expert outputs [N * k, C] and the
// experts' own contexts. Input [..., C] -> [..., C].
//
//   SparseMoe moe("model.layers.0.block_sparse_moe",
//                 {.hidden = 4096, .intermediate = 14336, .num_experts = 8, .top_k = 2}, DType::kBF16);
#ifndef COLOSSAL_NN_LAYERS_SPARSE_MOE_H_
#define COLOSSAL_NN_LAYERS_SPARSE_MOE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/layers/linear.h"
#include "nn/layers/llama_mlp.h"
#include "nn/module/module.h"

namespace colossal::nn {

struct SparseMoeShape {
  int64_t hidden = 0;        // C
  int64_t intermediate = 0;  // I, each expert's
  int64_t num_experts = 0;   // E, in [1, 1024]
  int64_t top_k = 0;         // k, in [1, min(E, 8)]
  bool normalize_top_k = true;
};

class SparseMoe : public Module {
 public:
  // The shape must be valid (the model config checks it; forward reports
  // kernels/moe's error otherwise).
  SparseMoe(std::string name, const SparseMoeShape& shape, core::DType dtype);
  const char* type() const override { return "SparseMoe"; }
  const SparseMoeShape& shape() const { return shape_; }

  // residual + forward(x), the add in the combining kernel.
  absl::StatusOr<ForwardResult> forward_add(core::Context& ctx, const core::Tensor& x,
                                            const core::Tensor& residual);

 protected:
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;

 private:
  absl::StatusOr<ForwardResult> run_forward(core::Context& ctx, const core::Tensor& input,
                                            const core::Tensor& residual);

  SparseMoeShape shape_;
  core::DType dtype_;
  Linear gate_;
  std::vector<std::unique_ptr<LlamaMlp>> experts_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_SPARSE_MOE_H_
