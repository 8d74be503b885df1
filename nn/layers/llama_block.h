// colossal::nn — Llama's decoder layer (pre-RMSNorm, residual):
//
//   r = x + self_attn(input_layernorm(x))
//   y = r + mlp(post_attention_layernorm(r))
//
// Children "<name>.input_layernorm" (RMSNorm), "<name>.self_attn"
// (LlamaAttention), "<name>.post_attention_layernorm" (RMSNorm), "<name>.mlp"
// (LlamaMlp), or with num_experts > 0 "<name>.block_sparse_moe" (SparseMoe,
// Mixtral); with name "model.layers.<i>" every parameter has its Hugging
// Face name. Input [B, T, C] -> [B, T, C].
#ifndef COLOSSAL_NN_LAYERS_LLAMA_BLOCK_H_
#define COLOSSAL_NN_LAYERS_LLAMA_BLOCK_H_

#include <cstdint>
#include <memory>
#include <string>

#include "nn/layers/llama_attention.h"
#include "nn/layers/llama_mlp.h"
#include "nn/layers/rmsnorm.h"
#include "nn/layers/sparse_moe.h"
#include "nn/module/module.h"

namespace colossal::nn {

struct LlamaBlockShape {
  LlamaAttentionShape attention;
  int64_t intermediate = 0;  // I
  bool mlp_bias = false;
  float rms_norm_eps = 1e-6f;
  // A sparse mixture of experts in place of the MLP when > 0 (each expert an
  // MLP of width intermediate; no tensor parallelism).
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
};

class LlamaBlock : public Module {
 public:
  // tp: the attention and the MLP split over it (see their headers);
  // documents: the model's packed documents (LlamaAttention).
  LlamaBlock(std::string name, const LlamaBlockShape& shape, std::shared_ptr<RotaryTable> rope,
             core::DType dtype, const TensorParallel& tp = {},
             std::shared_ptr<const DocumentsSlot> documents = nullptr);
  const char* type() const override { return "LlamaBlock"; }
  LlamaAttention& self_attn() { return self_attn_; }

 protected:
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;

 private:
  RMSNorm input_layernorm_;
  LlamaAttention self_attn_;
  RMSNorm post_attention_layernorm_;
  std::unique_ptr<LlamaMlp> mlp_;  // dense blocks
  std::unique_ptr<SparseMoe> moe_;  // with num_experts > 0
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_LLAMA_BLOCK_H_
