// colossal::nn — SGD with momentum, dampening, Nesterov and weight decay, as
// torch.optim.SGD.
//
// Per parameter and step, with g = grad / grad_scale:
//   g += weight_decay * p                                (weight_decay != 0)
//   buf = first step ? g : momentum * buf + (1 - dampening) * g   (momentum != 0)
//   g = nesterov ? g + momentum * buf : buf              (momentum != 0)
//   p -= lr * g;  model_copy = p rounded to its dtype
// CPU parameters run a single-threaded loop, CUDA ones a CUDA kernel
// (nn/optim/kernels, bit-identical to the CPU loop), both in the same step().
//
//   SgdOptions o;
//   o.lr = 0.1;
//   o.momentum = 0.9;
//   o.nesterov = true;
//   COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> sgd, Sgd::create(std::move(groups), o));
//   COLOSSAL_ASSIGN_OR_RETURN(StepResult r, sgd->step());
//
// State per parameter: "momentum_buffer" (float32, the parameter's device) for
// groups with momentum != 0; a group without momentum keeps none.
#ifndef COLOSSAL_NN_OPTIM_SGD_H_
#define COLOSSAL_NN_OPTIM_SGD_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/stream.h"
#include "nn/optim/optimizer.h"
#include "nn/optim/param.h"

namespace colossal::nn {

// Defaults for every group (a ParamGroup may override each of these).
struct SgdOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// The group hyper-parameters `options` give every group, and what create()
// checks of each group (InvalidArgumentError naming the first bad one), for a
// front end to check the options where the user wrote them.
GroupHyperParams sgd_hyper(const SgdOptions& options);
absl::Status check_sgd_hyper(const GroupHyperParams& hyper);

class Sgd final : public Optimizer {
 public:
  // An SGD optimizer over `groups`; `stream` as for Adam::create.
  // Errors (InvalidArgument naming the group or parameter): lr, momentum or
  // weight_decay negative or non-finite, dampening outside [0, 1], nesterov
  // without momentum > 0 and dampening == 0 (torch's rule), and the checks of
  // nn/optim/param.h.
  static absl::StatusOr<std::unique_ptr<Sgd>> create(std::vector<ParamGroup> groups,
                                                     const SgdOptions& options = {},
                                                     const core::Stream& stream = core::Stream::cpu());

 private:
  explicit Sgd(const core::Stream& stream);
  absl::Status validate_hyper(const GroupHyperParams& hyper, int group) const override;
  bool group_has_state(const GroupHyperParams& hyper) const override;
  absl::Status do_step(float grad_scale) override;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_OPTIM_SGD_H_
