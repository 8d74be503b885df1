#include "nn/layers/llama_block.h"

#include <utility>

#include "core/status/status.h"

namespace colossal::nn {
namespace {

struct LlamaBlockSaved : Saved {
  SavedStats stats() const override {
    return saved_stats({}, {input_layernorm.get(), self_attn.get(), post_attention_layernorm.get(),
                            mlp.get()});
  }
  std::unique_ptr<Saved> input_layernorm, self_attn, post_attention_layernorm, mlp;
};

}  // namespace

LlamaBlock::LlamaBlock(std::string name, const LlamaBlockShape& shape,
                       std::shared_ptr<RotaryTable> rope, core::DType dtype,
                       const TensorParallel& tp, std::shared_ptr<const DocumentsSlot> documents)
    : Module(name),
      input_layernorm_(name + ".input_layernorm", shape.attention.hidden,
                       {.eps = shape.rms_norm_eps, .dtype = dtype}),
      self_attn_(name + ".self_attn", shape.attention, std::move(rope), dtype, tp, std::move(documents)),
      post_attention_layernorm_(name + ".post_attention_layernorm", shape.attention.hidden,
                                {.eps = shape.rms_norm_eps, .dtype = dtype}) {
  register_child(&input_layernorm_);
  register_child(&self_attn_);
  register_child(&post_attention_layernorm_);
  if (shape.num_experts > 0) {
    moe_ = std::make_unique<SparseMoe>(name + ".block_sparse_moe",
                                       SparseMoeShape{.hidden = shape.attention.hidden,
                                                      .intermediate = shape.intermediate,
                                                      .num_experts = shape.num_experts,
                                                      .top_k = shape.experts_per_token},
                                       dtype);
    register_child(moe_.get());
  } else {
    mlp_ = std::make_unique<LlamaMlp>(name + ".mlp", shape.attention.hidden, shape.intermediate,
                                      shape.mlp_bias, dtype, tp);
    register_child(mlp_.get());
  }
}

absl::StatusOr<ForwardResult> LlamaBlock::forward_impl(core::Context& ctx,
                                                       const core::Tensor& input) {
  auto saved = std::make_unique<LlamaBlockSaved>();
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult a, input_layernorm_.forward(ctx, input));
  saved->input_layernorm = std::move(a.saved);
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult h, self_attn_.forward(ctx, a.output));
  saved->self_attn = std::move(h.saved);
  // r = input + h and norm_2(r) in one kernel.
  COLOSSAL_ASSIGN_OR_RETURN(RowNorm::AddResult b,
                            post_attention_layernorm_.forward_add(ctx, input, h.output));
  saved->post_attention_layernorm = std::move(b.normed.saved);
  // y = r + mlp(...), the add in the MLP's last GEMM (the experts' combining kernel).
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult m, moe_ != nullptr
                                                 ? moe_->forward_add(ctx, b.normed.output, b.sum)
                                                 : mlp_->forward_add(ctx, b.normed.output, b.sum));
  saved->mlp = std::move(m.saved);
  return ForwardResult{m.output, std::move(saved)};
}

absl::StatusOr<core::Tensor> LlamaBlock::backward_impl(core::Context& ctx, Saved& saved,
                                                       const core::Tensor& grad_output) {
  COLOSSAL_ASSIGN_OR_RETURN(LlamaBlockSaved * s, saved_as<LlamaBlockSaved>(saved));
  // y = r + mlp(norm_2(r)): dr = dy + norm_2'(mlp'(dy)), the add in norm_2's kernel.
  Module& mlp = moe_ != nullptr ? static_cast<Module&>(*moe_) : *mlp_;
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dm, mlp.backward(ctx, *s->mlp, grad_output));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dr, post_attention_layernorm_.backward_add(
                                                 ctx, *s->post_attention_layernorm, dm, grad_output));
  // r = x + attn(norm_1(x)): dx = dr + norm_1'(attn'(dr)).
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dh, self_attn_.backward(ctx, *s->self_attn, dr));
  return input_layernorm_.backward_add(ctx, *s->input_layernorm, dh, dr);
}

}  // namespace colossal::nn
