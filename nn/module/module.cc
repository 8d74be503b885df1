#include "nn/module/module.h"

#include <functional>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "core/trace/trace.h"

namespace colossal::nn {
namespace {

absl::Status run_hooks(const std::vector<Module::Hook>& hooks, Module& module,
                       const core::Tensor& tensor, const char* when) {
  for (const Module::Hook& hook : hooks) {
    COLOSSAL_RETURN_IF_ERROR(core::annotate(hook(module, tensor), when));
  }
  return absl::OkStatus();
}

// Saved activations of a Sequential: one per child.
class SequentialSaved : public Saved {
 public:
  SavedStats stats() const override {
    SavedStats s;
    for (const auto& c : children) {
      if (c == nullptr) continue;
      const SavedStats cs = c->stats();
      s.tensors += cs.tensors;
      s.bytes += cs.bytes;
    }
    return s;
  }
  std::vector<std::unique_ptr<Saved>> children;
  size_t begin = 0;  // the first child's index (forward_range)
};

// The context of a checkpointed module's forward: only its input, and the
// RNG state the forward started from (replayed by the recomputation).
class CheckpointSaved : public Saved {
 public:
  CheckpointSaved(core::Tensor in, core::RngState state) : input(std::move(in)), rng(state) {}
  SavedStats stats() const override { return saved_stats({input}); }
  core::Tensor input;
  core::RngState rng;
};

// Marks a subtree as recomputing for the lifetime of the guard.
class RecomputeGuard {
 public:
  explicit RecomputeGuard(std::function<void(int)> add) : add_(std::move(add)) { add_(1); }
  ~RecomputeGuard() { add_(-1); }
  RecomputeGuard(const RecomputeGuard&) = delete;
  RecomputeGuard& operator=(const RecomputeGuard&) = delete;

