#include "nn/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/ops/elementwise.h"
#include "core/status/check.h"
#include "core/status/status.h"
#include "nn/optim/device_util.h"

namespace colossal::nn {
namespace {

// State views start on 64-byte boundaries (16 floats) inside a device's buffer.
constexpr int64_t kStateAlignFloats = 16;

std::string param_what(absl::string_view name) { return absl::StrCat("parameter \"", name, "\""); }

bool float_dtype(core::DType t) {
  return t == core::DType::kF32 || t == core::DType::kF16 || t == core::DType::kBF16;
}

absl::Status check_grad(const std::string& what, const core::Tensor& master,
                        const core::Tensor& grad) {
  if (!grad.defined()) return absl::InvalidArgumentError(absl::StrCat(what, ": undefined gradient"));
  if (!float_dtype(grad.dtype()) || grad.shape() != master.shape() ||
      grad.device() != master.device()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the gradient must be float32, float16 or bfloat16 with the master's "
                     "shape and device; master ", master.to_string(), ", gradient ",
                     grad.to_string()));
  }
  if (internal::overlaps(master, grad)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the gradient overlaps the master"));
  }
  return absl::OkStatus();
}

}  // namespace

Optimizer::Optimizer(std::string type, std::vector<std::string> state_names,
                     const core::Stream& stream)
    : type_(std::move(type)), state_names_(std::move(state_names)), stream_(stream) {}

absl::Status Optimizer::check_param(const ParamRef& p) const {
  if (p.name.empty()) return absl::InvalidArgumentError(absl::StrCat(type_, ": a parameter has an empty name"));
  const std::string what = absl::StrCat(type_, ": ", param_what(p.name));
  if (!p.master.defined() && !p.grad.defined() && !p.model_copy.defined()) {
    return absl::OkStatus();  // declared (init checks that all are)
  }
  if (!p.master.defined() || p.master.dtype() != core::DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the master must be a float32 tensor (make_master_param makes one from a "
              "float16/bfloat16 weight), got ", p.master.to_string()));
  }
  COLOSSAL_RETURN_IF_ERROR(validate_param(p));  // e.g. cpu_adam's CPU-only rule, named first
  COLOSSAL_RETURN_IF_ERROR(internal::stream_for(p.master.device(), stream_, what).status());
  COLOSSAL_RETURN_IF_ERROR(check_grad(what, p.master, p.grad));
  if (p.model_copy.defined()) {
    if (!float_dtype(p.model_copy.dtype()) || p.model_copy.shape() != p.master.shape() ||
        p.model_copy.device() != p.master.device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": the model copy must be float32, float16 or bfloat16 with the master's shape "
                "and device; master ", p.master.to_string(), ", model copy ",
          p.model_copy.to_string()));
    }
    if (internal::overlaps(p.model_copy, p.master) || internal::overlaps(p.model_copy, p.grad)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the model copy overlaps the master or the gradient"));
    }
  }
  return absl::OkStatus();
}

absl::Status Optimizer::init(std::vector<ParamGroup> groups, const GroupHyperParams& defaults) {
  std::set<std::string> names;
  // (storage, begin, end, name) of every master, to catch one tensor given twice.
  std::vector<std::tuple<const core::Storage*, size_t, size_t, std::string>> ranges;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    Group g;
    g.hyper = resolve_group(groups[gi], defaults);
    COLOSSAL_RETURN_IF_ERROR(validate_hyper(g.hyper, static_cast<int>(gi)));
    for (ParamRef& p : groups[gi].params) {
      COLOSSAL_RETURN_IF_ERROR(check_param(p));
      if (!names.insert(p.name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(type_, ": ", param_what(p.name), " is given twice"));
      }
      if (p.master.defined() && p.master.nbytes() > 0) {
        ranges.emplace_back(p.master.storage().get(), p.master.byte_offset(),
                            p.master.byte_offset() + p.master.nbytes(), p.name);
      }
      g.slots.push_back(Slot{std::move(p), 0, {}});
    }
    groups_.push_back(std::move(g));
  }
  // Either every parameter is declared or none is.
  size_t declared = 0, total = 0;
  for (const Group& g : groups_) {
    for (const Slot& slot : g.slots) {
      ++total;
      if (!slot.ref.master.defined() && !slot.ref.model_copy.defined()) ++declared;
    }
  }
  if (declared != 0 && declared != total) {
    return absl::InvalidArgumentError(absl::StrCat(
        type_, ": ", declared, " of ", total,
        " parameters are declared (no tensors) and the others are not: use one kind"));
  }
  declared_ = total > 0 && declared == total;
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    const auto& [s0, b0, e0, n0] = ranges[i - 1];
    const auto& [s1, b1, e1, n1] = ranges[i];
    if (s0 == s1 && b1 < e0) {
      return absl::InvalidArgumentError(absl::StrCat(type_, ": the masters of ", param_what(n0),
                                                     " and ", param_what(n1), " overlap"));
    }
  }
  return absl::OkStatus();  // state: on first use (allocate_state)
}

