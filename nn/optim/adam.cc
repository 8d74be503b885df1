#include "nn/optim/adam.h"

#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/device/device.h"
#include "core/status/status.h"
#include "kernels/adam/adam.h"

namespace colossal::nn {
const char* adam_variant_name(AdamVariant variant) {
  switch (variant) {
    case AdamVariant::kAdamW: return "adamw";
    case AdamVariant::kCpuAdam: return "cpu_adam";
    case AdamVariant::kHybridAdam: return "hybrid_adam";
  }
  return "adam";
}

AdamOptions AdamOptions::adamw_defaults() {
  AdamOptions o;
  o.weight_decay = 0.01;
  return o;
}

Adam::Adam(AdamVariant variant, const AdamOptions& options, const core::Stream& stream)
    : Optimizer(adam_variant_name(variant), {"exp_avg", "exp_avg_sq"}, stream),
      variant_(variant),
      cpu_threads_(options.cpu_threads) {}

absl::StatusOr<std::unique_ptr<Adam>> Adam::create(AdamVariant variant,
                                                   std::vector<ParamGroup> groups,
                                                   const AdamOptions& options,
                                                   const core::Stream& stream) {
  if (options.cpu_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat(adam_variant_name(variant),
                                                   ": cpu_threads must be >= 0, got ",
                                                   options.cpu_threads));
  }
  std::unique_ptr<Adam> adam(new Adam(variant, options, stream));
  COLOSSAL_RETURN_IF_ERROR(adam->init(std::move(groups), adam_hyper(options)));
  return adam;
}

GroupHyperParams adam_hyper(const AdamOptions& options) {
  GroupHyperParams h;
  h.lr = options.lr;
  h.beta1 = options.beta1;
  h.beta2 = options.beta2;
  h.eps = options.eps;
  h.weight_decay = options.weight_decay;
  h.adamw_mode = options.adamw_mode;
  h.bias_correction = options.bias_correction;
  return h;
}

absl::Status check_adam_hyper(const GroupHyperParams& h, AdamVariant variant) {
  COLOSSAL_RETURN_IF_ERROR(require_float_hyper("lr", h.lr));
  if (!valid_float_hyper(h.beta1) || h.beta1 >= 1 || !valid_float_hyper(h.beta2) || h.beta2 >= 1) {
    return core::option_error("betas", absl::StrCat("must be in [0, 1), got (", h.beta1, ", ", h.beta2, ")"));
  }
  COLOSSAL_RETURN_IF_ERROR(require_float_hyper("eps", h.eps));
  COLOSSAL_RETURN_IF_ERROR(require_float_hyper("weight_decay", h.weight_decay));
  if (variant == AdamVariant::kAdamW && !h.adamw_mode) {
    return core::option_error("adamw_mode", "= false is Adam with L2 decay, not AdamW; use cpu_adam or hybrid_adam");
  }
  return absl::OkStatus();
}

absl::Status Adam::validate_hyper(const GroupHyperParams& h, int group) const {
  return core::annotate(check_adam_hyper(h, variant_),
                        absl::StrCat(type(), ": param group ", group));
}

absl::Status Adam::validate_param(const ParamRef& p) const {
  if (variant_ == AdamVariant::kCpuAdam && !p.master.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cpu_adam: parameter \"", p.name, "\" is on ", p.master.device().to_string(),
        "; cpu_adam updates CPU-resident parameters only (hybrid_adam takes CPU and CUDA ones)"));
  }
  return absl::OkStatus();
}

