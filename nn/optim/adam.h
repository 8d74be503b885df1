// colossal::nn — Adam optimizers: AdamW, CPUAdam and HybridAdam.
//
// One implementation over kernels/adam, in three flavours users know:
//
//   type          parameters on          defaults                       as in
//   "adamw"       CPU and/or CUDA        weight_decay 0.01, decoupled   torch.optim.AdamW
//   "cpu_adam"    CPU only               weight_decay 0, adamw_mode     Colossal-AI CPUAdam
//   "hybrid_adam" CPU and/or CUDA        weight_decay 0, adamw_mode     Colossal-AI HybridAdam
//
// In every flavour CUDA-resident parameters are updated by the fused
// multi-tensor CUDA kernel and CPU-resident ones by the CPU kernel
// (AVX-512/AVX2/scalar, OpenMP), in the same step() (CUDA work is enqueued
// first, so the GPU runs while the CPU computes). The two kernels give
// bit-identical results, so where a parameter lives never changes the numbers.
// adamw_mode = false (cpu_adam / hybrid_adam only) is torch.optim.Adam with L2
// weight decay added to the gradient.
//
// Per parameter and step t (1-based), with g = grad / grad_scale:
//   p *= 1 - lr * weight_decay                      (adamw_mode)
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//   model_copy = p rounded to its dtype             (when the parameter has one)
//
//   std::vector<ParamGroup> groups = split_decay_groups(std::move(params), 0.1);
//   AdamOptions o;
//   o.lr = 6e-4;
//   o.beta2 = 0.95;
//   COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<Adam> opt,
//                             make_hybrid_adam(std::move(groups), o, ctx.compute_stream()));
//   COLOSSAL_ASSIGN_OR_RETURN(StepResult r, opt->step({.grad_scale = loss_scale}));
//
// State per parameter: "exp_avg" (m) and "exp_avg_sq" (v), float32 on the
// parameter's device (nn/optim/param.h has the ownership contract).
#ifndef COLOSSAL_NN_OPTIM_ADAM_H_
#define COLOSSAL_NN_OPTIM_ADAM_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/stream.h"
#include "kernels/adam/adam.h"
#include "nn/optim/optimizer.h"
#include "nn/optim/param.h"

namespace colossal::nn {

enum class AdamVariant { kAdamW, kCpuAdam, kHybridAdam };

// "adamw", "cpu_adam", "hybrid_adam".
const char* adam_variant_name(AdamVariant variant);

// Defaults for every group (a ParamGroup may override lr, weight_decay, betas, eps).
struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool adamw_mode = true;       // decoupled decay; false: L2 (not for "adamw")
  bool bias_correction = true;
  int cpu_threads = 0;          // OpenMP threads of the CPU kernel; 0: OpenMP's default

  // torch.optim.AdamW's defaults: these with weight_decay = 0.01.
  static AdamOptions adamw_defaults();
};

// The group hyper-parameters `options` give every group.
GroupHyperParams adam_hyper(const AdamOptions& options);
// InvalidArgumentError naming the first bad one ("eps must be >= 0 ..."):
// what create() checks for each group, for a front end to check the options
// where the user wrote them.
absl::Status check_adam_hyper(const GroupHyperParams& hyper, AdamVariant variant);

class Adam final : public Optimizer {
 public:
  // An Adam optimizer over `groups`. `stream` is where CUDA parameters'
  // updates are enqueued: a stream of their device (all CUDA parameters must
  // share it); the CPU stream when every parameter is on the CPU.
  // Errors (InvalidArgument naming the group or parameter): lr < 0, betas
  // outside [0, 1), eps < 0, weight_decay < 0, non-finite values;
  // adamw_mode = false for "adamw"; a CUDA parameter for "cpu_adam"; the
  // checks of nn/optim/param.h (dtypes, shapes, devices, duplicates).
  static absl::StatusOr<std::unique_ptr<Adam>> create(AdamVariant variant,
                                                      std::vector<ParamGroup> groups,
                                                      const AdamOptions& options,
                                                      const core::Stream& stream = core::Stream::cpu());

  AdamVariant variant() const { return variant_; }

 private:
  Adam(AdamVariant variant, const AdamOptions& options, const core::Stream& stream);
  absl::Status validate_hyper(const GroupHyperParams& hyper, int group) const override;
  absl::Status validate_param(const ParamRef& param) const override;
  absl::Status do_step(float grad_scale) override;

  AdamVariant variant_;
  int cpu_threads_;
};

// The fused Adam kernel's options for one group's hyper-parameters at `step`
// (1-based) with gradients scaled by `grad_scale` (the loss scale times the
// clip divisor). Shared with plugins that run the kernel on their own shards.
kernels::adam::AdamOptions kernel_adam_options(const GroupHyperParams& hyper, int64_t step,
                                               float grad_scale);

// torch.optim.AdamW (weight_decay 0.01 by default).
absl::StatusOr<std::unique_ptr<Adam>> make_adamw(std::vector<ParamGroup> groups,
                                                 const AdamOptions& options = AdamOptions::adamw_defaults(),
                                                 const core::Stream& stream = core::Stream::cpu());
// Colossal-AI's CPUAdam: CPU-resident parameters only.
absl::StatusOr<std::unique_ptr<Adam>> make_cpu_adam(std::vector<ParamGroup> groups,
                                                    const AdamOptions& options = {});
// Colossal-AI's HybridAdam: CPU and CUDA parameters in one step.
absl::StatusOr<std::unique_ptr<Adam>> make_hybrid_adam(std::vector<ParamGroup> groups,
                                                       const AdamOptions& options = {},
                                                       const core::Stream& stream = core::Stream::cpu());

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_OPTIM_ADAM_H_
