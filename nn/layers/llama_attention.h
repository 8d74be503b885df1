// colossal::nn — Llama's self-attention: separate q/k/v projections, rotary
// position embedding, grouped-query heads, causal softmax, output projection.
//
//   q = q_proj(x) [B, T, H D]   k = k_proj(x), v = v_proj(x) [B, T, KV D]
//   qkv = rope_pack(q, k, v)    [B, T, (H + 2 KV) D]   (kernels/rope: q and k
//                                rotated by position, v copied, one pass)
//   y = attention_core(qkv)     [B, T, H D]            (attention_core.h)
//   out = o_proj(y)             [B, T, C]
//
// Children (Linear, WeightLayout::kOutIn: torch.nn.Linear's [out, in]):
// "<name>.q_proj" [H D, C], "<name>.k_proj" and "<name>.v_proj" [KV D, C],
// "<name>.o_proj" [C, H D]; biases on q/k/v with qkv_bias and on o with
// o_bias (Hugging Face's attention_bias sets both; Qwen2 has q/k/v's only). With name "model.layers.<i>.self_attn" these are Hugging
// Face's names. Input [B, T, C] -> [B, T, C]. Positions are 0 .. T-1 of each
// sequence (of each document, with packed documents). The backward rotates dq, dk back (the transpose of the rotation)
// and sums the three projections' input gradients.
//
//   auto rope = *RotaryTable::create(64, 500000.0, std::nullopt);
//   LlamaAttention attn("model.layers.0.self_attn", {2048, 32, 8, 64}, rope, DType::kF32);
#ifndef COLOSSAL_NN_LAYERS_LLAMA_ATTENTION_H_
#define COLOSSAL_NN_LAYERS_LLAMA_ATTENTION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "nn/layers/attention_core.h"
#include "nn/layers/documents.h"
#include "nn/layers/linear.h"
#include "nn/layers/tensor_parallel.h"
#include "nn/layers/rotary.h"
#include "nn/module/module.h"

namespace colossal::nn {

struct LlamaAttentionShape {
  int64_t hidden = 0;    // C
  int64_t heads = 0;     // H
  int64_t kv_heads = 0;  // KV (H a multiple of it)
  int64_t head_dim = 0;  // D (even)
  bool qkv_bias = false;  // q/k/v_proj biases (attention_bias, or Qwen2's)
  bool o_bias = false;    // o_proj's (attention_bias)
};

class LlamaAttention : public Module {
 public:
  // With tensor parallelism q/k/v_proj are column-parallel (each rank
  // computes heads / tp.size() query heads and kv_heads / tp.size() key/value
  // heads, whole heads, so grouping is unchanged), o_proj row-parallel, and the
  // backward sums the input gradient over the group. Both head counts must be
  // multiples of the group's size (checked in forward).
  // `documents` (may be null): the model's packed documents; while it holds
  // some, rope takes their positions and each document attends to itself
  // only (documents.h).
  LlamaAttention(std::string name, LlamaAttentionShape shape, std::shared_ptr<RotaryTable> rope,
                 core::DType dtype, const TensorParallel& tp = {},
                 std::shared_ptr<const DocumentsSlot> documents = nullptr);
  const char* type() const override { return "LlamaAttention"; }
  void set_impl(AttentionImpl impl) { impl_ = impl; }

 protected:
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;

 private:
  LlamaAttentionShape shape_;
  std::shared_ptr<RotaryTable> rope_;
  std::shared_ptr<const DocumentsSlot> documents_;
  core::DType dtype_;
  TensorParallel tp_;
  AttentionImpl impl_ = AttentionImpl::kAuto;
  std::shared_ptr<RegionGrad> region_grad_;  // q, k and v's input gradient
  Linear q_proj_, k_proj_, v_proj_, o_proj_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_LLAMA_ATTENTION_H_
