// colossal::nn — GPT-2's causal self-attention.
//
//   qkv = c_attn(x)                      [B, T, 3C]: q | k | v along the last dim
//   q, k, v -> [B*NH, T, hs] per head    (head h owns channels h*hs .. h*hs+hs-1)
//   p = causal_softmax(q k^T / sqrt(hs)) (batched GEMM, kernels/softmax)
//   y = p v -> [B, T, C] (heads merged)  out = c_proj(y)
//
// Two implementations of the middle (softmax(q k^T / sqrt(hs)) v):
//   * fused (kernels/attention, FlashAttention-2): on CUDA for bfloat16 and
//     float16 with head size 64 or 128. Reads q, k, v straight out of qkv
//     [B, T, 3C] and writes y as [B, T, C]: no head split/merge copies, no
//     [B*NH, T, T] matrix. Saves qkv, y and the float32 logsumexp [B, NH, T];
//     the backward recomputes the probabilities tile by tile.
//   * explicit: everything else (CPU, float32/float64, other head sizes), or
//     when forced (AttentionImpl::kExplicit, or COLOSSAL_ATTENTION=explicit in
//     the environment, for comparisons). The description below is this path.
//
// Children (Linear, WeightLayout::kInOut like HF's Conv1D): "<name>.c_attn"
// [C, 3C] and "<name>.c_proj" [C, C]; with name "transformer.h.<i>.attn" these
// are Hugging Face GPT-2's parameter names. Input [B, T, C] -> [B, T, C].
// The explicit path saves q, k, v and the probabilities [B*NH, T, T] (no
// dropout); heads are split/merged with strided 2-D copies (one per batch and
// head). Devices and dtypes: see nn/layers/BUILD.
//
//   CausalSelfAttention attn("transformer.h.0.attn", 768, 12, DType::kF32);
//   COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, attn.forward(ctx, x));
#ifndef COLOSSAL_NN_LAYERS_ATTENTION_H_
#define COLOSSAL_NN_LAYERS_ATTENTION_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "nn/layers/linear.h"
#include "nn/module/module.h"

namespace colossal::nn {

enum class AttentionImpl {
  kAuto,      // fused where supported (see above), explicit elsewhere
  kExplicit,  // always the explicit GEMM -> softmax -> GEMM path
};

// COLOSSAL_ATTENTION from the environment: unset, "" or "auto" -> kAuto,
// "explicit" -> kExplicit; anything else is an InvalidArgumentError.
absl::StatusOr<AttentionImpl> attention_impl_from_env();

class CausalSelfAttention : public Module {
 public:
  // channels must be a multiple of heads (checked in forward).
  CausalSelfAttention(std::string name, int64_t channels, int64_t heads, core::DType dtype);
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
  AttentionImpl impl_ = AttentionImpl::kAuto;
  Linear c_attn_, c_proj_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_ATTENTION_H_
