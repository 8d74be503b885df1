#include "nn/layers/attention.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/gemm/gemm.h"
#include "core/status/status.h"
#include "kernels/attention/attention.h"
#include "kernels/softmax/softmax.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {
namespace {

struct AttentionSaved : Saved {
  // y is also c_proj's saved input (the same storage), counted there.
  SavedStats stats() const override {
    return saved_stats({q, k, v, probs, qkv, lse}, {c_attn.get(), c_proj.get()});
  }
  std::unique_ptr<Saved> c_attn, c_proj;
  bool fused = false;
  // Explicit path: [B*NH, T, hs] x3, [B*NH, T, T].
  core::Tensor q, k, v, probs;
  // Fused path: c_attn's output [B, T, 3C], the merged output [B, T, C] and
  // the float32 logsumexp [B, NH, T].
  core::Tensor qkv, y, lse;
};

// Copies part `part` (0 = q, 1 = k, 2 = v) of packed [B, T, parts*C] into
// [B, NH, T, hs] (to_heads), or back (from_heads): one strided 2-D copy of T
// rows of hs elements per (batch, head), on ctx's device.
absl::Status permute_heads(core::Context& ctx, void* packed, void* heads, int64_t B, int64_t T,
                           int64_t NH, int64_t hs, int64_t parts, int64_t part, size_t elem,
                           bool to_heads) {
  const int64_t C = NH * hs;
  const size_t run = static_cast<size_t>(hs) * elem;
  const size_t packed_pitch = static_cast<size_t>(parts * C) * elem;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      char* p = static_cast<char*>(packed) +
                static_cast<size_t>((b * T * parts + part) * C + h * hs) * elem;
      char* q = static_cast<char*>(heads) + static_cast<size_t>((b * NH + h) * T * hs) * elem;
      if (to_heads) {
        COLOSSAL_RETURN_IF_ERROR(copy_2d(ctx, q, run, p, packed_pitch, run, T));
      } else {
        COLOSSAL_RETURN_IF_ERROR(copy_2d(ctx, p, packed_pitch, q, run, run, T));
      }
    }
  }
  return absl::OkStatus();
}

// Whether the fused kernel takes this call: CUDA, bfloat16/float16, head size
// 64 or 128, and the layouts it needs (16-byte aligned rows; always true for
// allocator memory and hs a multiple of 8).
bool use_fused(const core::Context& ctx, core::DType dtype, int64_t B, int64_t NH, int64_t T,
               int64_t hs, const void* qkv) {
#if COLOSSAL_WITH_CUDA
  return !ctx.device().is_cpu() && (dtype == core::DType::kBF16 || dtype == core::DType::kF16) &&
         (hs == 64 || hs == 128) && B * NH <= 65535 && T <= (int64_t{1} << 30) &&
         reinterpret_cast<uintptr_t>(qkv) % 16 == 0;
#else
  (void)ctx, (void)dtype, (void)B, (void)NH, (void)T, (void)hs, (void)qkv;
  return false;
#endif
}

}  // namespace

absl::StatusOr<AttentionImpl> attention_impl_from_env() {
  const char* value = std::getenv("COLOSSAL_ATTENTION");
  const std::string v = value == nullptr ? "" : value;
  if (v.empty() || v == "auto") return AttentionImpl::kAuto;
  if (v == "explicit") return AttentionImpl::kExplicit;
  return absl::InvalidArgumentError(absl::StrCat(
      "COLOSSAL_ATTENTION=\"", v, "\" in the environment: expected \"auto\" or \"explicit\""));
}

CausalSelfAttention::CausalSelfAttention(std::string name, int64_t channels, int64_t heads,
                                         core::DType dtype)
    : Module(name),
      channels_(channels),
      heads_(heads),
      dtype_(dtype),
      c_attn_(name + ".c_attn", channels, 3 * channels, {.dtype = dtype}),
      c_proj_(name + ".c_proj", channels, channels, {.dtype = dtype}) {
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
  if (input.rank() != 3 || input.dim(2) != channels_) {
    return absl::InvalidArgumentError(
        absl::StrCat("input is ", input.to_string(), "; expected [B, T, ", channels_, "]"));
  }
  const int64_t B = input.dim(0), T = input.dim(1), NH = heads_, hs = channels_ / heads_;
  const size_t elem = core::dtype_size(dtype_);
  auto saved = std::make_unique<AttentionSaved>();
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult qkv, c_attn_.forward(ctx, input));
  saved->c_attn = std::move(qkv.saved);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs)));
  AttentionImpl impl = impl_;
  if (impl == AttentionImpl::kAuto) {
    COLOSSAL_ASSIGN_OR_RETURN(impl, attention_impl_from_env());
  }
  if (impl == AttentionImpl::kAuto && use_fused(ctx, dtype_, B, NH, T, hs, qkv.output.raw_data())) {
#if COLOSSAL_WITH_CUDA
    saved->fused = true;
    saved->qkv = qkv.output;
    COLOSSAL_ASSIGN_OR_RETURN(saved->y, empty(ctx, {B, T, channels_}, dtype_));
    COLOSSAL_ASSIGN_OR_RETURN(saved->lse, empty(ctx, {B, NH, T}, core::DType::kF32));
    char* base = static_cast<char*>(saved->qkv.raw_data());
    const size_t part = static_cast<size_t>(channels_) * elem;
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
        kernels::attention::causal_attention_forward_cuda(
            saved->y.raw_data(), saved->lse.data<float>(), base, base + part, base + 2 * part, B,
            NH, /*kv_heads=*/NH, T, hs, 3 * channels_, channels_, dtype_, scale, cuda_stream(ctx)),
        "fused causal attention forward"));
    COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, c_proj_.forward(ctx, saved->y));
    saved->c_proj = std::move(out.saved);
    return ForwardResult{out.output, std::move(saved)};