const core::Tensor& Optimizer::shape_of(const Slot& slot) {
  return slot.ref.master.defined() ? slot.ref.master : slot.ref.model_copy;
}

const core::Shape& Optimizer::slot_shape(const Slot& slot) {
  const core::Tensor& t = shape_of(slot);
  return t.defined() ? t.shape() : slot.ref.shape;
}

absl::Status Optimizer::check_not_declared(absl::string_view what) const {
  if (!declared_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      type_, ": ", what, ": the parameters are declared, their memory is a plugin's (gemini): "
      "the Booster steps and checkpoints them through the plugin"));
}

void Optimizer::drop_masters() {
  for (Group& g : groups_) {
    for (Slot& slot : g.slots) {
      if (slot.ref.model_copy.defined()) slot.ref.master = core::Tensor();
    }
  }
  masters_dropped_ = true;
}

void Optimizer::drop_grads() {
  for (Group& g : groups_) {
    for (Slot& slot : g.slots) slot.ref.grad = core::Tensor();
  }
  grads_dropped_ = true;
}

void Optimizer::release_state() {
  for (Group& g : groups_) {
    for (Slot& slot : g.slots) slot.state.clear();
  }
  state_allocated_ = false;
}

absl::Status Optimizer::allocate_state() {
  if (state_allocated_ || state_names_.empty()) return absl::OkStatus();
  COLOSSAL_RETURN_IF_ERROR(check_not_declared("state"));
  state_allocated_ = true;
  // One zeroed float32 buffer per device, carved into aligned views.
  for (const bool cuda : {false, true}) {
    int64_t total = 0;
    for (const Group& g : groups_) {
      if (!group_has_state(g.hyper)) continue;
      for (const Slot& s : g.slots) {
        if (shape_of(s).device().is_cuda() != cuda) continue;
        const int64_t n = shape_of(s).numel();
        total += state_names_.size() * ((n + kStateAlignFloats - 1) / kStateAlignFloats) *
                 kStateAlignFloats;
      }
    }
    if (total == 0) continue;
    const core::Stream s = cuda ? stream_ : core::Stream::cpu();
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor buffer,
                              core::Tensor::empty({total}, core::DType::kF32, s));
    COLOSSAL_RETURN_IF_ERROR(buffer.set_zero(s));
    int64_t offset = 0;
    for (Group& g : groups_) {
      if (!group_has_state(g.hyper)) continue;
      for (Slot& slot : g.slots) {
        if (shape_of(slot).device().is_cuda() != cuda) continue;
        const int64_t n = shape_of(slot).numel();
        for (size_t k = 0; k < state_names_.size(); ++k) {
          COLOSSAL_ASSIGN_OR_RETURN(
              core::Tensor view,
              core::Tensor::from_storage(buffer.storage(),
                                         buffer.byte_offset() + offset * sizeof(float),
                                         shape_of(slot).shape(), core::DType::kF32));
          slot.state.push_back(std::move(view));
          offset += (n + kStateAlignFloats - 1) / kStateAlignFloats * kStateAlignFloats;
        }
      }
    }
    COLOSSAL_CHECK_EQ(offset, total);
  }
  return absl::OkStatus();
}

