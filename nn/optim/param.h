// colossal::nn — what an optimizer updates: named parameters, their groups, and
// the weight-decay split every GPT recipe uses.
//
// An optimizer (nn/optim/adam.h, nn/optim/sgd.h) sees each parameter as a
// ParamRef: its name, the float32 master weights it updates, the gradient it
// reads, and optionally a model copy it rewrites from the master after every
// step. Parameters come in ParamGroups, each of which may override the
// optimizer's learning rate, weight decay, betas, ... (torch's param_groups).
//
//   // fp32 model: the master is the model weight itself, no copy.
//   ParamRef w{"h.0.mlp.c_fc.weight", weight_f32, grad_f32};
//   // bf16 model: an fp32 master made from the weight; the weight becomes the model copy.
//   COLOSSAL_ASSIGN_OR_RETURN(ParamRef p, make_master_param("h.0.mlp.c_fc.weight", weight_bf16,
//                                                           grad_bf16, ctx.compute_stream()));
//   // nanoGPT / Colossal-AI examples: 1-D tensors and biases get no weight decay.
//   std::vector<ParamGroup> groups = split_decay_groups(std::move(params), /*weight_decay=*/0.1);
//   groups[1].lr = 3e-4;  // a group may override any hyper-parameter
//
// Ownership and lifetime (DESIGN principle 6). Tensors are shared handles
// (core/tensor/tensor.h): an optimizer keeps a copy of each ParamRef's handles
// for its whole life, so the memory stays valid as long as the optimizer
// lives, whoever else also holds it.
//  * master: float32, updated in place by step(). For a float32 model it is the
//    model's own weight (shared with the model); for a float16/bfloat16 model it
//    is a separate float32 tensor that only the optimizer holds after
//    make_master_param(): the optimizer owns it, saves it in its state dict
//    ("state.<name>.master") and frees it when destroyed.
//  * grad: read by step(), never written (zero_grad() aside). Backward must
//    keep writing into this same memory (e.g. a view of a flat gradient
//    buffer); point the optimizer at new memory with Optimizer::set_grad().
//  * model_copy (optional): written by step() as the master rounded to nearest
//    even, so the model (bf16/fp16 weights) sees every update. It may not
//    alias the master or the gradient.
//  * optimizer state (Adam's exp_avg / exp_avg_sq, SGD's momentum buffer):
//    float32 on the master's device, allocated and zeroed when the optimizer is
//    created, owned by it.
// All three tensors of a ParamRef must have the same shape and live on the same
// device (CPU, or the CUDA device of the optimizer's stream).
#ifndef COLOSSAL_NN_OPTIM_PARAM_H_
#define COLOSSAL_NN_OPTIM_PARAM_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/stream.h"
#include "core/tensor/tensor.h"

namespace colossal::nn {

// One parameter as an optimizer sees it (see the file comment for the contract).
struct ParamRef {
  std::string name;         // unique within an optimizer, e.g. "h.0.attn.c_attn.weight"
  core::Tensor master;      // float32, updated in place
  core::Tensor grad;        // float32, float16 or bfloat16; same shape and device
  core::Tensor model_copy;  // optional (undefined: none); float32/float16/bfloat16
  // A declared parameter (declared_param): no tensors, only its name and
  // shape; ignored when master is defined.
  core::Shape shape{};
};

// A parameter whose memory belongs to a plugin (Gemini keeps the masters,
// moments and gradients in chunks of its own): an optimizer made of declared
// parameters holds the groups, their hyper-parameters and step counts, the
// names and shapes (what a state_dict's meta and checks need), but no tensor.
// Such an optimizer is stepped by its plugin (Plugin::owns_step), never by
// step() (FailedPrecondition); its zero_grad() has nothing to zero.
ParamRef declared_param(std::string name, core::Shape shape);

// A parameter of a model whose weights are `model_weight`: a float32 weight is
// its own master (no copy, model_copy left undefined); a float16/bfloat16 one
// gets a new float32 master holding its exact value, allocated on the weight's
// device and filled on `stream` (a stream of that device when it is a GPU; any
// stream for a CPU weight), and becomes the model copy.
// Errors (InvalidArgument naming `name`): undefined tensors, a non-floating or
// float64 weight, a gradient of another shape or device, a CUDA weight with a
// stream of another device. Out of memory: ResourceExhausted.
absl::StatusOr<ParamRef> make_master_param(std::string name, const core::Tensor& model_weight,
                                           core::Tensor grad, const core::Stream& stream);

// The hyper-parameters one group steps with. Adam uses lr, weight_decay,
// beta1, beta2, eps, bias_correction and adamw_mode; SGD uses lr,
// weight_decay, momentum, dampening and nesterov.
struct GroupHyperParams {
  double lr = 1e-3;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  bool bias_correction = true;
  bool adamw_mode = true;  // decoupled decay (AdamW); false: L2 added to the gradient
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  friend bool operator==(const GroupHyperParams&, const GroupHyperParams&) = default;
};

// A hyper-parameter the update kernels take as a float32 (lr, eps, betas,
// weight_decay, momentum, dampening): true when >= 0 and finite as a float
// (1e300 is finite as a double but infinite once rounded: the kernels would
// see inf).
bool valid_float_hyper(double x);
// OK when valid_float_hyper(value), else InvalidArgumentError
// "<name> must be >= 0 (a finite float32), got <value>".
absl::Status require_float_hyper(absl::string_view name, double value);

// Parameters sharing hyper-parameters. Unset overrides take the optimizer's
// defaults (its AdamOptions / SgdOptions), as torch fills a group's missing keys.
struct ParamGroup {
  ParamGroup() = default;
  explicit ParamGroup(std::vector<ParamRef> group_params) : params(std::move(group_params)) {}

  std::vector<ParamRef> params;
  std::optional<double> lr;
  std::optional<double> weight_decay;
  std::optional<double> beta1;
  std::optional<double> beta2;
  std::optional<double> eps;
  std::optional<double> momentum;
  std::optional<double> dampening;
  std::optional<bool> nesterov;
};

// `defaults` with the group's overrides applied.
GroupHyperParams resolve_group(const ParamGroup& group, const GroupHyperParams& defaults);

// Which parameters get no weight decay. The defaults are nanoGPT's rule (decay
// only tensors of rank >= 2) plus names ending in ".bias", as in Colossal-AI's
// examples; add e.g. "LayerNorm.weight" or "ln_" to name_substrings for models
// whose norm gains are not 1-D.
struct NoDecayRule {
  bool low_rank = true;  // master tensors of rank <= 1 (biases, norm gains)
  std::vector<std::string> name_suffixes = {".bias"};
  std::vector<std::string> name_substrings = {};
};

// Whether `param` matches `rule` (gets no weight decay). The rank is the
// master's, so split before carving parameters into flat 1-D shards.
bool is_no_decay(const ParamRef& param, const NoDecayRule& rule = {});

// Two groups, in this order: [0] the parameters that decay, with
// weight_decay = `weight_decay`; [1] the ones `rule` exempts, with
// weight_decay = 0. Parameters keep their order; either group may be empty.
std::vector<ParamGroup> split_decay_groups(std::vector<ParamRef> params, double weight_decay,
                                           const NoDecayRule& rule = {});

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_OPTIM_PARAM_H_
