// colossal::nn — causal scaled-dot-product attention over one packed q|k|v
// buffer, with grouped-query heads: the middle of GPT-2's and Llama's
// attention layers (no parameters, so not a Module).
//
//   qkv [B, T, (H + 2 KV) D]: per row the H query heads, then the KV key heads,
//        then the KV value heads (GPT-2's c_attn output is this with KV = H;
//        Llama's rope_pack output, kernels/rope, is this with KV <= H)
//   y   [B, T, H D] = softmax(q k^T / sqrt(D), causal) v, heads merged, where
//        query head h reads key/value head h / (H / KV) (Hugging Face's repeat_kv)
//
// Two implementations (AttentionImpl, attention.h):
//   * fused (kernels/attention, FlashAttention-2): CUDA, bfloat16/float16,
//     head size 64 or 128. Reads q, k, v straight out of qkv, writes y merged,
//     saves qkv, y and the float32 logsumexp [B, H, T]; no [T, T] matrix.
//   * explicit: everything else (CPU, float32/float64, other head sizes), or
//     when forced. The query heads of one group are adjacent, so with q as
//     [B*KV, r*T, D] (r = H / KV) and k, v as [B*KV, T, D] the scores are one
//     batched GEMM [B*KV, r*T, T] = [B*H, T, T]; the backward's dk = ds^T q and
//     dv = p^T dy sum over the group by the same GEMMs. Saves q, k, v and the
//     probabilities [B*H, T, T].
//
// With packed documents (documents.h) each document attends to itself only:
// the varlen kernels (kernels/attention), fused on CUDA (bfloat16/float16,
// head size 64 or 128; anything else there is refused) and the CPU reference
// (any float type, computed in double) on the CPU. lse is then [H, B*T].
//
//   AttentionCoreSaved saved;
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor y, attention_core_forward(ctx, qkv, {12, 12, 64},
//                                                              AttentionImpl::kAuto, saved));
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor dqkv, attention_core_backward(ctx, saved, dy));
#ifndef COLOSSAL_NN_LAYERS_ATTENTION_CORE_H_
#define COLOSSAL_NN_LAYERS_ATTENTION_CORE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "nn/layers/documents.h"
#include "nn/module/module.h"

namespace colossal::nn {

enum class AttentionImpl {
  kAuto,      // fused where supported (see above), explicit elsewhere
  kExplicit,  // always the explicit GEMM -> softmax -> GEMM path
};

// COLOSSAL_ATTENTION from the environment: unset, "" or "auto" -> kAuto,
// "explicit" -> kExplicit; anything else is an InvalidArgumentError.
absl::StatusOr<AttentionImpl> attention_impl_from_env();

struct AttentionHeads {
  int64_t heads = 0;     // H, query heads
  int64_t kv_heads = 0;  // KV, key/value heads; H must be a multiple
  int64_t head_dim = 0;  // D
};

// What the backward needs; one per forward call.
struct AttentionCoreSaved {
  // y is not counted: it is the output projection's saved input, counted there.
  SavedStats stats() const { return saved_stats({q, k, v, probs, qkv, lse}); }
  AttentionHeads shape;
  bool fused = false;  // qkv, y and lse saved (the fused kernels, or documents)
  std::shared_ptr<const Documents> documents;  // the forward's, or null
  core::Tensor q, k, v, probs;  // explicit: [B*H|B*KV, T, D] x3 and [B*H, T, T]
  core::Tensor qkv, y, lse;     // fused: the input, the output and [B, H, T] float32
};

// qkv [B, T, (H + 2 KV) D] of the attention's dtype -> y [B, T, H D].
// kAuto also honours COLOSSAL_ATTENTION. InvalidArgumentError for shapes that
// do not fit `shape` or H not a multiple of KV, and documents of another
// [B, T]; FailedPrecondition for documents on CUDA the fused kernels do not take.
absl::StatusOr<core::Tensor> attention_core_forward(core::Context& ctx, const core::Tensor& qkv,
                                                    AttentionHeads shape, AttentionImpl impl,
                                                    AttentionCoreSaved& saved,
                                                    std::shared_ptr<const Documents> documents = nullptr);

// dy [B, T, H D] -> dqkv [B, T, (H + 2 KV) D] (a new tensor).
absl::StatusOr<core::Tensor> attention_core_backward(core::Context& ctx,
                                                     const AttentionCoreSaved& saved,
                                                     const core::Tensor& dy);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_ATTENTION_CORE_H_