 private:
  std::function<void(int)> add_;
};

}  // namespace

SavedStats saved_stats(std::initializer_list<core::Tensor> tensors,
                       std::initializer_list<const Saved*> children) {
  SavedStats s;
  for (const core::Tensor& t : tensors) {
    if (!t.defined()) continue;
    s.tensors += 1;
    s.bytes += static_cast<int64_t>(t.nbytes());
  }
  for (const Saved* c : children) {
    if (c == nullptr) continue;
    const SavedStats cs = c->stats();
    s.tensors += cs.tensors;
    s.bytes += cs.bytes;
  }
  return s;
}

void Module::set_training(bool on) {
  training_ = on;
  for (Module* child : children_) child->set_training(on);
}

std::string Module::description() const { return absl::StrCat(type(), " ", name_); }

absl::Status Module::declare(ParameterTable& table) {
  COLOSSAL_RETURN_IF_ERROR(core::annotate(declare_own(table), description()));
  for (Module* child : children_) COLOSSAL_RETURN_IF_ERROR(child->declare(table));
  return absl::OkStatus();
}

absl::Status Module::bind(const ParameterStore& store) {
  COLOSSAL_RETURN_IF_ERROR(core::annotate(bind_own(store), description()));
  for (Module* child : children_) COLOSSAL_RETURN_IF_ERROR(child->bind(store));
  return absl::OkStatus();
}

absl::StatusOr<ForwardResult> Module::run_forward(
    core::Context& ctx, const core::Tensor& input, bool keep_only_input,
    absl::FunctionRef<absl::StatusOr<ForwardResult>()> impl) {
  std::optional<core::trace::Span> span;  // (the hooks' waits count as the module's)
  if (core::trace::enabled()) {
    span.emplace("module", absl::StrCat("forward ", name_), &ctx.compute_stream());
  }
  const core::RngState rng_before = keep_only_input ? ctx.rng_state() : core::RngState{};
  COLOSSAL_RETURN_IF_ERROR(run_hooks(forward_pre_hooks_, *this, input, "forward pre-hook"));
  absl::StatusOr<ForwardResult> result = impl();
  if (!result.ok()) return core::annotate(result.status(), description());
  if (keep_only_input) result->saved = std::make_unique<CheckpointSaved>(input, rng_before);
  COLOSSAL_RETURN_IF_ERROR(run_hooks(forward_hooks_, *this, result->output, "forward hook"));
  return result;
}

absl::StatusOr<ForwardResult> Module::forward(core::Context& ctx, const core::Tensor& input) {
  return run_forward(ctx, input, checkpoint_, [&] { return forward_impl(ctx, input); });
}

absl::StatusOr<ForwardResult> Module::forward_with(
    core::Context& ctx, const core::Tensor& hook_input,
    absl::FunctionRef<absl::StatusOr<ForwardResult>()> impl) {
  if (checkpoint_) {
    return absl::FailedPreconditionError(
        absl::StrCat(description(), ": forward_with on a checkpointed module"));
  }
  return run_forward(ctx, hook_input, /*keep_only_input=*/false, impl);
}

void Module::add_recomputing(int delta) {
  recomputing_ += delta;
  for (Module* child : children_) child->add_recomputing(delta);
}

absl::StatusOr<core::Tensor> Module::backward(core::Context& ctx, Saved& saved,
                                              const core::Tensor& grad_output) {
  return backward_with(ctx, saved, grad_output,
                       [&](Saved& use) { return backward_impl(ctx, use, grad_output); });
}

absl::StatusOr<core::Tensor> Module::backward_with(
    core::Context& ctx, Saved& saved, const core::Tensor& grad_output,
    absl::FunctionRef<absl::StatusOr<core::Tensor>(Saved&)> impl) {
  std::optional<core::trace::Span> span;
  if (core::trace::enabled()) {
    span.emplace("module", absl::StrCat("backward ", name_), &ctx.compute_stream());
  }
  COLOSSAL_RETURN_IF_ERROR(
      run_hooks(backward_pre_hooks_, *this, grad_output, "backward pre-hook"));
  Saved* use = &saved;
  std::unique_ptr<Saved> rebuilt;
  if (auto* checkpoint = dynamic_cast<CheckpointSaved*>(&saved)) {
    absl::StatusOr<ForwardResult> again;
    {
      RecomputeGuard guard([this](int d) { add_recomputing(d); });
      // Replay the forward's random numbers (dropout masks), then give the
      // context back the state it had: the recomputation draws nothing new.
      const core::RngState current = ctx.rng_state();
      ctx.set_rng_state(checkpoint->rng);
      again = run_forward(ctx, checkpoint->input, /*keep_only_input=*/false,
                          [&] { return forward_impl(ctx, checkpoint->input); });
      ctx.set_rng_state(current);
    }
    if (!again.ok()) {
      return core::annotate(again.status(), "recomputing the forward (activation checkpointing)");
    }
    rebuilt = std::move(again->saved);
    use = rebuilt.get();
  }
  absl::StatusOr<core::Tensor> result = impl(*use);
  rebuilt.reset();
  if (!result.ok()) return core::annotate(result.status(), description());
  COLOSSAL_RETURN_IF_ERROR(run_hooks(backward_hooks_, *this, *result, "backward hook"));
  return result;
}

absl::Status Module::wrong_saved() const {
  return absl::InvalidArgumentError(
      "backward was given the saved activations of another kind of module");
}

Module* Sequential::append(std::unique_ptr<Module> child) {
  Module* raw = child.get();
  modules_.push_back(std::move(child));
  register_child(raw);
  return raw;
}

absl::StatusOr<ForwardResult> Sequential::forward_impl(core::Context& ctx,
                                                       const core::Tensor& input) {
  return forward_range(ctx, 0, modules_.size(), input);
}

absl::StatusOr<core::Tensor> Sequential::backward_impl(core::Context& ctx, Saved& saved,
                                                       const core::Tensor& grad_output) {
  COLOSSAL_ASSIGN_OR_RETURN(SequentialSaved * s, saved_as<SequentialSaved>(saved));
  if (s->begin != 0 || s->children.size() != modules_.size()) {
    return absl::InvalidArgumentError("saved activations are from a Sequential of another size");
  }
  return backward_range(ctx, saved, grad_output);
}

absl::StatusOr<ForwardResult> Sequential::forward_range(core::Context& ctx, size_t begin,
                                                        size_t end, const core::Tensor& input) {
  if (begin > end || end > modules_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("children [", begin, ", ", end, ") of ",
                                                   description(), ", which has ",
                                                   modules_.size()));
  }
  auto saved = std::make_unique<SequentialSaved>();
  saved->begin = begin;
  core::Tensor x = input;
  for (size_t i = begin; i < end; ++i) {
    absl::StatusOr<ForwardResult> r = modules_[i]->forward(ctx, x);
    if (!r.ok()) {
      return core::annotate(r.status(), absl::StrCat("child ", i, " (", modules_[i]->type(), ")"));
    }
    x = r->output;
    saved->children.push_back(std::move(r->saved));
  }
  return ForwardResult{x, std::move(saved)};
}

absl::StatusOr<core::Tensor> Sequential::backward_range(core::Context& ctx, Saved& saved,
                                                        const core::Tensor& grad_output) {
  COLOSSAL_ASSIGN_OR_RETURN(SequentialSaved * s, saved_as<SequentialSaved>(saved));
  if (s->begin + s->children.size() > modules_.size()) {
    return absl::InvalidArgumentError("saved activations are from a Sequential of another size");
  }
  core::Tensor g = grad_output;
  for (size_t k = s->children.size(); k-- > 0;) {
    const size_t i = s->begin + k;
    absl::StatusOr<core::Tensor> r = modules_[i]->backward(ctx, *s->children[k], g);
    if (!r.ok()) {
      return core::annotate(r.status(), absl::StrCat("child ", i, " (", modules_[i]->type(), ")"));
    }
    g = *r;
  }
  return g;
}

}  // namespace colossal::nn
