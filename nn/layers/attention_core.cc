#include "nn/layers/attention_core.h"

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

// Copies `count` heads starting at column head `first` of packed
// [B, T, row_heads * D] into [B, count, T, D] (to_heads), or back
// (from_heads): one strided 2-D copy of T rows of D elements per (batch,
// head), on ctx's device.
absl::Status permute_heads(core::Context& ctx, void* packed, void* heads, int64_t B, int64_t T,
                           int64_t D, int64_t row_heads, int64_t first, int64_t count,
                           size_t elem, bool to_heads) {
  const size_t run = static_cast<size_t>(D) * elem;
  const size_t packed_pitch = static_cast<size_t>(row_heads * D) * elem;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < count; ++h) {
      char* p = static_cast<char*>(packed) +
                static_cast<size_t>(b * T * row_heads * D + (first + h) * D) * elem;
      char* q = static_cast<char*>(heads) + static_cast<size_t>((b * count + h) * T * D) * elem;
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
// allocator memory and D a multiple of 8).
bool use_fused(const core::Context& ctx, core::DType dtype, int64_t B, int64_t H, int64_t T,
               int64_t D, const void* qkv) {
#if COLOSSAL_WITH_CUDA
  return !ctx.device().is_cpu() && (dtype == core::DType::kBF16 || dtype == core::DType::kF16) &&
         (D == 64 || D == 128) && B * H <= 65535 && T <= (int64_t{1} << 30) &&
         reinterpret_cast<uintptr_t>(qkv) % 16 == 0;
#else
  (void)ctx, (void)dtype, (void)B, (void)H, (void)T, (void)D, (void)qkv;
  return false;
#endif
}

float softmax_scale(int64_t D) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
}

// Each document of `documents` attending to itself (the varlen kernels over
// the B * T rows): fused on CUDA, the double-precision reference on the CPU.
absl::StatusOr<core::Tensor> documents_forward(core::Context& ctx, const core::Tensor& qkv,
                                               AttentionHeads shape, std::shared_ptr<const Documents> documents,
                                               AttentionCoreSaved& saved) {
  namespace ka = kernels::attention;
  const int64_t H = shape.heads, KV = shape.kv_heads, D = shape.head_dim;
  const int64_t B = qkv.dim(0), T = qkv.dim(1), rows = B * T, row_heads = H + 2 * KV;
  const core::DType dtype = qkv.dtype();
  const size_t head = static_cast<size_t>(D) * core::dtype_size(dtype);
  saved.fused = true;
  saved.qkv = qkv;
  saved.documents = std::move(documents);
  const Documents& docs = *saved.documents;
  COLOSSAL_ASSIGN_OR_RETURN(saved.y, empty(ctx, {B, T, H * D}, dtype));
  COLOSSAL_ASSIGN_OR_RETURN(saved.lse, empty(ctx, {H, rows}, core::DType::kF32));
  const char* base = static_cast<const char*>(qkv.raw_data());
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx,
          ka::attention_varlen_forward_cpu(saved.y.raw_data(), saved.lse.data<float>(), base, base + H * head,
                                           base + (H + KV) * head, docs.cu_seqlens_host.data(),
                                           docs.num_documents(), rows, H, KV, D, row_heads * D, H * D, dtype,
                                           softmax_scale(D), ka::AttentionMask::kCausal),
          ka::attention_varlen_forward_cuda(saved.y.raw_data(), saved.lse.data<float>(), base, base + H * head,
                                            base + (H + KV) * head, docs.cu_seqlens.data<int32_t>(),
                                            docs.num_documents(), rows, docs.max_seqlen, H, KV, D,
                                            row_heads * D, H * D, dtype, softmax_scale(D),
                                            ka::AttentionMask::kCausal, cuda_stream(ctx))),
      "causal attention forward within documents"));
  return saved.y;
}

