// The gemini plugin's optimizer step and checkpoints (see the header).
#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "kernels/adam/adam.h"
#include "nn/optim/adam.h"
#include "nn/optim/state_dict.h"
#include "parallel/gemini/gemini_plugin.h"
#include "parallel/gemini/gemini_state.h"

namespace colossal::parallel {
namespace {

// Chunk k's `shard` tensor gathered into one [numel] host tensor (every rank
// calls it: a collective when the chunk is sharded).
absl::StatusOr<core::Tensor> gather_whole(GeminiPlugin::State& s, const GeminiChunk& k,
                                          const core::Tensor& shard) {
  if (!k.sharded) return shard;
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor whole, core::Tensor::empty({k.spec.numel}, core::DType::kF32,
                                                                    core::Stream::cpu()));
  COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, s.pg->all_gather(whole, shard));
  COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), "gemini: gathering a chunk for a checkpoint"));
  return whole;
}

// Calls fn(param index, offset in the chunk, [lo, hi) in the parameter) for
// the part of each of chunk k's parameters that lies in this rank's shard.
template <typename Fn>
absl::Status for_each_shard_part(const GeminiChunk& k, const nn::ParameterTable& table, Fn fn) {
  for (size_t i = 0; i < k.spec.params.size(); ++i) {
    const int64_t off = k.spec.offsets[i];
    const int64_t numel = table.entries()[k.spec.params[i]].numel();
    const int64_t lo = std::max(off, k.shard_begin);
    const int64_t hi = std::min(off + numel, k.shard_begin + k.shard_size);
    if (lo < hi) COLOSSAL_RETURN_IF_ERROR(fn(k.spec.params[i], off, lo - off, hi - off));
  }
  return absl::OkStatus();
}

// Copies elements [lo, hi) of `src` (any shape, float32, host) into `dst` at `at`.
absl::Status copy_flat(const core::Tensor& src, int64_t lo, int64_t hi, const core::Tensor& dst,
                       int64_t at, const std::string& what) {
  if (src.dtype() != core::DType::kF32 || src.device().is_cuda() || src.numel() < hi) {
    return absl::InvalidArgumentError(absl::StrCat("gemini: ", what, " must be a float32 host tensor of ",
                                                   hi, "+ elements, got ", src.to_string()));
  }
  std::copy(src.data<float>() + lo, src.data<float>() + hi,
            const_cast<core::Tensor&>(dst).data<float>() + at);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<nn::MixedPrecisionStepResult> GeminiPlugin::step(nn::DynamicLossScaler* scaler,
                                                                 float max_norm) {
  State& s = *state_;
  if (!s.boosted) return absl::FailedPreconditionError("gemini: step before boost");
  if (scaler != nullptr) {
    return absl::UnimplementedError(
        "gemini: loss scaling is for 16-bit chunks, which the CPU path does not have; train in "
        "float32 without a scaler");
  }
  if (!std::isfinite(max_norm) || max_norm < 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemini: max_norm must be >= 0 (0: no clipping), got ", max_norm));
  }
  // Global norm: each shard once (a whole chunk's gradients are on every rank:
  // rank 0 counts them).
  double local = 0.0;
  for (const GeminiChunk& k : s.chunks) {
    if (!k.sharded && s.rank() != 0) continue;
    const float* g = k.grad_shard.data<float>();
    for (int64_t i = 0; i < k.shard_size; ++i) local += double(g[i]) * g[i];
  }
  float total = static_cast<float>(local);
  {
    COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w,
                              s.pg->all_reduce(comm::Buffer::cpu(&total, 1), comm::ReduceOp::kSum));
    COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), "gemini: gradient norm"));
  }
  nn::MixedPrecisionStepResult r;
  r.loss_scale = 1.0f;
  r.grad_norm = std::sqrt(total);
  if (!std::isfinite(r.grad_norm)) {
    r.skipped = true;
    return r;
  }
  if (max_norm > 0.0f) {  // as nn::clip_grad_by_norm: in double, eps 1e-6
    const double coef = static_cast<double>(max_norm) / (static_cast<double>(r.grad_norm) + 1e-6);
    r.clip_coef = coef < 1.0 ? static_cast<float>(coef) : 1.0f;
  }
  ++s.steps;
  const float grad_scale = r.clip_coef < 1.0f ? 1.0f / r.clip_coef : 1.0f;
  for (size_t c = 0; c < s.chunks.size(); ++c) {
    GeminiChunk& k = s.chunks[c];
    for (const GeminiPiece& p : k.pieces) {
      const kernels::adam::AdamOptions o =
          nn::kernel_adam_options(s.optimizer->group_hyper(p.group), s.steps, grad_scale);
      const kernels::KernelStatus ks = kernels::adam::adam_step_cpu(
          k.shard.data<float>() + p.offset, k.exp_avg.data<float>() + p.offset,
          k.exp_avg_sq.data<float>() + p.offset, /*model_copy=*/nullptr,
          k.grad_shard.data<float>() + p.offset, /*found_inf=*/nullptr, p.count,
          kernels::DType::kF32, kernels::DType::kF32, o);
      COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
          ks, absl::StrCat("gemini: Adam step of chunk ", c, ", group ", p.group)));
    }
  }
  if (s.options.placement_policy == "auto" && !s.auto_placed) COLOSSAL_RETURN_IF_ERROR(s.place_auto());
  return r;
}

