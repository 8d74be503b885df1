#include "nn/optim/grad_clip.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/device/device.h"
#include "core/status/status.h"
#include "kernels/multi_tensor/multi_tensor.h"
#include "nn/optim/device_util.h"
#include "nn/optim/kernels/optim_kernels.h"

namespace colossal::nn {
namespace {

namespace mt = kernels::multi_tensor;

// The clipping coefficient's denominator guard, as torch and Colossal-AI use it.
constexpr double kClipEps = 1e-6;

// Gradients grouped by (on CUDA, dtype), in their order.
using Buckets = std::map<std::pair<bool, int>, std::vector<const core::Tensor*>>;

absl::StatusOr<Buckets> bucket_grads(absl::Span<const core::Tensor> grads,
                                     const core::Stream& stream, absl::string_view op) {
  Buckets buckets;
  for (size_t i = 0; i < grads.size(); ++i) {
    const core::Tensor& g = grads[i];
    const std::string what = absl::StrCat(op, ": gradient ", i);
    if (!g.defined() || (g.dtype() != core::DType::kF32 && g.dtype() != core::DType::kF16 &&
                         g.dtype() != core::DType::kBF16)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " must be a float32, float16 or bfloat16 tensor, got ", g.to_string()));
    }
    COLOSSAL_RETURN_IF_ERROR(internal::stream_for(g.device(), stream, what).status());
    buckets[{g.device().is_cuda(), static_cast<int>(g.dtype())}].push_back(&g);
  }
  return buckets;
}

// Sum of squares (as a squared float norm) and found_inf of one bucket.
absl::Status bucket_norm(bool cuda, core::DType dtype, const std::vector<const core::Tensor*>& ts,
                         const core::Stream& stream, float* norm, bool* bad) {
  std::vector<mt::TensorRef> refs;
  for (const core::Tensor* t : ts) refs.push_back(mt::TensorRef{t->raw_data(), t->numel()});
  const int64_t n = static_cast<int64_t>(refs.size());
  if (!cuda) {
    float found_inf = 0.0f;
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
        mt::l2_norm_cpu(norm, nullptr, &found_inf, nullptr, refs.data(), n, dtype, 0.0f),
        "grad_norm"));
    *bad = found_inf != 0.0f;
    return absl::OkStatus();
  }
#if COLOSSAL_WITH_CUDA
  const int64_t scratch_bytes = mt::l2_norm_cuda_scratch_bytes(refs.data(), n);
  COLOSSAL_ASSIGN_OR_RETURN(
      core::Tensor scratch,
      core::Tensor::empty({scratch_bytes > 0 ? scratch_bytes : 1}, core::DType::kU8, stream));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor out, core::Tensor::empty({2}, core::DType::kF32, stream));
  COLOSSAL_RETURN_IF_ERROR(out.set_zero(stream));
  float* d = out.data<float>();
  {
    core::DeviceGuard guard(stream.device());
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
        mt::l2_norm_cuda(d, nullptr, d + 1, nullptr, refs.data(), scratch.raw_data(),
                         scratch_bytes, n, dtype, 0.0f, stream.handle()),
        "grad_norm"));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host, out.to(core::Device::cpu(), stream));
  stream.synchronize();
  *norm = host.data<float>()[0];
  *bad = host.data<float>()[1] != 0.0f;
  return absl::OkStatus();
#else
  return absl::UnimplementedError("grad_norm: a CUDA gradient in a build without CUDA");
#endif
}

}  // namespace

absl::StatusOr<GradNorm> grad_norm(absl::Span<const core::Tensor> grads,
                                   const core::Stream& stream) {
  COLOSSAL_ASSIGN_OR_RETURN(Buckets buckets, bucket_grads(grads, stream, "grad_norm"));
  GradNorm out;
  if (buckets.empty()) return out;
  double sum_sq = 0;
  bool any_bad = false;
  float single = 0.0f;
  for (const auto& [key, ts] : buckets) {
    float norm = 0.0f;
    bool bad = false;
    COLOSSAL_RETURN_IF_ERROR(
        bucket_norm(key.first, static_cast<core::DType>(key.second), ts, stream, &norm, &bad));
    any_bad = any_bad || bad;
    single = norm;
    sum_sq += static_cast<double>(norm) * norm;
  }
  // One bucket: the kernel's own result; several: combined in double.
  out.norm = buckets.size() == 1 ? single : static_cast<float>(std::sqrt(sum_sq));
  out.finite = !any_bad && std::isfinite(out.norm);
  return out;
}

