#include "nn/layers/block.h"

#include "core/status/status.h"

namespace colossal::nn {
namespace {

struct BlockSaved : Saved {
  SavedStats stats() const override {
    return saved_stats({}, {ln_1.get(), attn.get(), attn_dropout.get(), ln_2.get(), mlp.get()});
  }
  std::unique_ptr<Saved> ln_1, attn, attn_dropout, ln_2, mlp;  // attn_dropout may be null
};

}  // namespace

TransformerBlock::TransformerBlock(std::string name, int64_t channels, int64_t heads,
                                   core::DType dtype, double resid_pdrop,
                                   const TensorParallel& tp)
    : Module(name),
      ln_1_(name + ".ln_1", channels, {.dtype = dtype}),
      attn_(name + ".attn", channels, heads, dtype, tp),
      ln_2_(name + ".ln_2", channels, {.dtype = dtype}),
      mlp_(name + ".mlp", channels, dtype, resid_pdrop, tp) {
  if (resid_pdrop != 0.0) {
    attn_dropout_ = std::make_unique<Dropout>(name + ".attn.resid_dropout", resid_pdrop);
  }
  register_child(&ln_1_);
  register_child(&attn_);
  if (attn_dropout_ != nullptr) register_child(attn_dropout_.get());
  register_child(&ln_2_);
  register_child(&mlp_);
}

absl::StatusOr<ForwardResult> TransformerBlock::forward_impl(core::Context& ctx,
                                                             const core::Tensor& input) {
  auto saved = std::make_unique<BlockSaved>();
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult a, ln_1_.forward(ctx, input));
  saved->ln_1 = std::move(a.saved);
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult h, attn_.forward(ctx, a.output));
  saved->attn = std::move(h.saved);
  if (attn_dropout_ != nullptr) {
    COLOSSAL_ASSIGN_OR_RETURN(ForwardResult d, attn_dropout_->forward(ctx, h.output));
    saved->attn_dropout = std::move(d.saved);
    h.output = d.output;
  }
  // r = input + h and ln_2(r) in one kernel.
  COLOSSAL_ASSIGN_OR_RETURN(RowNorm::AddResult b, ln_2_.forward_add(ctx, input, h.output));
  saved->ln_2 = std::move(b.normed.saved);
  // y = r + mlp(...), the add in the MLP's last GEMM.
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult m, mlp_.forward_add(ctx, b.normed.output, b.sum));
  saved->mlp = std::move(m.saved);
  return ForwardResult{m.output, std::move(saved)};
}

absl::StatusOr<core::Tensor> TransformerBlock::backward_impl(core::Context& ctx, Saved& saved,
                                                             const core::Tensor& grad_output) {
  COLOSSAL_ASSIGN_OR_RETURN(BlockSaved * s, saved_as<BlockSaved>(saved));
  // y = r + mlp(ln_2(r)): dr = dy + ln_2'(mlp'(dy)), the add in ln_2's kernel.
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dm, mlp_.backward(ctx, *s->mlp, grad_output));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dr, ln_2_.backward_add(ctx, *s->ln_2, dm, grad_output));
  // r = x + attn(ln_1(x)): dx = dr + ln_1'(attn'(dr)).
  core::Tensor dattn = dr;
  if (attn_dropout_ != nullptr) {
    if (s->attn_dropout == nullptr) {
      return absl::InvalidArgumentError("saved activations are from a block without dropout");
    }
    COLOSSAL_ASSIGN_OR_RETURN(dattn, attn_dropout_->backward(ctx, *s->attn_dropout, dr));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dh, attn_.backward(ctx, *s->attn, dattn));
  return ln_1_.backward_add(ctx, *s->ln_1, dh, dr);
}

}  // namespace colossal::nn