absl::StatusOr<nn::ParameterStore> GeminiPlugin::model_state_dict(const nn::ParameterStore& store,
                                                                  int to_rank,
                                                                  const core::Stream& stream) {
  State& s = *state_;
  if (!s.materialized) return absl::FailedPreconditionError("gemini: model_state_dict before materialize");
  const nn::ParameterTable& table = s.store.table();
  const bool mine = to_rank < 0 || to_rank == s.rank();
  nn::ParameterStore out = nn::ParameterStore::declare(table);
  if (mine) COLOSSAL_RETURN_IF_ERROR(out.allocate(core::Stream::cpu()));
  for (const GeminiChunk& k : s.chunks) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor whole, gather_whole(s, k, k.shard));
    if (!mine) continue;
    for (size_t i = 0; i < k.spec.params.size(); ++i) {
      const nn::Parameter& p = out.parameters()[k.spec.params[i]];
      COLOSSAL_RETURN_IF_ERROR(copy_flat(whole, k.spec.offsets[i], k.spec.offsets[i] + p.value.numel(),
                                         p.value, 0, "a gathered chunk"));
    }
  }
  return out;
}

absl::Status GeminiPlugin::load_model_state_dict(nn::ParameterStore& store,
                                                 const nn::ParameterStore& state,
                                                 const core::Stream& stream) {
  State& s = *state_;
  if (!s.materialized) return absl::FailedPreconditionError("gemini: load before materialize");
  const nn::ParameterTable& table = s.store.table();
  // Check everything before changing anything.
  std::vector<core::Tensor> values(table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    const nn::ParameterEntry& e = table.entries()[i];
    COLOSSAL_ASSIGN_OR_RETURN(nn::Parameter p, state.find(e.name));
    if (!p.value.defined() || p.value.shape() != e.shape || p.value.dtype() != core::DType::kF32 ||
        p.value.device().is_cuda()) {
      return absl::InvalidArgumentError(absl::StrCat("gemini: parameter \"", e.name, "\" of the state is ",
                                                     p.value.to_string(), ", the model's is float32 ",
                                                     e.shape.to_string(), " (host)"));
    }
    values[i] = p.value;
  }
  for (GeminiChunk& k : s.chunks) {
    COLOSSAL_RETURN_IF_ERROR(for_each_shard_part(
        k, table, [&](size_t param, int64_t off, int64_t lo, int64_t hi) {
          return copy_flat(values[param], lo, hi, k.shard, off + lo - k.shard_begin, "a parameter");
        }));
  }
  return absl::OkStatus();
}