#endif
  }
  core::Tensor* qkv_parts[3] = {&saved->q, &saved->k, &saved->v};
  for (int part = 0; part < 3; ++part) {
    COLOSSAL_ASSIGN_OR_RETURN(*qkv_parts[part], empty(ctx, {B * NH, T, hs}, dtype_));
    COLOSSAL_RETURN_IF_ERROR(permute_heads(ctx, qkv.output.raw_data(),
                                           qkv_parts[part]->raw_data(), B, T, NH, hs, 3, part,
                                           elem, /*to_heads=*/true));
  }
  COLOSSAL_ASSIGN_OR_RETURN(saved->probs,
                            core::gemm::matmul(ctx, saved->q, saved->k, {.trans_b = true}));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(ctx,
                            kernels::softmax::scaled_causal_softmax_forward_cpu(
                                saved->probs.raw_data(), saved->probs.raw_data(), B * NH, T, T,
                                dtype_, scale),
                            kernels::softmax::scaled_causal_softmax_forward_cuda(
                                saved->probs.raw_data(), saved->probs.raw_data(), B * NH, T, T,
                                dtype_, scale, cuda_stream(ctx))),
      "causal softmax forward"));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y_heads, core::gemm::matmul(ctx, saved->probs, saved->v));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y, empty(ctx, {B, T, channels_}, dtype_));
  COLOSSAL_RETURN_IF_ERROR(permute_heads(ctx, y.raw_data(), y_heads.raw_data(), B, T, NH, hs, 1,
                                         0, elem, /*to_heads=*/false));
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, c_proj_.forward(ctx, y));
  saved->c_proj = std::move(out.saved);
  return ForwardResult{out.output, std::move(saved)};
}

absl::StatusOr<core::Tensor> CausalSelfAttention::backward_impl(core::Context& ctx, Saved& saved,
                                                                const core::Tensor& grad_output) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, grad_output, "grad_output"));
  COLOSSAL_ASSIGN_OR_RETURN(AttentionSaved * s, saved_as<AttentionSaved>(saved));
  if (s->fused) {
#if COLOSSAL_WITH_CUDA
    const int64_t B = s->qkv.dim(0), T = s->qkv.dim(1), NH = heads_, hs = channels_ / heads_;
    const size_t elem = core::dtype_size(dtype_);
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dy, c_proj_.backward(ctx, *s->c_proj, grad_output));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dqkv, empty(ctx, {B, T, 3 * channels_}, dtype_));
    COLOSSAL_ASSIGN_OR_RETURN(
        core::Tensor workspace,
        scratch(ctx, kernels::attention::causal_attention_backward_workspace_bytes(B, NH, T)));
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs)));
    const size_t part = static_cast<size_t>(channels_) * elem;
    char* d = static_cast<char*>(dqkv.raw_data());
    const char* x = static_cast<const char*>(s->qkv.raw_data());
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
        kernels::attention::causal_attention_backward_cuda(
            d, d + part, d + 2 * part, dy.raw_data(), x, x + part, x + 2 * part, s->y.raw_data(),
            s->lse.data<float>(), workspace.raw_data(), B, NH, /*kv_heads=*/NH, T, hs,
            3 * channels_, channels_, dtype_, scale, cuda_stream(ctx)),
        "fused causal attention backward"));
    return c_attn_.backward(ctx, *s->c_attn, dqkv);
#else
    return absl::InternalError("fused attention context in a build without CUDA");
#endif
  }
  const int64_t BNH = s->q.dim(0), T = s->q.dim(1), hs = s->q.dim(2), NH = heads_, B = BNH / NH;
  const size_t elem = core::dtype_size(dtype_);
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dy, c_proj_.backward(ctx, *s->c_proj, grad_output));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dy_heads, empty(ctx, {BNH, T, hs}, dtype_));
  COLOSSAL_RETURN_IF_ERROR(permute_heads(ctx, dy.raw_data(), dy_heads.raw_data(), B, T, NH, hs,
                                         1, 0, elem, /*to_heads=*/true));
  // y = p v: dp = dy v^T, dv = p^T dy.
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dp,
                            core::gemm::matmul(ctx, dy_heads, s->v, {.trans_b = true}));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dv,
                            core::gemm::matmul(ctx, s->probs, dy_heads, {.trans_a = true}));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs)));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(ctx,
                            kernels::softmax::scaled_causal_softmax_backward_cpu(
                                dp.raw_data(), dp.raw_data(), s->probs.raw_data(), BNH, T, T,
                                dtype_, scale),
                            kernels::softmax::scaled_causal_softmax_backward_cuda(
                                dp.raw_data(), dp.raw_data(), s->probs.raw_data(), BNH, T, T,
                                dtype_, scale, cuda_stream(ctx))),
      "causal softmax backward"));
  // scores = q k^T: dq = ds k, dk = ds^T q.
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dq, core::gemm::matmul(ctx, dp, s->k));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dk, core::gemm::matmul(ctx, dp, s->q, {.trans_a = true}));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dqkv, empty(ctx, {B, T, 3 * channels_}, dtype_));
  const core::Tensor* parts[3] = {&dq, &dk, &dv};
  for (int part = 0; part < 3; ++part) {
    COLOSSAL_RETURN_IF_ERROR(permute_heads(ctx, dqkv.raw_data(), parts[part]->raw_data(), B, T,
                                           NH, hs, 3, part, elem, /*to_heads=*/false));
  }
  return c_attn_.backward(ctx, *s->c_attn, dqkv);
}

}  // namespace colossal::nn