absl::Status Optimizer::allocate_slot_state(Slot& slot) {
  COLOSSAL_ASSIGN_OR_RETURN(core::Stream s,
                            internal::stream_for(shape_of(slot).device(), stream_, slot.ref.name));
  slot.state.clear();
  for (size_t k = 0; k < state_names_.size(); ++k) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t,
                              core::Tensor::empty(shape_of(slot).shape(), core::DType::kF32, s));
    COLOSSAL_RETURN_IF_ERROR(t.set_zero(s));
    slot.state.push_back(std::move(t));
  }
  return absl::OkStatus();
}

absl::StatusOr<StepResult> Optimizer::step(const StepOptions& options) {
  COLOSSAL_RETURN_IF_ERROR(check_not_declared("step"));
  if (masters_dropped_ || grads_dropped_) {
    return absl::FailedPreconditionError(absl::StrCat(
        type_, ": step: the ", masters_dropped_ ? "float32 masters" : "gradients",
        " were dropped (a plugin such as low_level_zero keeps its own and steps instead)"));
  }
  if (!std::isfinite(options.grad_scale) || !(options.grad_scale > 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        type_, ": step: grad_scale must be positive and finite, got ", options.grad_scale));
  }
  if (options.found_inf != nullptr) {
    COLOSSAL_ASSIGN_OR_RETURN(
        float flag, internal::read_float_scalar(*options.found_inf, stream_,
                                                absl::StrCat(type_, ": step: found_inf")));
    if (flag != 0.0f) return StepResult{true};
  }
  COLOSSAL_RETURN_IF_ERROR(allocate_state());
  COLOSSAL_RETURN_IF_ERROR(do_step(options.grad_scale));
  return StepResult{false};
}

absl::Status Optimizer::zero_grad() {
  // The plugin's gradients: Plugin::zero_grad.
  if (declared_ || grads_dropped_) return absl::OkStatus();
  for (Group& g : groups_) {
    for (Slot& slot : g.slots) {
      COLOSSAL_ASSIGN_OR_RETURN(core::Stream s,
                                internal::stream_for(slot.ref.grad.device(), stream_, slot.ref.name));
      COLOSSAL_RETURN_IF_ERROR(slot.ref.grad.set_zero(s));
    }
  }
  return absl::OkStatus();
}

const GroupHyperParams& Optimizer::group_hyper(int group) const {
  COLOSSAL_CHECK(group >= 0 && group < num_groups()) << "group " << group << " of " << num_groups();
  return groups_[group].hyper;
}

std::vector<ParamRef> Optimizer::group_params(int group) const {
  COLOSSAL_CHECK(group >= 0 && group < num_groups()) << "group " << group << " of " << num_groups();
  std::vector<ParamRef> out;
  for (const Slot& s : groups_[group].slots) out.push_back(s.ref);
  return out;
}

std::vector<core::Tensor> Optimizer::grads() const {
  std::vector<core::Tensor> out;
  for (const Group& g : groups_) {
    for (const Slot& s : g.slots) out.push_back(s.ref.grad);
  }
  return out;
}

std::vector<double> Optimizer::lrs() const {
  std::vector<double> out;
  for (const Group& g : groups_) out.push_back(g.hyper.lr);
  return out;
}

absl::Status Optimizer::set_lr(int group, double lr) {
  if (group < 0 || group >= num_groups()) {
    return absl::InvalidArgumentError(
        absl::StrCat(type_, ": set_lr: group ", group, " out of range (", num_groups(), " groups)"));
  }
  if (!valid_float_hyper(lr)) {  // the kernels take it as a float: 1e300 would step by inf
    return absl::InvalidArgumentError(absl::StrCat(
        type_, ": set_lr: lr of group ", group, " must be >= 0 (a finite float32), got ", lr));
  }
  groups_[group].hyper.lr = lr;
  return absl::OkStatus();
}

