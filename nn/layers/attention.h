// colossal::nn — GPT-2's causal self-attention.
//
//   qkv = c_attn(x)                      [B, T, 3C]: q | k | v along the last dim
//   q, k, v -> [B*NH, T, hs] per head    (head h owns channels h*hs .. h*hs+hs-1)
//   p = causal_softmax(q k^T / sqrt(hs)) (batched GEMM, kernels/softmax)
//   y = p v -> [B, T, C] (heads merged)  out = c_proj(y)
//
// The middle (softmax(q k^T / sqrt(hs)) v) is attention_core.h with as many
// key/value heads as query heads: c_attn's output [B, T, 3C] is its packed
// q|k|v layout. It is fused (kernels/attention) on CUDA for bfloat16/float16
// with head size 64 or 128, explicit elsewhere (or when forced:
// AttentionImpl::kExplicit, COLOSSAL_ATTENTION=explicit).
//
// Children (Linear, WeightLayout::kInOut like HF's Conv1D): "<name>.c_attn"
// [C, 3C] and "<name>.c_proj" [C, C]; with name "transformer.h.<i>.attn" these
// are Hugging Face GPT-2's parameter names. Input [B, T, C] -> [B, T, C].
// Devices and dtypes: see nn/layers/BUILD.
//
//   CausalSelfAttention attn("transformer.h.0.attn", 768, 12, DType::kF32);
//   COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, attn.forward(ctx, x));
#ifndef COLOSSAL_NN_LAYERS_ATTENTION_H_
#define COLOSSAL_NN_LAYERS_ATTENTION_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "nn/layers/attention_core.h"
#include "nn/layers/linear.h"
#include "nn/layers/tensor_parallel.h"
#include "nn/module/module.h"

namespace colossal::nn {

class CausalSelfAttention : public Module {
 public:
  // channels must be a multiple of heads (checked in forward). With tensor
  // parallelism c_attn is column-parallel (q, k and v split alike: each rank
  // computes heads / tp.size() whole heads), c_proj row-parallel, and the
  // backward sums the input gradient over the group; heads must be a multiple
  // of the group's size (checked in forward).
  CausalSelfAttention(std::string name, int64_t channels, int64_t heads, core::DType dtype,
                      const TensorParallel& tp = {});
  const char* type() const override { return "CausalSelfAttention"; }
  Linear& c_attn() { return c_attn_; }
  Linear& c_proj() { return c_proj_; }
  // kAuto (the default) also honours COLOSSAL_ATTENTION; kExplicit forces the
  // explicit path. Takes effect at the next forward.
  void set_impl(AttentionImpl impl) { impl_ = impl; }
  AttentionImpl impl() const { return impl_; }

 protected:
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;

 private:
  int64_t channels_, heads_;
  core::DType dtype_;
  TensorParallel tp_;
  AttentionImpl impl_ = AttentionImpl::kAuto;
  std::shared_ptr<RegionGrad> region_grad_;  // c_attn's input gradient
  Linear c_attn_, c_proj_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_ATTENTION_H_
