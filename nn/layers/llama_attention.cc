#include "nn/layers/llama_attention.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "kernels/rope/rope.h"
#include "nn/layers/llama_projection.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {
namespace {

struct LlamaAttentionSaved : Saved {
  SavedStats stats() const override {
    SavedStats s = saved_stats({}, {q_proj.get(), k_proj.get(), v_proj.get(), o_proj.get()});
    const SavedStats c = core.stats();
    return {s.tensors + c.tensors, s.bytes + c.bytes};
  }
  std::unique_ptr<Saved> q_proj, k_proj, v_proj, o_proj;
  AttentionCoreSaved core;
};

using internal::llama_projection;

}  // namespace

LlamaAttention::LlamaAttention(std::string name, LlamaAttentionShape shape,
                               std::shared_ptr<RotaryTable> rope, core::DType dtype,
                               const TensorParallel& tp, std::shared_ptr<const DocumentsSlot> documents)
    : Module(name),
      shape_(shape),
      rope_(std::move(rope)),
      documents_(std::move(documents)),
      dtype_(dtype),
      tp_(tp),
      region_grad_(std::make_shared<RegionGrad>(tp, 3)),
      q_proj_(name + ".q_proj", shape.hidden, shape.heads * shape.head_dim,
              llama_projection(shape.qkv_bias, dtype, Parallel::kColumn, tp, region_grad_)),
      k_proj_(name + ".k_proj", shape.hidden, shape.kv_heads * shape.head_dim,
              llama_projection(shape.qkv_bias, dtype, Parallel::kColumn, tp, region_grad_)),
      v_proj_(name + ".v_proj", shape.hidden, shape.kv_heads * shape.head_dim,
              llama_projection(shape.qkv_bias, dtype, Parallel::kColumn, tp, region_grad_)),
      o_proj_(name + ".o_proj", shape.heads * shape.head_dim, shape.hidden,
              llama_projection(shape.o_bias, dtype, Parallel::kRow, tp)) {
  register_child(&q_proj_);
  register_child(&k_proj_);
  register_child(&v_proj_);
  register_child(&o_proj_);
}

absl::StatusOr<ForwardResult> LlamaAttention::forward_impl(core::Context& ctx,
                                                           const core::Tensor& input) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, input, "input"));
  if (input.rank() != 3 || input.dim(2) != shape_.hidden) {
    return absl::InvalidArgumentError(
        absl::StrCat("input is ", input.to_string(), "; expected [B, T, ", shape_.hidden, "]"));
  }
  if (rope_ == nullptr || rope_->head_dim() != shape_.head_dim) {
    return absl::FailedPreconditionError(
        absl::StrCat(name(), ": no rotary table for head_dim ", shape_.head_dim));
  }
  const int split = tp_.size() * tp_.sequence_size();
  if (shape_.heads % split != 0 || shape_.kv_heads % split != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        name(), ": ", shape_.heads, " query and ", shape_.kv_heads,
        " key/value heads do not split over ", tp_.size(), " tensor-parallel x ",
        tp_.sequence_size(), " sequence-parallel ranks"));
  }
  // With sequence parallelism the input holds this rank's positions: gather them.
  region_grad_->reset();
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor x, region_input(ctx, tp_, input));
  auto saved = std::make_unique<LlamaAttentionSaved>();
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult q, q_proj_.forward(ctx, x));
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult k, k_proj_.forward(ctx, x));
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult v, v_proj_.forward(ctx, x));
  saved->q_proj = std::move(q.saved);
  saved->k_proj = std::move(k.saved);
  saved->v_proj = std::move(v.saved);
  // Under all_to_all the projections hold this rank's positions: trade them
  // for every position of this rank's heads (rope then sees each position's
  // own index).
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor qh, seq_to_heads(ctx, tp_, q.output, 1));
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor kh, seq_to_heads(ctx, tp_, k.output, 1));
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor vh, seq_to_heads(ctx, tp_, v.output, 1));
  // This rank's heads (all of them without tensor or sequence parallelism).
  const int64_t B = qh.dim(0), T = qh.dim(1), H = tp_.local_heads(shape_.heads),
                KV = tp_.local_heads(shape_.kv_heads), D = shape_.head_dim;
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor inv_freq, rope_->on_device(ctx));
  std::shared_ptr<const Documents> docs = documents_ != nullptr ? documents_->current : nullptr;
  if (docs != nullptr && (docs->batch != B || docs->seq != T)) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": the packed documents are ", docs->batch, " x ",
                                                   docs->seq, " tokens; the input is ", B, " x ", T));
  }
  const int32_t* positions = docs != nullptr ? docs->positions.data<int32_t>() : nullptr;
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor qkv, empty(ctx, {B, T, (H + 2 * KV) * D}, dtype_));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx,
          kernels::rope::rope_pack_forward_cpu(qkv.raw_data(), qh.raw_data(), kh.raw_data(),
                                               vh.raw_data(), inv_freq.data<float>(), positions, B, T, H,
                                               KV, D, dtype_),
          kernels::rope::rope_pack_forward_cuda(qkv.raw_data(), qh.raw_data(), kh.raw_data(),
                                                vh.raw_data(), inv_freq.data<float>(), positions, B, T,
                                                H, KV, D, dtype_, cuda_stream(ctx))),
      "rotary embedding forward"));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y,
                            attention_core_forward(ctx, qkv, {H, KV, D}, impl_, saved->core, docs));
  COLOSSAL_ASSIGN_OR_RETURN(y, heads_to_seq(ctx, tp_, y, 1));
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, o_proj_.forward(ctx, y));
  saved->o_proj = std::move(out.saved);
  return ForwardResult{out.output, std::move(saved)};
}