absl::Status Optimizer::set_lrs(absl::Span<const double> lrs) {
  if (static_cast<int>(lrs.size()) != num_groups()) {
    return absl::InvalidArgumentError(absl::StrCat(type_, ": set_lrs: ", lrs.size(),
                                                   " learning rates for ", num_groups(), " groups"));
  }
  for (int g = 0; g < num_groups(); ++g) {
    if (!valid_float_hyper(lrs[g])) return set_lr(g, lrs[g]);  // its error
  }
  for (int g = 0; g < num_groups(); ++g) groups_[g].hyper.lr = lrs[g];
  return absl::OkStatus();
}

const Optimizer::Slot* Optimizer::find_slot(absl::string_view name) const {
  for (const Group& g : groups_) {
    for (const Slot& s : g.slots) {
      if (s.ref.name == name) return &s;
    }
  }
  return nullptr;
}

Optimizer::Slot* Optimizer::find_slot(absl::string_view name) {
  return const_cast<Slot*>(static_cast<const Optimizer*>(this)->find_slot(name));
}

absl::Status Optimizer::set_grad(absl::string_view name, core::Tensor grad) {
  Slot* slot = find_slot(name);
  if (slot == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(type_, ": set_grad: unknown ", param_what(name)));
  }
  const std::string what = absl::StrCat(type_, ": set_grad: ", param_what(name));
  COLOSSAL_RETURN_IF_ERROR(check_not_declared("set_grad"));
  COLOSSAL_RETURN_IF_ERROR(check_grad(what, shape_of(*slot), grad));
  if (internal::overlaps(slot->ref.model_copy, grad)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the gradient overlaps the model copy"));
  }
  slot->ref.grad = std::move(grad);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Optimizer::param_step(absl::string_view name) const {
  const Slot* slot = find_slot(name);
  if (slot == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(type_, ": unknown ", param_what(name)));
  }
  return slot->step;
}

absl::StatusOr<core::Tensor> Optimizer::state_tensor(absl::string_view name,
                                                     absl::string_view state) const {
  // Allocating on first use does not change what the optimizer means (zeroed
  // state either way): logically const.
  COLOSSAL_RETURN_IF_ERROR(const_cast<Optimizer*>(this)->allocate_state());
  const Slot* slot = find_slot(name);
  if (slot == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(type_, ": unknown ", param_what(name)));
  }
  for (size_t k = 0; k < state_names_.size(); ++k) {
    if (state_names_[k] != state) continue;
    if (slot->state.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(type_, ": ", param_what(name), " keeps no \"",
                                                     state, "\" (its group has no state)"));
    }
    return slot->state[k];
  }
  return absl::InvalidArgumentError(
      absl::StrCat(type_, ": no state \"", state, "\" (", type_, " keeps ",
                   state_names_.empty() ? std::string("none") : absl::StrJoin(state_names_, ", "), ")"));
}

absl::StatusOr<OptimizerStateDict> Optimizer::state_dict() const {
  COLOSSAL_RETURN_IF_ERROR(const_cast<Optimizer*>(this)->allocate_state());  // as in state_tensor
  OptimizerStateDict out;
  out.meta.type = type_;
  for (const Group& g : groups_) {
    GroupState gs;
    gs.hyper = g.hyper;
    for (const Slot& s : g.slots) {
      gs.params.push_back(s.ref.name);
      for (size_t k = 0; k < s.state.size(); ++k) {
        out.tensors[state_key(s.ref.name, state_names_[k])] = s.state[k];
      }
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor step,
                                core::Tensor::empty(core::Shape(), core::DType::kI64,
                                                    core::Stream::cpu()));
      *step.data<int64_t>() = s.step;
      out.tensors[state_key(s.ref.name, "step")] = std::move(step);
      if (s.ref.model_copy.defined() && !masters_dropped_) {
        out.tensors[state_key(s.ref.name, "master")] = s.ref.master;
      }
    }
    out.meta.groups.push_back(std::move(gs));
  }
  return out;
}