absl::Status Adam::do_step(float grad_scale) {
  // One kernel call per (group, device, grad dtype, copy dtype, step number).
  struct Bucket {
    std::vector<kernels::adam::AdamTensor> tensors;
    std::vector<Slot*> slots;
  };
  using Key = std::tuple<int, bool, int, int, int64_t>;
  std::map<Key, Bucket> buckets;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    for (Slot& slot : groups_[gi].slots) {
      const ParamRef& p = slot.ref;
      const bool has_copy = p.model_copy.defined();
      const Key key{static_cast<int>(gi), p.master.device().is_cuda(),
                    static_cast<int>(p.grad.dtype()),
                    static_cast<int>(has_copy ? p.model_copy.dtype() : core::DType::kF32),
                    slot.step + 1};
      Bucket& b = buckets[key];
      b.tensors.push_back(kernels::adam::AdamTensor{
          static_cast<float*>(p.master.raw_data()), static_cast<float*>(slot.state[0].raw_data()),
          static_cast<float*>(slot.state[1].raw_data()), p.grad.raw_data(),
          has_copy ? p.model_copy.raw_data() : nullptr, p.master.numel()});
      b.slots.push_back(&slot);
    }
  }
  // CUDA launches first: the GPU works while the CPU kernel runs.
  for (const bool cuda : {true, false}) {
    for (auto& [key, bucket] : buckets) {
      const auto& [gi, on_cuda, grad_dtype, copy_dtype, step] = key;
      if (on_cuda != cuda) continue;
      const kernels::adam::AdamOptions o = kernel_adam_options(groups_[gi].hyper, step, grad_scale);
      const auto gt = static_cast<core::DType>(grad_dtype);
      const auto ct = static_cast<core::DType>(copy_dtype);
      const int64_t n = static_cast<int64_t>(bucket.tensors.size());
      kernels::KernelStatus ks;
      if (cuda) {
#if COLOSSAL_WITH_CUDA
        core::DeviceGuard guard(stream().device());
        ks = kernels::adam::adam_step_tensors_cuda(bucket.tensors.data(), /*found_inf=*/nullptr,
                                                   /*scratch=*/nullptr, 0, n, gt, ct, o,
                                                   stream().handle());
#else
        ks = kernels::KernelStatus::unsupported("a CUDA parameter in a build without CUDA");
#endif
      } else {
        kernels::adam::AdamCpuOptions cpu;
        cpu.num_threads = cpu_threads_;
        ks = kernels::adam::adam_step_tensors_cpu(bucket.tensors.data(), /*found_inf=*/nullptr, n,
                                                  gt, ct, o, cpu);
      }
      COLOSSAL_RETURN_IF_ERROR(
          core::from_kernel_status(ks, absl::StrCat(type(), ": step of param group ", gi)));
      for (Slot* s : bucket.slots) ++s->step;
    }
  }
  return absl::OkStatus();
}

kernels::adam::AdamOptions kernel_adam_options(const GroupHyperParams& h, int64_t step,
                                               float grad_scale) {
  kernels::adam::AdamOptions o;
  o.step = step;
  o.lr = static_cast<float>(h.lr);
  o.beta1 = static_cast<float>(h.beta1);
  o.beta2 = static_cast<float>(h.beta2);
  o.eps = static_cast<float>(h.eps);
  o.weight_decay = static_cast<float>(h.weight_decay);
  o.adamw_mode = h.adamw_mode;
  o.bias_correction = h.bias_correction;
  o.grad_scale = grad_scale;
  return o;
}

absl::StatusOr<std::unique_ptr<Adam>> make_adamw(std::vector<ParamGroup> groups,
                                                 const AdamOptions& options,
                                                 const core::Stream& stream) {
  return Adam::create(AdamVariant::kAdamW, std::move(groups), options, stream);
}

absl::StatusOr<std::unique_ptr<Adam>> make_cpu_adam(std::vector<ParamGroup> groups,
                                                    const AdamOptions& options) {
  return Adam::create(AdamVariant::kCpuAdam, std::move(groups), options, core::Stream::cpu());
}

absl::StatusOr<std::unique_ptr<Adam>> make_hybrid_adam(std::vector<ParamGroup> groups,
                                                       const AdamOptions& options,
                                                       const core::Stream& stream) {
  return Adam::create(AdamVariant::kHybridAdam, std::move(groups), options, stream);
}

}  // namespace colossal::nn