absl::StatusOr<nn::OptimizerStateDict> GeminiPlugin::optimizer_state_dict(
    const nn::Optimizer& optimizer, int to_rank) {
  State& s = *state_;
  if (!s.boosted || &optimizer != s.optimizer) {
    return absl::FailedPreconditionError("gemini: optimizer_state_dict of an optimizer it did not boost");
  }
  const nn::ParameterTable& table = s.store.table();
  const bool mine = to_rank < 0 || to_rank == s.rank();
  nn::OptimizerStateDict out;
  out.meta.type = optimizer.type();
  std::vector<char> in_optimizer(table.size(), 0);
  for (int g = 0; g < optimizer.num_groups(); ++g) {
    nn::GroupState gs;
    gs.hyper = optimizer.group_hyper(g);
    for (const nn::ParamRef& p : optimizer.group_params(g)) {
      gs.params.push_back(p.name);
      in_optimizer[table.find(p.name) - table.entries().data()] = 1;
    }
    out.meta.groups.push_back(std::move(gs));
  }
  for (const GeminiChunk& k : s.chunks) {
    for (const char* name : {"exp_avg", "exp_avg_sq"}) {
      COLOSSAL_ASSIGN_OR_RETURN(
          core::Tensor whole,
          gather_whole(s, k, std::string(name) == "exp_avg" ? k.exp_avg : k.exp_avg_sq));
      if (!mine) continue;
      for (size_t i = 0; i < k.spec.params.size(); ++i) {
        const nn::ParameterEntry& e = table.entries()[k.spec.params[i]];
        if (!in_optimizer[k.spec.params[i]]) continue;
        COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t,
                                  core::Tensor::empty(e.shape, core::DType::kF32, core::Stream::cpu()));
        COLOSSAL_RETURN_IF_ERROR(copy_flat(whole, k.spec.offsets[i], k.spec.offsets[i] + e.numel(), t,
                                           0, "a gathered chunk"));
        out.tensors[nn::state_key(e.name, name)] = std::move(t);
      }
    }
  }
  if (mine) {
    for (const nn::GroupState& g : out.meta.groups) {
      for (const std::string& name : g.params) {
        COLOSSAL_ASSIGN_OR_RETURN(core::Tensor step, core::Tensor::empty(core::Shape(), core::DType::kI64,
                                                                         core::Stream::cpu()));
        *step.data<int64_t>() = s.steps;
        out.tensors[nn::state_key(name, "step")] = std::move(step);
      }
    }
  }
  return out;
}

absl::Status GeminiPlugin::load_optimizer_state_dict(nn::Optimizer& optimizer,
                                                     const nn::OptimizerStateDict& state) {
  State& s = *state_;
  if (!s.boosted || &optimizer != s.optimizer) {
    return absl::FailedPreconditionError("gemini: loading into an optimizer it did not boost");
  }
  COLOSSAL_RETURN_IF_ERROR(optimizer.check_state_dict(state));
  // One step count for every parameter (the plugin steps them together).
  int64_t steps = -1;
  for (int g = 0; g < optimizer.num_groups(); ++g) {
    for (const nn::ParamRef& p : optimizer.group_params(g)) {
      const core::Tensor& t = state.tensors.at(nn::state_key(p.name, "step"));
      const int64_t v = t.device().is_cuda() ? -2 : *t.data<int64_t>();
      if (steps >= 0 && v != steps) {
        return absl::InvalidArgumentError(absl::StrCat(
            "gemini: the state's step counts differ between parameters (\"", p.name, "\": ", v,
            ", others ", steps, "); the plugin steps every parameter together"));
      }
      steps = v;
    }
  }
  const nn::ParameterTable& table = s.store.table();
  for (GeminiChunk& k : s.chunks) {
    for (const char* name : {"exp_avg", "exp_avg_sq"}) {
      core::Tensor& dst = std::string(name) == "exp_avg" ? k.exp_avg : k.exp_avg_sq;
      COLOSSAL_RETURN_IF_ERROR(for_each_shard_part(
          k, table, [&](size_t param, int64_t off, int64_t lo, int64_t hi) -> absl::Status {
            auto it = state.tensors.find(nn::state_key(table.entries()[param].name, name));
            if (it == state.tensors.end()) return absl::OkStatus();  // not an optimizer parameter
            return copy_flat(it->second, lo, hi, dst, off + lo - k.shard_begin, it->first);
          }));
    }
  }
  COLOSSAL_RETURN_IF_ERROR(optimizer.load_state_meta(state));
  s.steps = std::max<int64_t>(steps, 0);
  // An optimizer state's masters (16-bit models' state.<name>.master) are the
  // weights: float32 chunks hold them as the model's, loaded with the model.
  return absl::OkStatus();
}

}  // namespace colossal::parallel