namespace {

// Where a loaded tensor may live: the CPU, or the optimizer stream's device.
absl::Status check_loadable_tensor(const std::string& key, const core::Tensor& t,
                                   const core::Shape& shape, core::DType dtype,
                                   const core::Stream& stream) {
  if (!t.defined() || t.dtype() != dtype || t.shape() != shape) {
    return absl::InvalidArgumentError(absl::StrCat("load_state_dict: \"", key, "\" must be ",
                                                   core::dtype_name(dtype), " ", shape.to_string(),
                                                   ", got ", t.to_string()));
  }
  if (t.device().is_cuda() && t.device() != stream.device()) {
    return absl::InvalidArgumentError(absl::StrCat("load_state_dict: \"", key, "\" is on ",
                                                   t.device().to_string(), "; the optimizer's stream is on ",
                                                   stream.device().to_string()));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> read_step(const std::string& key, const core::Tensor& t,
                                  const core::Stream& stream) {
  if (!t.defined() || t.dtype() != core::DType::kI64 || t.numel() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "load_state_dict: \"", key, "\" must be an int64 tensor of one element, got ", t.to_string()));
  }
  int64_t step = 0;
  if (t.device().is_cpu()) {
    step = *t.data<int64_t>();
  } else {
    COLOSSAL_ASSIGN_OR_RETURN(core::Stream s, internal::stream_for(t.device(), stream, key));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host, t.to(core::Device::cpu(), s));
    s.synchronize();
    step = *host.data<int64_t>();
  }
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("load_state_dict: \"", key, "\" is ", step,
                                                   "; step counts are >= 0"));
  }
  return step;
}

}  // namespace

