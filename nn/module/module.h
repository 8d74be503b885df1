// colossal::nn — the Module contract: explicit forward and backward.
//
// A Module (Torch7 nn's contract, llm.c's conventions):
//   * forward(ctx, input) returns the output and a per-call Saved object with
//     whatever the backward needs. The module itself keeps no activations, so
//     several calls (micro-batches) may be in flight at once.
//   * backward(ctx, saved, grad_output) returns the input gradient (a new
//     tensor: OVERWRITTEN semantics) and ACCUMULATES (+=) the gradients of the
//     module's parameters into their views. Zeroing gradients is the caller's
//     job (ParameterStore::zero_grad). Modules whose input is not
//     differentiable (token ids) return an undefined tensor.
//   * Parameters live in the model's flat buffers (parameter.h). A module
//     declares its entries into the model's one ParameterTable (declare), and
//     after the ParameterStore is made looks its views up by name (bind).
//     Names are the module's name (e.g. "transformer.h.0.attn.c_attn") plus a
//     suffix ("weight", "bias").
//   * Hooks: plain std::function lists run before and after each forward and
//     backward (ZeRO-3 gathers parameters before, releases after; DDP starts a
//     reduction after backward). A hook returning an error stops the call.
//
// Containers: Sequential chains children in forward and walks them in reverse
// in backward; an error from child i is prefixed with its index, type and name.
//
//   Sequential net("net");
//   net.append(std::make_unique<Linear>("net.0", 4, 8, LinearOptions{}));   // nn/layers
//   net.append(std::make_unique<Gelu>("net.1"));
//   net.append(std::make_unique<Linear>("net.2", 8, 3, LinearOptions{}));
//   ParameterTable table;
//   COLOSSAL_RETURN_IF_ERROR(net.declare(table));
//   COLOSSAL_ASSIGN_OR_RETURN(ParameterStore store, ParameterStore::create(table, Stream::cpu()));
//   COLOSSAL_RETURN_IF_ERROR(net.bind(store));
//   COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, net.forward(ctx, x));
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor dx, net.backward(ctx, *out.saved, dy));
// (the same net is gradient-checked in nn/layers/layers_test.cc, SequentialOfLayers)
#ifndef COLOSSAL_NN_MODULE_MODULE_H_
#define COLOSSAL_NN_MODULE_MODULE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "nn/module/parameter.h"

namespace colossal::nn {

// What one forward call keeps for its backward. Each module derives its own.
class Saved {
 public:
  virtual ~Saved() = default;
};

struct ForwardResult {
  core::Tensor output;
  std::unique_ptr<Saved> saved;
};

class Module {
 public:
  // Called with the module and a tensor: the input (before forward), the
  // output (after forward), grad_output (before backward) or the input
  // gradient (after backward; may be undefined).
  using Hook = std::function<absl::Status(Module& module, const core::Tensor& tensor)>;

  explicit Module(std::string name) : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The layer kind, e.g. "Linear".
  virtual const char* type() const = 0;
  // The parameter-name prefix, e.g. "transformer.h.0.mlp.c_fc".
  const std::string& name() const { return name_; }
  // Direct children, in forward order.
  const std::vector<Module*>& children() const { return children_; }

  // Adds this module's parameters and then its children's to `table`.
  absl::Status declare(ParameterTable& table);
  // Looks up this module's and its children's views in `store`.
  absl::Status bind(const ParameterStore& store);

  // Runs the forward pre-hooks, the forward, then the forward hooks.
  absl::StatusOr<ForwardResult> forward(core::Context& ctx, const core::Tensor& input);
  // Runs the backward pre-hooks, the backward, then the backward hooks.
  // `saved` must come from this module's forward. Errors annotated with the
  // module's type and name.
  absl::StatusOr<core::Tensor> backward(core::Context& ctx, Saved& saved,
                                        const core::Tensor& grad_output);

  void add_forward_pre_hook(Hook hook) { forward_pre_hooks_.push_back(std::move(hook)); }
  void add_forward_hook(Hook hook) { forward_hooks_.push_back(std::move(hook)); }
  void add_backward_pre_hook(Hook hook) { backward_pre_hooks_.push_back(std::move(hook)); }
  void add_backward_hook(Hook hook) { backward_hooks_.push_back(std::move(hook)); }

  // "Linear transformer.h.0.mlp.c_fc".
  std::string description() const;

 protected:
  virtual absl::Status declare_own(ParameterTable& table) { return absl::OkStatus(); }
  virtual absl::Status bind_own(const ParameterStore& store) { return absl::OkStatus(); }
  virtual absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx,
                                                     const core::Tensor& input) = 0;
  virtual absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                                     const core::Tensor& grad_output) = 0;
  // Records a child owned by the derived class (for declare/bind traversal).
  void register_child(Module* child) { children_.push_back(child); }

  // `saved` as the derived type T, or InvalidArgumentError when it came from
  // another kind of module.
  template <typename T>
  absl::StatusOr<T*> saved_as(Saved& saved) const {
    T* p = dynamic_cast<T*>(&saved);
    if (p == nullptr) return wrong_saved();
    return p;
  }

 private:
  absl::Status wrong_saved() const;

  std::string name_;
  std::vector<Module*> children_;
  std::vector<Hook> forward_pre_hooks_, forward_hooks_, backward_pre_hooks_, backward_hooks_;
};

// Children run one after another; backward in reverse order.
class Sequential : public Module {
 public:
  explicit Sequential(std::string name) : Module(std::move(name)) {}
  const char* type() const override { return "Sequential"; }

  // Appends a child; returns it.
  Module* append(std::unique_ptr<Module> child);
  size_t size() const { return modules_.size(); }
  Module& at(size_t i) const { return *modules_[i]; }

 protected:
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;

 private:
  std::vector<std::unique_ptr<Module>> modules_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODULE_MODULE_H_