absl::StatusOr<core::Tensor> LlamaAttention::backward_impl(core::Context& ctx, Saved& saved,
                                                           const core::Tensor& grad_output) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, grad_output, "grad_output"));
  COLOSSAL_ASSIGN_OR_RETURN(LlamaAttentionSaved * s, saved_as<LlamaAttentionSaved>(saved));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dy, o_proj_.backward(ctx, *s->o_proj, grad_output));
  COLOSSAL_ASSIGN_OR_RETURN(dy, seq_to_heads(ctx, tp_, dy, 1));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dqkv, attention_core_backward(ctx, s->core, dy));
  const int64_t B = dqkv.dim(0), T = dqkv.dim(1), H = tp_.local_heads(shape_.heads),
                KV = tp_.local_heads(shape_.kv_heads), D = shape_.head_dim;
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor inv_freq, rope_->on_device(ctx));
  // The forward's documents (the slot may hold another micro-batch's by now).
  const int32_t* positions =
      s->core.documents != nullptr ? s->core.documents->positions.data<int32_t>() : nullptr;
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dq, empty(ctx, {B, T, H * D}, dtype_));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dk, empty(ctx, {B, T, KV * D}, dtype_));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dv, empty(ctx, {B, T, KV * D}, dtype_));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx,
          kernels::rope::rope_pack_backward_cpu(dq.raw_data(), dk.raw_data(), dv.raw_data(),
                                                dqkv.raw_data(), inv_freq.data<float>(), positions, B,
                                                T, H, KV, D, dtype_),
          kernels::rope::rope_pack_backward_cuda(dq.raw_data(), dk.raw_data(), dv.raw_data(),
                                                 dqkv.raw_data(), inv_freq.data<float>(), positions, B,
                                                 T, H, KV, D, dtype_, cuda_stream(ctx))),
      "rotary embedding backward"));
  dqkv = core::Tensor();  // free it before the projections' backward
  COLOSSAL_ASSIGN_OR_RETURN(dq, heads_to_seq(ctx, tp_, dq, 1));
  COLOSSAL_ASSIGN_OR_RETURN(dk, heads_to_seq(ctx, tp_, dk, 1));
  COLOSSAL_ASSIGN_OR_RETURN(dv, heads_to_seq(ctx, tp_, dv, 1));
  // v_proj, k_proj, q_proj: the reverse of the forward, so hooks see the
  // children in reverse order as everywhere else. Each adds its input
  // gradient into one sum; q_proj (the largest) starts the sum's reduction
  // before its weight GEMM.
  COLOSSAL_RETURN_IF_ERROR(v_proj_.backward(ctx, *s->v_proj, dv).status());
  COLOSSAL_RETURN_IF_ERROR(k_proj_.backward(ctx, *s->k_proj, dk).status());
  COLOSSAL_RETURN_IF_ERROR(q_proj_.backward(ctx, *s->q_proj, dq).status());
  return region_grad_->finish(ctx);
}

}  // namespace colossal::nn