absl::Status Optimizer::check_state_dict(const OptimizerStateDict& state) const {
  const OptimizerMeta& meta = state.meta;
  if (is_adam_type(meta.type) != is_adam_type(type_) || (meta.type != type_ && !is_adam_type(type_))) {
    return absl::InvalidArgumentError(absl::StrCat("load_state_dict: the state is of a \"", meta.type,
                                                   "\" optimizer; this one is \"", type_, "\""));
  }
  if (meta.groups.size() != groups_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("load_state_dict: the state has ", meta.groups.size(),
                                                   " parameter groups; this ", type_, " has ",
                                                   groups_.size()));
  }
  std::set<std::string> allowed;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Group& g = groups_[gi];
    const GroupState& gs = meta.groups[gi];
    COLOSSAL_RETURN_IF_ERROR(core::annotate(validate_hyper(gs.hyper, static_cast<int>(gi)),
                                            "load_state_dict"));
    for (size_t i = 0; i < std::max(g.slots.size(), gs.params.size()); ++i) {
      if (i >= g.slots.size() || i >= gs.params.size() || g.slots[i].ref.name != gs.params[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "load_state_dict: param_groups[", gi, "] parameter ", i, " is ",
            i < gs.params.size() ? absl::StrCat("\"", gs.params[i], "\"") : std::string("missing"),
            " in the state but ",
            i < g.slots.size() ? absl::StrCat("\"", g.slots[i].ref.name, "\"") : std::string("missing"),
            " here (", gs.params.size(), " vs ", g.slots.size(), " parameters)"));
      }
      const Slot& slot = g.slots[i];
      const std::string step_key = state_key(slot.ref.name, "step");
      const auto step_it = state.tensors.find(step_key);
      if (step_it == state.tensors.end()) {
        return absl::InvalidArgumentError(absl::StrCat("load_state_dict: missing \"", step_key, "\""));
      }
      COLOSSAL_RETURN_IF_ERROR(read_step(step_key, step_it->second, stream_).status());
      allowed.insert(step_key);
      for (const std::string& name : state_names_) {
        const std::string key = state_key(slot.ref.name, name);
        const auto it = state.tensors.find(key);
        if (it == state.tensors.end()) {
          if (group_has_state(gs.hyper)) {
            return absl::InvalidArgumentError(absl::StrCat("load_state_dict: missing \"", key, "\""));
          }
          continue;
        }
        COLOSSAL_RETURN_IF_ERROR(check_loadable_tensor(key, it->second, slot_shape(slot),
                                                       core::DType::kF32, stream_));
        allowed.insert(key);
      }
      const std::string master_key = state_key(slot.ref.name, "master");
      if (const auto it = state.tensors.find(master_key); it != state.tensors.end()) {
        COLOSSAL_RETURN_IF_ERROR(check_loadable_tensor(master_key, it->second,
                                                       slot_shape(slot), core::DType::kF32,
                                                       stream_));
        allowed.insert(master_key);
      }
    }
  }
  for (const auto& [key, tensor] : state.tensors) {
    if (allowed.count(key) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("load_state_dict: unexpected key \"", key,
                                                     "\" (no such parameter or state in this ",
                                                     type_, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status Optimizer::load_state_meta(const OptimizerStateDict& state) {
  COLOSSAL_RETURN_IF_ERROR(check_state_dict(state));
  std::vector<int64_t> steps;  // read before anything changes
  for (const Group& g : groups_) {
    for (const Slot& slot : g.slots) {
      const std::string step_key = state_key(slot.ref.name, "step");
      COLOSSAL_ASSIGN_OR_RETURN(int64_t step,
                                read_step(step_key, state.tensors.at(step_key), stream_));
      steps.push_back(step);
    }
  }
  size_t i = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    groups_[gi].hyper = state.meta.groups[gi].hyper;
    for (Slot& slot : groups_[gi].slots) slot.step = steps[i++];
  }
  return absl::OkStatus();
}

absl::Status Optimizer::load_state_dict(const OptimizerStateDict& state) {
  COLOSSAL_RETURN_IF_ERROR(check_state_dict(state));
  COLOSSAL_RETURN_IF_ERROR(allocate_state());
  // Copies `src` into `dst` on a stream valid for both (checked above).
  auto copy_into = [&](core::Tensor& dst, const core::Tensor& src) -> absl::Status {
    if (dst.storage() == src.storage() && dst.byte_offset() == src.byte_offset()) {
      return absl::OkStatus();
    }
    const bool cuda = dst.device().is_cuda() || src.device().is_cuda();
    return dst.copy_from(src, cuda ? stream_ : core::Stream::cpu());
  };
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    Group& g = groups_[gi];
    g.hyper = state.meta.groups[gi].hyper;
    for (Slot& slot : g.slots) {
      const std::string step_key = state_key(slot.ref.name, "step");
      COLOSSAL_ASSIGN_OR_RETURN(slot.step, read_step(step_key, state.tensors.at(step_key), stream_));
      for (size_t k = 0; k < state_names_.size(); ++k) {
        const auto it = state.tensors.find(state_key(slot.ref.name, state_names_[k]));
        if (it == state.tensors.end()) continue;
        if (slot.state.empty()) COLOSSAL_RETURN_IF_ERROR(allocate_slot_state(slot));
        COLOSSAL_RETURN_IF_ERROR(copy_into(slot.state[k], it->second));
      }
      const auto it = state.tensors.find(state_key(slot.ref.name, "master"));
      if (it == state.tensors.end()) continue;
      // Dropped masters: the saved master's rounding goes straight to the model copy.
      core::Tensor m = it->second;
      if (slot.ref.master.defined()) {
        COLOSSAL_RETURN_IF_ERROR(copy_into(slot.ref.master, it->second));
        m = slot.ref.master;
      } else if (m.device() != slot.ref.model_copy.device()) {
        COLOSSAL_ASSIGN_OR_RETURN(m, m.to(slot.ref.model_copy.device(), stream_));
      }
      if (!slot.ref.model_copy.defined()) continue;
      COLOSSAL_RETURN_IF_ERROR(core::annotate(
          core::ops::cast(stream_, slot.ref.model_copy, m),
          absl::StrCat("load_state_dict: model copy of ", param_what(slot.ref.name))));
    }
  }
  return absl::OkStatus();
}

}  // namespace colossal::nn