absl::StatusOr<ClipResult> clip_grad_by_norm(absl::Span<const core::Tensor> grads, float max_norm,
                                             const core::Stream& stream,
                                             const ClipGradNormOptions& options) {
  if (!std::isfinite(max_norm) || !(max_norm > 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("clip_grad_by_norm: max_norm must be positive and finite, got ", max_norm));
  }
  if (!std::isfinite(options.grad_scale) || !(options.grad_scale > 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "clip_grad_by_norm: grad_scale must be positive and finite, got ", options.grad_scale));
  }
  COLOSSAL_ASSIGN_OR_RETURN(GradNorm n, grad_norm(grads, stream));
  ClipResult r;
  const double norm = static_cast<double>(n.norm) / options.grad_scale;
  r.total_norm = options.grad_scale == 1.0f ? n.norm : static_cast<float>(norm);
  r.finite = n.finite;
  if (!r.finite) return r;
  const double coef = static_cast<double>(max_norm) / (norm + kClipEps);
  r.clip_coef = coef < 1.0 ? static_cast<float>(coef) : 1.0f;
  if (!options.in_place || r.clip_coef >= 1.0f) return r;
  COLOSSAL_ASSIGN_OR_RETURN(Buckets buckets, bucket_grads(grads, stream, "clip_grad_by_norm"));
  for (const auto& [key, ts] : buckets) {
    std::vector<mt::ScaleTensor> st;
    for (const core::Tensor* t : ts) st.push_back(mt::ScaleTensor{t->raw_data(), t->raw_data(), t->numel()});
    const auto dtype = static_cast<core::DType>(key.second);
    const int64_t count = static_cast<int64_t>(st.size());
    kernels::KernelStatus ks;
    if (!key.first) {
      ks = mt::scale_cpu(nullptr, st.data(), nullptr, count, dtype, dtype, r.clip_coef);
    } else {
#if COLOSSAL_WITH_CUDA
      core::DeviceGuard guard(stream.device());
      ks = mt::scale_cuda(nullptr, st.data(), nullptr, nullptr, 0, count, dtype, dtype,
                          r.clip_coef, stream.handle());
#endif
    }
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(ks, "clip_grad_by_norm"));
  }
  r.clipped = true;
  return r;
}

absl::Status clip_grad_by_value(absl::Span<const core::Tensor> grads, float clip_value,
                                const core::Stream& stream) {
  if (!std::isfinite(clip_value) || clip_value < 0.0f) {
    return absl::InvalidArgumentError(absl::StrCat(
        "clip_grad_by_value: clip_value must be >= 0 and finite, got ", clip_value));
  }
  COLOSSAL_ASSIGN_OR_RETURN(Buckets buckets, bucket_grads(grads, stream, "clip_grad_by_value"));
  for (const auto& [key, ts] : buckets) {
    const auto dtype = static_cast<core::DType>(key.second);
    for (const core::Tensor* t : ts) {
      kernels::KernelStatus ks;
      if (!key.first) {
        ks = optim_kernels::clamp_cpu(t->raw_data(), t->numel(), dtype, -clip_value, clip_value);
      } else {
#if COLOSSAL_WITH_CUDA
        core::DeviceGuard guard(stream.device());
        ks = optim_kernels::clamp_cuda(t->raw_data(), t->numel(), dtype, -clip_value, clip_value,
                                       stream.handle());
#endif
      }
      COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(ks, "clip_grad_by_value"));
    }
  }
  return absl::OkStatus();
}

}  // namespace colossal::nn
