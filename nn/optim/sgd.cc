#include "nn/optim/sgd.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/device/device.h"
#include "core/status/status.h"
#include "nn/optim/kernels/optim_kernels.h"

namespace colossal::nn {

Sgd::Sgd(const core::Stream& stream) : Optimizer("sgd", {"momentum_buffer"}, stream) {}

absl::StatusOr<std::unique_ptr<Sgd>> Sgd::create(std::vector<ParamGroup> groups,
                                                 const SgdOptions& options,
                                                 const core::Stream& stream) {
  std::unique_ptr<Sgd> sgd(new Sgd(stream));
  COLOSSAL_RETURN_IF_ERROR(sgd->init(std::move(groups), sgd_hyper(options)));
  return sgd;
}

GroupHyperParams sgd_hyper(const SgdOptions& options) {
  GroupHyperParams h;
  h.lr = options.lr;
  h.momentum = options.momentum;
  h.dampening = options.dampening;
  h.weight_decay = options.weight_decay;
  h.nesterov = options.nesterov;
  return h;
}

absl::Status check_sgd_hyper(const GroupHyperParams& h) {
  COLOSSAL_RETURN_IF_ERROR(require_float_hyper("lr", h.lr));
  COLOSSAL_RETURN_IF_ERROR(require_float_hyper("momentum", h.momentum));
  if (!valid_float_hyper(h.dampening) || h.dampening > 1) {
    return core::option_error("dampening", absl::StrCat("must be in [0, 1], got ", h.dampening));
  }
  COLOSSAL_RETURN_IF_ERROR(require_float_hyper("weight_decay", h.weight_decay));
  if (h.nesterov && (h.momentum <= 0 || h.dampening != 0)) {
    return core::option_error("nesterov", absl::StrCat("needs momentum > 0 and dampening = 0 (momentum ",
                                                       h.momentum, ", dampening ", h.dampening, ")"));
  }
  return absl::OkStatus();
}

absl::Status Sgd::validate_hyper(const GroupHyperParams& h, int group) const {
  return core::annotate(check_sgd_hyper(h), absl::StrCat("sgd: param group ", group));
}

bool Sgd::group_has_state(const GroupHyperParams& hyper) const { return hyper.momentum != 0; }

absl::Status Sgd::do_step(float grad_scale) {
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const GroupHyperParams& h = groups_[gi].hyper;
    for (Slot& slot : groups_[gi].slots) {
      const ParamRef& p = slot.ref;
      optim_kernels::SgdKernelOptions o;
      o.lr = static_cast<float>(h.lr);
      o.momentum = static_cast<float>(h.momentum);
      o.dampening = static_cast<float>(h.dampening);
      o.weight_decay = static_cast<float>(h.weight_decay);
      o.nesterov = h.nesterov;
      o.grad_scale = grad_scale;
      o.first_step = slot.step == 0;
      float* buf = nullptr;
      if (o.momentum != 0.0f) {
        if (slot.state.empty()) {
          return absl::InternalError(absl::StrCat("sgd: parameter \"", p.name,
                                                  "\" has momentum but no momentum buffer"));
        }
        buf = static_cast<float*>(slot.state[0].raw_data());
      }
      const bool has_copy = p.model_copy.defined();
      const core::DType ct = has_copy ? p.model_copy.dtype() : core::DType::kF32;
      void* copy = has_copy ? p.model_copy.raw_data() : nullptr;
      kernels::KernelStatus ks;
      if (p.master.device().is_cpu()) {
        ks = optim_kernels::sgd_step_cpu(static_cast<float*>(p.master.raw_data()), buf, copy,
                                         p.grad.raw_data(), p.master.numel(), p.grad.dtype(), ct, o);
      } else {
#if COLOSSAL_WITH_CUDA
        core::DeviceGuard guard(stream().device());
        ks = optim_kernels::sgd_step_cuda(static_cast<float*>(p.master.raw_data()), buf, copy,
                                          p.grad.raw_data(), p.master.numel(), p.grad.dtype(), ct,
                                          o, stream().handle());
#else
        ks = kernels::KernelStatus::unsupported("a CUDA parameter in a build without CUDA");
#endif
      }
      COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
          ks, absl::StrCat("sgd: step of parameter \"", p.name, "\"")));
      ++slot.step;
    }
  }
  return absl::OkStatus();
}

}  // namespace colossal::nn
