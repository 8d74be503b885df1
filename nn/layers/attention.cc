#include "nn/layers/attention.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {
namespace {

struct AttentionSaved : Saved {
  SavedStats stats() const override {
    const SavedStats children = saved_stats({}, {c_attn.get(), c_proj.get()});
    const SavedStats mine = core.stats();
    return {children.tensors + mine.tensors, children.bytes + mine.bytes};
  }
  std::unique_ptr<Saved> c_attn, c_proj;
  AttentionCoreSaved core;
};

}  // namespace

CausalSelfAttention::CausalSelfAttention(std::string name, int64_t channels, int64_t heads,
                                         core::DType dtype, const TensorParallel& tp)
    : Module(name),
      channels_(channels),
      heads_(heads),
      dtype_(dtype),
      tp_(tp),
      region_grad_(std::make_shared<RegionGrad>(tp, 1)),
      c_attn_(name + ".c_attn", channels, 3 * channels,
              {.dtype = dtype,
               .parallel = Parallel::kColumn,
               .tp = tp,
               .blocks = 3,
               .region_grad = region_grad_}),
      c_proj_(name + ".c_proj", channels, channels,
              {.dtype = dtype, .parallel = Parallel::kRow, .tp = tp}) {
  register_child(&c_attn_);
  register_child(&c_proj_);
}

absl::StatusOr<ForwardResult> CausalSelfAttention::forward_impl(core::Context& ctx,
                                                                const core::Tensor& input) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, input, "input"));
  if (heads_ <= 0 || channels_ % heads_ != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("channels ", channels_, " is not a multiple of heads ", heads_));
  }
  if (heads_ % (tp_.size() * tp_.sequence_size()) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heads ", heads_, " do not split over ", tp_.size(), " tensor-parallel x ",
        tp_.sequence_size(), " sequence-parallel ranks"));
  }
  if (input.rank() != 3 || input.dim(2) != channels_) {
    return absl::InvalidArgumentError(
        absl::StrCat("input is ", input.to_string(), "; expected [B, T, ", channels_, "]"));
  }
  auto saved = std::make_unique<AttentionSaved>();
  region_grad_->reset();
  // With sequence parallelism the input holds this rank's positions: gather them.
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor x, region_input(ctx, tp_, input));
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult qkv, c_attn_.forward(ctx, x));
  saved->c_attn = std::move(qkv.saved);
  // c_attn's [B, T, 3C] (this rank's heads of q, k and v) is the core's
  // packed layout with KV = H. Under all_to_all it holds this rank's
  // positions: trade them for every position of this rank's heads.
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor packed, seq_to_heads(ctx, tp_, qkv.output, 3));
  const int64_t local_heads = tp_.local_heads(heads_);
  const AttentionHeads shape{local_heads, local_heads, channels_ / heads_};
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y,
                            attention_core_forward(ctx, packed, shape, impl_, saved->core));
  COLOSSAL_ASSIGN_OR_RETURN(y, heads_to_seq(ctx, tp_, y, 1));
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, c_proj_.forward(ctx, y));
  saved->c_proj = std::move(out.saved);
  return ForwardResult{out.output, std::move(saved)};
}

absl::StatusOr<core::Tensor> CausalSelfAttention::backward_impl(core::Context& ctx, Saved& saved,
                                                                const core::Tensor& grad_output) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, grad_output, "grad_output"));
  COLOSSAL_ASSIGN_OR_RETURN(AttentionSaved * s, saved_as<AttentionSaved>(saved));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dy, c_proj_.backward(ctx, *s->c_proj, grad_output));
  COLOSSAL_ASSIGN_OR_RETURN(dy, seq_to_heads(ctx, tp_, dy, 1));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dqkv, attention_core_backward(ctx, s->core, dy));
  COLOSSAL_ASSIGN_OR_RETURN(dqkv, heads_to_seq(ctx, tp_, dqkv, 3));
  // c_attn's backward starts the input gradient's reduction before its weight GEMM.
  COLOSSAL_RETURN_IF_ERROR(c_attn_.backward(ctx, *s->c_attn, dqkv).status());
  return region_grad_->finish(ctx);
}

}  // namespace colossal::nn