absl::Status documents_backward(core::Context& ctx, const AttentionCoreSaved& saved, const core::Tensor& dy,
                                core::Tensor& dqkv) {
  namespace ka = kernels::attention;
  const int64_t H = saved.shape.heads, KV = saved.shape.kv_heads, D = saved.shape.head_dim;
  const int64_t rows = saved.qkv.dim(0) * saved.qkv.dim(1), row_heads = H + 2 * KV;
  const core::DType dtype = saved.qkv.dtype();
  const size_t head = static_cast<size_t>(D) * core::dtype_size(dtype);
  const Documents& docs = *saved.documents;
  const char* x = static_cast<const char*>(saved.qkv.raw_data());
  char* d = static_cast<char*>(dqkv.raw_data());
  core::Tensor workspace;
  if (!ctx.device().is_cpu()) {
#if COLOSSAL_WITH_CUDA
    COLOSSAL_ASSIGN_OR_RETURN(workspace, scratch(ctx, ka::attention_varlen_backward_workspace_bytes(H, rows)));
#endif
  }
  return core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx,
          ka::attention_varlen_backward_cpu(d, d + H * head, d + (H + KV) * head, dy.raw_data(), x, x + H * head,
                                            x + (H + KV) * head, saved.y.raw_data(), saved.lse.data<float>(),
                                            docs.cu_seqlens_host.data(), docs.num_documents(), rows, H, KV, D,
                                            row_heads * D, H * D, dtype, softmax_scale(D),
                                            ka::AttentionMask::kCausal),
          ka::attention_varlen_backward_cuda(d, d + H * head, d + (H + KV) * head, dy.raw_data(), x,
                                             x + H * head, x + (H + KV) * head, saved.y.raw_data(),
                                             saved.lse.data<float>(), workspace.raw_data(),
                                             docs.cu_seqlens.data<int32_t>(), docs.num_documents(), rows,
                                             docs.max_seqlen, H, KV, D, row_heads * D, H * D, dtype,
                                             softmax_scale(D), ka::AttentionMask::kCausal, cuda_stream(ctx))),
      "causal attention backward within documents");
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

absl::StatusOr<core::Tensor> attention_core_forward(core::Context& ctx, const core::Tensor& qkv,
                                                    AttentionHeads shape, AttentionImpl impl,
                                                    AttentionCoreSaved& saved,
                                                    std::shared_ptr<const Documents> documents) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, qkv, "qkv"));
  const int64_t H = shape.heads, KV = shape.kv_heads, D = shape.head_dim;
  if (H <= 0 || KV <= 0 || D <= 0 || H % KV != 0) {
    return absl::InvalidArgumentError(absl::StrCat("attention: ", H, " query heads, ", KV,
                                                   " key/value heads of size ", D,
                                                   ": the heads must be a multiple of the key/value heads"));
  }
  const int64_t row_heads = H + 2 * KV;
  if (qkv.rank() != 3 || qkv.dim(2) != row_heads * D) {
    return absl::InvalidArgumentError(absl::StrCat("attention: qkv is ", qkv.to_string(),
                                                   "; expected [B, T, ", row_heads * D, "]"));
  }
  const int64_t B = qkv.dim(0), T = qkv.dim(1), r = H / KV;
  const core::DType dtype = qkv.dtype();
  const size_t elem = core::dtype_size(dtype);
  const float scale = softmax_scale(D);
  saved = AttentionCoreSaved{};
  saved.shape = shape;
  if (impl == AttentionImpl::kAuto) {
    COLOSSAL_ASSIGN_OR_RETURN(impl, attention_impl_from_env());
  }
  if (documents != nullptr) {
    if (documents->batch != B || documents->seq != T) {
      return absl::InvalidArgumentError(absl::StrCat("attention: documents of ", documents->batch, " x ",
                                                     documents->seq, " tokens for qkv ", qkv.to_string()));
    }
    const bool fused = impl == AttentionImpl::kAuto && use_fused(ctx, dtype, B, H, T, D, qkv.raw_data());
    if (!ctx.device().is_cpu() && !fused) {
      return absl::FailedPreconditionError(absl::StrCat(
          "attention within packed documents on CUDA runs the fused kernels only (bfloat16 or float16, head size "
          "64 or 128, not COLOSSAL_ATTENTION=explicit); this call is ", core::dtype_name(dtype), " with head size ",
          D, " (train with packing = false, or document_attention = false)"));
    }
    return documents_forward(ctx, qkv, shape, std::move(documents), saved);
  }
  if (impl == AttentionImpl::kAuto && use_fused(ctx, dtype, B, H, T, D, qkv.raw_data())) {
#if COLOSSAL_WITH_CUDA
    saved.fused = true;
    saved.qkv = qkv;
    COLOSSAL_ASSIGN_OR_RETURN(saved.y, empty(ctx, {B, T, H * D}, dtype));
    COLOSSAL_ASSIGN_OR_RETURN(saved.lse, empty(ctx, {B, H, T}, core::DType::kF32));
    const char* base = static_cast<const char*>(qkv.raw_data());
    const size_t head = static_cast<size_t>(D) * elem;
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
        kernels::attention::causal_attention_forward_cuda(
            saved.y.raw_data(), saved.lse.data<float>(), base, base + H * head,
            base + (H + KV) * head, B, H, KV, T, D, row_heads * D, H * D, dtype, scale,
            cuda_stream(ctx)),
        "fused causal attention forward"));
    return saved.y;
