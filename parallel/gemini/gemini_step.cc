// The gemini plugin's optimizer step (see the header): the global norm over
// every rank's gradient shards, clipping and loss scaling folded into Adam's
// grad_scale, the device shards updated by the CUDA Adam kernel and the host
// shards by CPU Adam, which writes the 16-bit values the next gather copies in.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bazel/cuda_config.h"
#include "core/status/status.h"
#include "kernels/adam/adam.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/multi_tensor/multi_tensor.h"
#include "nn/optim/adam.h"
#include "parallel/gemini/gemini_plugin.h"
#include "parallel/gemini/gemini_state.h"

namespace colossal::parallel {
namespace {

// Sum of squares (and whether any is non-finite) of this rank's share of the
// gradients: a whole chunk's gradients are on every rank, rank 0 counts them.
struct NormParts {
  double sum = 0.0;
  bool non_finite = false;
};

absl::StatusOr<NormParts> local_norm(GeminiPlugin::State& s) {
  NormParts out;
  std::vector<kernels::multi_tensor::TensorRef> device, host;
  for (const GeminiChunk& k : s.chunks) {
    if (!k.sharded && s.rank() != 0) continue;
    (s.cuda && k.on_device ? device : host).push_back({k.grad.raw_data(), k.shard_size});
  }
  if (!host.empty()) {
    float norm = 0.0f, found_inf = 0.0f;
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
        kernels::multi_tensor::l2_norm_cpu(&norm, nullptr, &found_inf, nullptr, host.data(),
                                           static_cast<int64_t>(host.size()), s.dtype, 0.0f,
                                           s.options.cpu_threads),
        "gemini: gradient norm"));
    out.sum += double(norm) * norm;
    out.non_finite = found_inf != 0.0f || !std::isfinite(norm);
  }
#if COLOSSAL_WITH_CUDA
  if (!device.empty()) {
    const int64_t n = static_cast<int64_t>(device.size());
    const int64_t scratch_bytes = kernels::multi_tensor::l2_norm_cuda_scratch_bytes(device.data(), n);
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor scratch,
                              core::Tensor::empty({std::max<int64_t>(scratch_bytes, 1)},
                                                  core::DType::kU8, s.stream));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor d, core::Tensor::empty({2}, core::DType::kF32, s.stream));
    COLOSSAL_RETURN_IF_ERROR(d.set_zero(s.stream));
    float* p = d.data<float>();
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
        kernels::multi_tensor::l2_norm_cuda(p, nullptr, p + 1, nullptr, device.data(), scratch.raw_data(),
                                            scratch_bytes, n, s.dtype, 0.0f, s.stream.handle()),
        "gemini: gradient norm"));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h, d.to(core::Device::cpu(), s.stream));
    s.stream.synchronize();
    const double norm = h.data<float>()[0];
    out.sum += norm * norm;
    out.non_finite = out.non_finite || h.data<float>()[1] != 0.0f || !std::isfinite(norm);
  }
#endif
  return out;
}

// The squared global norm and the non-finite flag summed over the ranks.
absl::StatusOr<std::pair<double, bool>> global_norm(GeminiPlugin::State& s, const NormParts& mine) {
  float v[2] = {static_cast<float>(mine.sum), mine.non_finite ? 1.0f : 0.0f};
  if (s.world() > 1) {
    if (s.cuda) {  // NCCL reduces device memory
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h, core::Tensor::empty({2}, core::DType::kF32, core::Stream::cpu()));
      std::copy(v, v + 2, h.data<float>());
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor d, h.to(s.stream.device(), s.stream));
      COLOSSAL_RETURN_IF_ERROR(
          s.finish(s.pg->all_reduce(d, comm::ReduceOp::kSum, s.collective()), "gemini: gradient norm"));
      COLOSSAL_ASSIGN_OR_RETURN(h, d.to(core::Device::cpu(), s.stream));
      s.stream.synchronize();
      std::copy(h.data<float>(), h.data<float>() + 2, v);
    } else {
      COLOSSAL_RETURN_IF_ERROR(s.finish(s.pg->all_reduce(comm::Buffer::cpu(v, 2), comm::ReduceOp::kSum),
                                        "gemini: gradient norm"));
    }
  }
  return std::make_pair(static_cast<double>(v[0]), v[1] != 0.0f);
}

}  // namespace

