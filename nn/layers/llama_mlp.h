// colossal::nn — Llama's gated MLP (SwiGLU):
//
//   out = down_proj(silu(gate_proj(x)) * up_proj(x))
//
// Children (Linear, WeightLayout::kOutIn): "<name>.gate_proj" and
// "<name>.up_proj" [I, C], "<name>.down_proj" [C, I] (other names through
// LlamaMlpNames), biases with mlp_bias
// (Hugging Face's flag); with name "model.layers.<i>.mlp" these are Hugging
// Face's names. The product is kernels/activation's swiglu (one pass forward,
// one pass backward). Saves the gate and up activations [B, T, I].
// Input [..., C] -> [..., C].
//
//   LlamaMlp mlp("model.layers.0.mlp", 2048, 8192, /*bias=*/false, DType::kF32);
#ifndef COLOSSAL_NN_LAYERS_LLAMA_MLP_H_
#define COLOSSAL_NN_LAYERS_LLAMA_MLP_H_

#include <cstdint>
#include <string>

#include "nn/layers/linear.h"
#include "nn/layers/tensor_parallel.h"
#include "nn/module/module.h"

namespace colossal::nn {

// The projections' child names: Hugging Face Llama's by default; Mixtral's
// experts call them w1 (gate), w3 (up) and w2 (down).
struct LlamaMlpNames {
  const char* gate = "gate_proj";
  const char* up = "up_proj";
  const char* down = "down_proj";
};

class LlamaMlp : public Module {
 public:
  // With tensor parallelism gate_proj and up_proj are column-parallel,
  // down_proj row-parallel, and the backward sums the input gradient over the
  // group; intermediate must split over it (the model checks). varying_rows:
  // an expert's, whose row count changes call to call (LinearOptions').
  LlamaMlp(std::string name, int64_t hidden, int64_t intermediate, bool bias, core::DType dtype,
           const TensorParallel& tp = {}, const LlamaMlpNames& names = {}, bool varying_rows = false);
  const char* type() const override { return "LlamaMlp"; }

  // residual + forward(x), the add in down_proj's GEMM (Linear::forward_add);
  // after it with tensor parallelism or when checkpointed.
  absl::StatusOr<ForwardResult> forward_add(core::Context& ctx, const core::Tensor& x,
                                            const core::Tensor& residual);

 protected:
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;

 private:
  // forward_impl, with `residual` (when defined) added by down_proj.
  absl::StatusOr<ForwardResult> run_forward(core::Context& ctx, const core::Tensor& input,
                                            const core::Tensor& residual);

  core::DType dtype_;
  TensorParallel tp_;
  std::shared_ptr<RegionGrad> region_grad_;  // gate and up's input gradient
  Linear gate_proj_, up_proj_, down_proj_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_LLAMA_MLP_H_