#endif
  }
  COLOSSAL_ASSIGN_OR_RETURN(saved.q, empty(ctx, {B * KV, r * T, D}, dtype));
  COLOSSAL_ASSIGN_OR_RETURN(saved.k, empty(ctx, {B * KV, T, D}, dtype));
  COLOSSAL_ASSIGN_OR_RETURN(saved.v, empty(ctx, {B * KV, T, D}, dtype));
  void* packed = qkv.raw_data();
  COLOSSAL_RETURN_IF_ERROR(
      permute_heads(ctx, packed, saved.q.raw_data(), B, T, D, row_heads, 0, H, elem, true));
  COLOSSAL_RETURN_IF_ERROR(
      permute_heads(ctx, packed, saved.k.raw_data(), B, T, D, row_heads, H, KV, elem, true));
  COLOSSAL_RETURN_IF_ERROR(
      permute_heads(ctx, packed, saved.v.raw_data(), B, T, D, row_heads, H + KV, KV, elem, true));
  // [B*KV, r*T, T] is [B*H, T, T]: row i of head h's block is query i.
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor scores,
                            core::gemm::matmul(ctx, saved.q, saved.k, {.trans_b = true}));
  COLOSSAL_ASSIGN_OR_RETURN(saved.probs, scores.reshape({B * H, T, T}));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(ctx,
                            kernels::softmax::scaled_causal_softmax_forward_cpu(
                                saved.probs.raw_data(), saved.probs.raw_data(), B * H, T, T, dtype,
                                scale),
                            kernels::softmax::scaled_causal_softmax_forward_cuda(
                                saved.probs.raw_data(), saved.probs.raw_data(), B * H, T, T, dtype,
                                scale, cuda_stream(ctx))),
      "causal softmax forward"));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor p, saved.probs.reshape({B * KV, r * T, T}));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y_heads, core::gemm::matmul(ctx, p, saved.v));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y, empty(ctx, {B, T, H * D}, dtype));
  COLOSSAL_RETURN_IF_ERROR(
      permute_heads(ctx, y.raw_data(), y_heads.raw_data(), B, T, D, H, 0, H, elem, false));
  return y;
}