absl::StatusOr<nn::MixedPrecisionStepResult> GeminiPlugin::step(nn::DynamicLossScaler* scaler,
                                                                 float max_norm) {
  State& s = *state_;
  if (!s.boosted) return absl::FailedPreconditionError("gemini: step before boost");
  if (scaler != nullptr && !s.cuda) {
    return absl::UnimplementedError(
        "gemini: loss scaling is for 16-bit chunks, which the CPU path does not have; train in "
        "float32 without a scaler");
  }
  if (!std::isfinite(max_norm) || max_norm < 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemini: max_norm must be >= 0 (0: no clipping), got ", max_norm));
  }
  for (size_t c = 0; c < s.chunks.size(); ++c) COLOSSAL_RETURN_IF_ERROR(s.fold(static_cast<int>(c)));
  if (s.cuda) s.stream.synchronize();  // the host writes shards the device may still copy
  COLOSSAL_ASSIGN_OR_RETURN(NormParts mine, local_norm(s));
  COLOSSAL_ASSIGN_OR_RETURN(auto total, global_norm(s, mine));

  // As nn::mixed_precision_step: s = the scale the loss was multiplied by.
  nn::MixedPrecisionStepResult r;
  r.loss_scale = scaler != nullptr ? scaler->scale() : 1.0f;
  const float scaled_norm = static_cast<float>(std::sqrt(total.first));
  const double norm = static_cast<double>(scaled_norm) / r.loss_scale;
  r.grad_norm = r.loss_scale == 1.0f ? scaled_norm : static_cast<float>(norm);
  const bool finite = !total.second && std::isfinite(r.grad_norm);
  if (scaler != nullptr) scaler->update(!finite);
  if (!finite) {
    r.skipped = true;  // on every rank: they all saw the same sums
    return r;
  }
  if (max_norm > 0.0f) {  // as nn::clip_grad_by_norm: in double, eps 1e-6
    const double coef = static_cast<double>(max_norm) / (norm + 1e-6);
    r.clip_coef = coef < 1.0 ? static_cast<float>(coef) : 1.0f;
  }
  const float grad_scale = r.clip_coef < 1.0f ? r.loss_scale / r.clip_coef : r.loss_scale;
  ++s.steps;
  kernels::adam::AdamCpuOptions cpu;
  cpu.num_threads = s.options.cpu_threads;
  const kernels::DType copy = s.sixteen_bit() ? s.dtype : kernels::DType::kF32;
  // The device shards first: their kernels run while the host updates its own.
  std::vector<size_t> order;
  for (size_t c = 0; c < s.chunks.size(); ++c) {
    if (s.cuda && s.chunks[c].on_device) order.push_back(c);
  }
  for (size_t c = 0; c < s.chunks.size(); ++c) {
    if (!(s.cuda && s.chunks[c].on_device)) order.push_back(c);
  }
  for (size_t c : order) {
    GeminiChunk& k = s.chunks[c];
    const int64_t es = s.esize();
    for (const GeminiPiece& p : k.pieces) {
      const kernels::adam::AdamOptions o =
          nn::kernel_adam_options(s.optimizer->group_hyper(p.group), s.steps, grad_scale);
      float* master = k.master.data<float>() + p.offset;
      float* m = k.exp_avg.data<float>() + p.offset;
      float* v = k.exp_avg_sq.data<float>() + p.offset;
      // The 16-bit values are the master's rounding (none for float32: the value is the master).
      void* value = s.sixteen_bit() ? static_cast<char*>(k.value.raw_data()) + p.offset * es : nullptr;
      kernels::KernelStatus ks;
      if (s.cuda && k.on_device) {
#if COLOSSAL_WITH_CUDA
        const void* g = static_cast<const char*>(k.grad.raw_data()) + p.offset * es;
        ks = kernels::adam::adam_step_cuda(master, m, v, value, g, nullptr, p.count, s.dtype, copy, o,
                                           s.stream.handle());
#endif
      } else {
        const void* g = static_cast<const char*>(k.grad.raw_data()) + p.offset * es;
        ks = kernels::adam::adam_step_cpu(master, m, v, value, g, nullptr, p.count, s.dtype, copy, o,
                                          cpu);
      }
      COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
          ks, absl::StrCat("gemini: Adam step of chunk ", c, ", group ", p.group)));
    }
  }
  if (s.options.placement_policy == "auto" && !s.auto_placed) COLOSSAL_RETURN_IF_ERROR(s.place_auto());
  return r;
}

}  // namespace colossal::parallel
