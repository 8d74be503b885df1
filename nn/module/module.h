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
//   * Activation checkpointing (set_checkpoint): the module's forward keeps
//     only its input in the Saved context (its own activations and its
//     children's are dropped); its backward re-runs the forward on that input
//     to rebuild them, then runs the normal backward. See "Activation
//     checkpointing" below for the hook order.
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
//   net.set_checkpoint(true);  // keep only x; backward re-runs the forward
// (nn/module/module_test.cc, NestedCheckpointingRecomputesAndKeepsGradients)
#ifndef COLOSSAL_NN_MODULE_MODULE_H_
#define COLOSSAL_NN_MODULE_MODULE_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "nn/module/parameter.h"

namespace colossal::nn {

// What a Saved context holds: the number of tensor references and the sum of
// their nbytes(), its children's included. A tensor referenced by two contexts
// (a layer's output saved as the next layer's input) counts in both, so bytes
// is an upper bound on the distinct memory held. Undefined tensors count 0.
struct SavedStats {
  int64_t tensors = 0;
  int64_t bytes = 0;
};

// What one forward call keeps for its backward. Each module derives its own.
class Saved {
 public:
  virtual ~Saved() = default;
  // The activations this context keeps (for memory accounting and tests).
  virtual SavedStats stats() const = 0;
};

// The stats of `tensors` plus those of `children` (null children skipped):
// the usual body of a Saved::stats() override.
SavedStats saved_stats(std::initializer_list<core::Tensor> tensors,
                       std::initializer_list<const Saved*> children = {});

struct ForwardResult {
  core::Tensor output;
  std::unique_ptr<Saved> saved;
};

// Activation checkpointing. With set_checkpoint(true):
//   forward:  forward pre-hooks(input) -> forward -> the Saved context is
//             replaced by one holding only `input` (stats(): 1 tensor,
//             input.nbytes()) -> forward hooks(output).
//   backward: backward pre-hooks(grad_output) -> recomputation, with
//             recomputing() true on this module and all its descendants:
//             forward pre-hooks(input) -> forward -> forward hooks(output)
//             (children's hooks fire too, as in any forward) -> the normal
//             backward on the rebuilt context -> the rebuilt context is freed
//             -> backward hooks(input gradient).
// So every hook that gathers parameters before a forward (ZeRO-3, Gemini)
// gathers them again for the recomputation; a forward hook that releases them
// should keep them while module.recomputing() (the backward right after needs
// them; the backward hook releases). The recomputation runs the same kernels in
// the same order on the same input and parameters, so the gradients are
// bit-identical to a plain backward's, provided nothing changes the parameters
// or the input tensor between forward and backward. Random ops (Dropout) replay:
// the checkpoint context also records ctx.rng_state() before the forward, and
// the recomputation runs from that state (restoring the context's current
// state after it), so it draws the same stream elements and rebuilds the same
// masks, and consumes no fresh random numbers. The backward dispatches on the context, not on the flag: a
// context from a checkpointed forward is recomputed even if the flag was turned
// off since, and a plain context is used as is. Several micro-batches may be in
// flight (each context holds its own input); calls are single-threaded.
// Nested checkpointed modules work (the inner one recomputes again).
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

  // Activation checkpointing of this module (see above). Off by default.
  void set_checkpoint(bool on) { checkpoint_ = on; }
  bool checkpoint() const { return checkpoint_; }
  // True while a checkpointed ancestor (or this module) re-runs its forward
  // inside its backward, e.g. for hooks that must not release parameters then.
  bool recomputing() const { return recomputing_ > 0; }

  // Training (true, the default) or evaluation mode of this module and all its
  // descendants (PyTorch's train()/eval()). Only modules with train/eval
  // differences read it: Dropout is the identity in evaluation mode.
  void set_training(bool on);
  bool training() const { return training_; }

 protected:
  virtual absl::Status declare_own(ParameterTable& table) { return absl::OkStatus(); }
  virtual absl::Status bind_own(const ParameterStore& store) { return absl::OkStatus(); }
  virtual absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx,
                                                     const core::Tensor& input) = 0;
  virtual absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                                     const core::Tensor& grad_output) = 0;
  // Records a child owned by the derived class (for declare/bind traversal).
  void register_child(Module* child) { children_.push_back(child); }

  // For a derived module's entry points beside forward and backward (e.g.
  // RowNorm::forward_add, which also adds a residual): forward_with runs the
  // forward pre-hooks on `hook_input`, `impl`, then the forward hooks on its
  // output, as forward() does around forward_impl; FailedPreconditionError
  // on a checkpointed module (its context would keep hook_input, which is not
  // what impl computed from: the caller takes the plain path instead).
  // backward_with is backward() with `impl` in place of backward_impl: the
  // same hooks, and a checkpointed context's forward recomputed first.
  absl::StatusOr<ForwardResult> forward_with(
      core::Context& ctx, const core::Tensor& hook_input,
      absl::FunctionRef<absl::StatusOr<ForwardResult>()> impl);
  absl::StatusOr<core::Tensor> backward_with(
      core::Context& ctx, Saved& saved, const core::Tensor& grad_output,
      absl::FunctionRef<absl::StatusOr<core::Tensor>(Saved&)> impl);

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
  // Hooks around impl; with keep_only_input the context is replaced by a
  // checkpoint context holding `input` before the forward hooks run.
  absl::StatusOr<ForwardResult> run_forward(
      core::Context& ctx, const core::Tensor& input, bool keep_only_input,
      absl::FunctionRef<absl::StatusOr<ForwardResult>()> impl);
  // Adds `delta` to recomputing_ of this module and all its descendants.
  void add_recomputing(int delta);

  std::string name_;
  std::vector<Module*> children_;
  std::vector<Hook> forward_pre_hooks_, forward_hooks_, backward_pre_hooks_, backward_hooks_;
  bool checkpoint_ = false;
  int recomputing_ = 0;  // a count: nested checkpointed modules recompute inside each other
  bool training_ = true;
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

  // Children [begin, end) alone, as forward() runs them all (this module's
  // own hooks do not run): a pipeline stage's model chunk of its blocks.
  // InvalidArgument for a range outside [0, size()].
  absl::StatusOr<ForwardResult> forward_range(core::Context& ctx, size_t begin, size_t end,
                                              const core::Tensor& input);
  // The backward of a forward_range (its saved state knows the range).
  absl::StatusOr<core::Tensor> backward_range(core::Context& ctx, Saved& saved,
                                              const core::Tensor& grad_output);

 protected:
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;

 private:
  std::vector<std::unique_ptr<Module>> modules_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODULE_MODULE_H_