absl::StatusOr<core::Tensor> attention_core_backward(core::Context& ctx,
                                                     const AttentionCoreSaved& saved,
                                                     const core::Tensor& dy) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, dy, "dy"));
  const int64_t H = saved.shape.heads, KV = saved.shape.kv_heads, D = saved.shape.head_dim;
  const int64_t row_heads = H + 2 * KV, r = H == 0 || KV == 0 ? 0 : H / KV;
  const core::Tensor& any = saved.fused ? saved.qkv : saved.k;
  if (!any.defined()) return absl::InvalidArgumentError("attention: backward without a forward");
  const core::DType dtype = any.dtype();
  const int64_t B = saved.fused ? saved.qkv.dim(0) : saved.k.dim(0) / KV;
  const int64_t T = saved.fused ? saved.qkv.dim(1) : saved.k.dim(1);
  COLOSSAL_RETURN_IF_ERROR(require_dtype(dy, dtype, "dy"));
  if (dy.shape() != core::Shape{B, T, H * D}) {
    return absl::InvalidArgumentError(absl::StrCat("attention: dy is ", dy.to_string(),
                                                   "; expected [", B, ", ", T, ", ", H * D, "]"));
  }
  const size_t elem = core::dtype_size(dtype);
  const float scale = softmax_scale(D);
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dqkv, empty(ctx, {B, T, row_heads * D}, dtype));
  char* d = static_cast<char*>(dqkv.raw_data());
  if (saved.documents != nullptr) {
    COLOSSAL_RETURN_IF_ERROR(documents_backward(ctx, saved, dy, dqkv));
    return dqkv;
  }
  if (saved.fused) {
#if COLOSSAL_WITH_CUDA
    const size_t head = static_cast<size_t>(D) * elem;  // one head's row, in bytes
    COLOSSAL_ASSIGN_OR_RETURN(
        core::Tensor workspace,
        scratch(ctx, kernels::attention::attention_backward_workspace_bytes(B, H, T, D)));
    const char* x = static_cast<const char*>(saved.qkv.raw_data());
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
        kernels::attention::causal_attention_backward_cuda(
            d, d + H * head, d + (H + KV) * head, dy.raw_data(), x, x + H * head,
            x + (H + KV) * head, saved.y.raw_data(), saved.lse.data<float>(),
            workspace.raw_data(), B, H, KV, T, D, row_heads * D, H * D, dtype, scale,
            ctx.deterministic(), cuda_stream(ctx)),
        "fused causal attention backward"));
    return dqkv;
#else
    return absl::InternalError("fused attention context in a build without CUDA");
#endif
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dy_heads, empty(ctx, {B * KV, r * T, D}, dtype));
  COLOSSAL_RETURN_IF_ERROR(
      permute_heads(ctx, dy.raw_data(), dy_heads.raw_data(), B, T, D, H, 0, H, elem, true));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor p, saved.probs.reshape({B * KV, r * T, T}));
  // y = p v: dp = dy v^T, dv = p^T dy (the GEMM sums the group's query heads).
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dp,
                            core::gemm::matmul(ctx, dy_heads, saved.v, {.trans_b = true}));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dv, core::gemm::matmul(ctx, p, dy_heads, {.trans_a = true}));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(ctx,
                            kernels::softmax::scaled_causal_softmax_backward_cpu(
                                dp.raw_data(), dp.raw_data(), saved.probs.raw_data(), B * H, T, T,
                                dtype, scale),
                            kernels::softmax::scaled_causal_softmax_backward_cuda(
                                dp.raw_data(), dp.raw_data(), saved.probs.raw_data(), B * H, T, T,
                                dtype, scale, cuda_stream(ctx))),
      "causal softmax backward"));
  // scores = q k^T: dq = ds k, dk = ds^T q.
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dq, core::gemm::matmul(ctx, dp, saved.k));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dk,
                            core::gemm::matmul(ctx, dp, saved.q, {.trans_a = true}));
  COLOSSAL_RETURN_IF_ERROR(permute_heads(ctx, d, dq.raw_data(), B, T, D, row_heads, 0, H, elem, false));
  COLOSSAL_RETURN_IF_ERROR(permute_heads(ctx, d, dk.raw_data(), B, T, D, row_heads, H, KV, elem, false));
  COLOSSAL_RETURN_IF_ERROR(
      permute_heads(ctx, d, dv.raw_data(), B, T, D, row_heads, H + KV, KV, elem, false));
  return dqkv;
}

}  // namespace colossal::nn
