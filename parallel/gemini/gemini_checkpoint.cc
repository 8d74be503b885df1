// The gemini plugin's checkpoints (see the header): the chunks gathered into
// one process's layout and nn::Adam's state_dict, and their load at any world
// size, each rank keeping its shards.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/elementwise.h"
#include "core/status/status.h"
#include "nn/optim/state_dict.h"
#include "parallel/gemini/gemini_plugin.h"
#include "parallel/gemini/gemini_state.h"

namespace colossal::parallel {
namespace {

// Elements [lo, hi) of `t` (any shape), as a 1-D view.
absl::StatusOr<core::Tensor> flat_range(const core::Tensor& t, int64_t lo, int64_t hi) {
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor flat, t.reshape({t.numel()}));
  return flat.slice(lo, hi);
}

// The dict tensor `key` checked to hold `numel` elements of `dtype`.
absl::StatusOr<core::Tensor> dict_tensor(const nn::OptimizerStateDict& state, const std::string& key,
                                         core::DType dtype, int64_t numel) {
  auto it = state.tensors.find(key);
  if (it == state.tensors.end()) return core::Tensor();
  if (it->second.dtype() != dtype || it->second.numel() != numel) {
    return absl::InvalidArgumentError(absl::StrCat("gemini: \"", key, "\" is ", it->second.to_string(),
                                                   ", wanted ", numel, " ", core::dtype_name(dtype)));
  }
  return it->second;
}

}  // namespace

absl::Status GeminiPlugin::stream_model_state(const nn::ParameterStore& store, int to_rank,
                                             const nn::StatePieceFn& piece) {
  State& s = *state_;
  if (!s.materialized) return absl::FailedPreconditionError("gemini: model state before materialize");
  COLOSSAL_RETURN_IF_ERROR(s.settle());  // the last step's host updates
  const nn::ParameterTable& table = s.store.table();
  const bool mine = to_rank < 0 || to_rank == s.rank();
  for (const GeminiChunk& k : s.chunks) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor whole, s.gather_whole(k, k.value));
    if (!mine) continue;
    for (size_t i = 0; i < k.spec.params.size(); ++i) {
      const int64_t numel = table.entries()[k.spec.params[i]].numel();
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor src, whole.slice(k.spec.offsets[i], k.spec.offsets[i] + numel));
      piece(k.spec.params[i], 0, src);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<nn::ParameterStore> GeminiPlugin::model_state_dict(const nn::ParameterStore& store,
                                                                  int to_rank,
                                                                  const core::Stream& stream) {
  State& s = *state_;
  if (!s.materialized) return absl::FailedPreconditionError("gemini: model_state_dict before materialize");
  return collected_model_state(s.store.table(), to_rank < 0 || to_rank == s.rank(),
                               [&](const nn::StatePieceFn& piece) { return stream_model_state(store, to_rank, piece); });
}

absl::Status GeminiPlugin::load_model_state_dict(nn::ParameterStore& store,
                                                 const nn::ParameterStore& state,
                                                 const core::Stream& stream) {
  State& s = *state_;
  if (!s.materialized) return absl::FailedPreconditionError("gemini: load before materialize");
  COLOSSAL_RETURN_IF_ERROR(s.settle());  // no host update may write over the loaded values
  const nn::ParameterTable& table = s.store.table();
  // Check everything before changing anything.
  std::vector<core::Tensor> values(table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    const nn::ParameterEntry& e = table.entries()[i];
    COLOSSAL_ASSIGN_OR_RETURN(nn::Parameter p, state.find(e.name));
    if (!p.value.defined() || p.value.shape() != e.shape || p.value.dtype() != s.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gemini: parameter \"", e.name, "\" of the state is ", p.value.to_string(), ", the model's is ",
          core::dtype_name(s.dtype), " ", e.shape.to_string()));
    }
    values[i] = p.value;
  }
  for (GeminiChunk& k : s.chunks) {
    const core::Stream& at = k.on_device ? s.stream : core::Stream::cpu();
    COLOSSAL_RETURN_IF_ERROR(for_each_shard_part(
        k, table, [&](size_t param, int64_t off, int64_t lo, int64_t hi) -> absl::Status {
          COLOSSAL_ASSIGN_OR_RETURN(core::Tensor src, flat_range(values[param], lo, hi));
          const int64_t at_shard = off + lo - k.shard_begin;
          COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dst, k.value.slice(at_shard, at_shard + hi - lo));
          COLOSSAL_RETURN_IF_ERROR(dst.copy_from(src, s.stream));
          if (!s.sixteen_bit()) return absl::OkStatus();
          // The float32 masters become the loaded weights, widened exactly
          // (split masters: low halves of zero).
          COLOSSAL_ASSIGN_OR_RETURN(core::Tensor master, k.master.slice(at_shard, at_shard + hi - lo));
          if (s.split_master()) return master.set_zero(at);
          return core::ops::cast(at, master, dst);
        }));
  }
  if (s.cuda) s.stream.synchronize();
  return absl::OkStatus();
}

absl::StatusOr<nn::StreamedOptimizerState> GeminiPlugin::stream_optimizer_state(
    const nn::Optimizer& optimizer, int to_rank) {
  State& s = *state_;
  if (!s.boosted || &optimizer != s.optimizer) {
    return absl::FailedPreconditionError("gemini: the optimizer state of an optimizer it did not boost");
  }
  const nn::ParameterTable& table = s.store.table();
  const bool mine = to_rank < 0 || to_rank == s.rank();
  nn::StreamedOptimizerState out;
  out.held.meta.type = optimizer.type();
  // Per optimizer parameter (table index), its tensors' indices in `streamed`.
  const bool masters = s.sixteen_bit();  // as nn::Adam's for a model copy
  const std::vector<const char*> parts =
      masters ? std::vector<const char*>{"exp_avg", "exp_avg_sq", "master"} : std::vector<const char*>{"exp_avg", "exp_avg_sq"};
  auto index_of = std::make_shared<std::vector<int64_t>>(table.size(), -1);
  for (int g = 0; g < optimizer.num_groups(); ++g) {
    nn::GroupState gs;
    gs.hyper = optimizer.group_hyper(g);
    for (const nn::ParamRef& p : optimizer.group_params(g)) gs.params.push_back(p.name);
    out.held.meta.groups.push_back(std::move(gs));
  }
  // Table order, so the file follows the chunks' parameters.
  for (const nn::GroupState& g : out.held.meta.groups) {
    for (const std::string& name : g.params) {
      const nn::ParameterEntry* e = table.find(name);
      (*index_of)[e - table.entries().data()] = 0;
    }
  }
  for (size_t i = 0; i < table.size(); ++i) {
    if ((*index_of)[i] < 0) continue;
    const nn::ParameterEntry& e = table.entries()[i];
    (*index_of)[i] = static_cast<int64_t>(out.streamed.size());
    for (const char* part : parts) out.streamed.push_back({nn::state_key(e.name, part), core::DType::kF32, e.shape});
  }
  if (mine) {
    for (const nn::GroupState& g : out.held.meta.groups) {
      for (const std::string& name : g.params) {
        COLOSSAL_ASSIGN_OR_RETURN(core::Tensor step, core::Tensor::empty(core::Shape(), core::DType::kI64,
                                                                         core::Stream::cpu()));
        *step.data<int64_t>() = s.steps;
        out.held.tensors[nn::state_key(name, "step")] = std::move(step);
      }
    }
  }
  out.write = [this, index_of, mine, masters](const nn::StatePieceFn& piece) -> absl::Status {
    State& s = *state_;
    COLOSSAL_RETURN_IF_ERROR(s.settle());
    const nn::ParameterTable& table = s.store.table();
    for (const GeminiChunk& k : s.chunks) {
      const std::vector<std::pair<int, const core::Tensor*>> parts = {{0, &k.exp_avg}, {1, &k.exp_avg_sq}, {2, &k.master}};
      for (const auto& [part, tensor] : parts) {
        if (part == 2 && !masters) continue;
        COLOSSAL_ASSIGN_OR_RETURN(core::Tensor whole, s.gather_whole(k, *tensor));
        if (s.split_master() && part == 2) {  // the halves joined: float32 masters
          COLOSSAL_ASSIGN_OR_RETURN(core::Tensor high, s.gather_whole(k, k.value));
          if (!mine) continue;
          COLOSSAL_ASSIGN_OR_RETURN(core::Tensor joined,
                                    core::Tensor::empty({whole.numel()}, core::DType::kF32, core::Stream::cpu()));
          COLOSSAL_RETURN_IF_ERROR(join_into(joined, high, whole, core::Stream::cpu()));
          whole = std::move(joined);
        }
        if (!mine) continue;
        for (size_t i = 0; i < k.spec.params.size(); ++i) {
          const int64_t at = (*index_of)[k.spec.params[i]];
          if (at < 0) continue;  // not an optimizer parameter
          const int64_t numel = table.entries()[k.spec.params[i]].numel();
          COLOSSAL_ASSIGN_OR_RETURN(core::Tensor src, whole.slice(k.spec.offsets[i], k.spec.offsets[i] + numel));
          piece(static_cast<size_t>(at + part), 0, src);
        }
      }
    }
    return absl::OkStatus();
  };
  return out;
}

absl::StatusOr<nn::OptimizerStateDict> GeminiPlugin::optimizer_state_dict(
    const nn::Optimizer& optimizer, int to_rank) {
  COLOSSAL_ASSIGN_OR_RETURN(nn::StreamedOptimizerState streamed, stream_optimizer_state(optimizer, to_rank));
  return nn::collect_streamed(std::move(streamed), to_rank < 0 || to_rank == state_->rank());
}

absl::Status GeminiPlugin::load_optimizer_state_dict(nn::Optimizer& optimizer,
                                                     const nn::OptimizerStateDict& state) {
  State& s = *state_;
  if (!s.boosted || &optimizer != s.optimizer) {
    return absl::FailedPreconditionError("gemini: loading into an optimizer it did not boost");
  }
  COLOSSAL_RETURN_IF_ERROR(s.settle());
  COLOSSAL_RETURN_IF_ERROR(optimizer.check_state_dict(state));
  // One step count for every parameter (the plugin steps them together).
  int64_t steps = -1;
  for (int g = 0; g < optimizer.num_groups(); ++g) {
    for (const nn::ParamRef& p : optimizer.group_params(g)) {
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t,
                                state.tensors.at(nn::state_key(p.name, "step")).to(core::Device::cpu(),
                                                                                  core::Stream::cpu()));
      const int64_t v = *t.data<int64_t>();
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
    for (const char* name : {"exp_avg", "exp_avg_sq", "master"}) {
      core::Tensor& dst = std::string(name) == "exp_avg"      ? k.exp_avg
                          : std::string(name) == "exp_avg_sq" ? k.exp_avg_sq
                                                              : k.master;
      const bool master = std::string(name) == "master";
      if (master && !s.sixteen_bit()) continue;  // float32: the weights are the masters
      COLOSSAL_RETURN_IF_ERROR(for_each_shard_part(
          k, table, [&](size_t param, int64_t off, int64_t lo, int64_t hi) -> absl::Status {
            const nn::ParameterEntry& e = table.entries()[param];
            COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t, dict_tensor(state, nn::state_key(e.name, name),
                                                                  core::DType::kF32, e.numel()));
            if (!t.defined()) return absl::OkStatus();  // not an optimizer parameter; no master saved
            COLOSSAL_ASSIGN_OR_RETURN(core::Tensor src, flat_range(t, lo, hi));
            const int64_t at = off + lo - k.shard_begin;
            COLOSSAL_ASSIGN_OR_RETURN(core::Tensor d, dst.slice(at, at + hi - lo));
            COLOSSAL_ASSIGN_OR_RETURN(core::Tensor value, k.value.slice(at, at + hi - lo));
            if (master && s.split_master()) {  // split on the host, then copied in
              if (!src.device().is_cpu()) {  // a dict tensor on the device comes over first
                COLOSSAL_ASSIGN_OR_RETURN(src, src.to(core::Device::cpu(), s.stream));
                s.stream.synchronize();
              }
              COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h, core::Tensor::empty({hi - lo}, s.dtype, core::Stream::cpu()));
              COLOSSAL_ASSIGN_OR_RETURN(core::Tensor l, core::Tensor::empty({hi - lo}, core::DType::kU16,
                                                                          core::Stream::cpu()));
              COLOSSAL_RETURN_IF_ERROR(split_into(h, l, src, core::Stream::cpu()));
              COLOSSAL_RETURN_IF_ERROR(value.copy_from(h, s.stream));
              COLOSSAL_RETURN_IF_ERROR(d.copy_from(l, s.stream));
              if (s.cuda) s.stream.synchronize();  // h and l go at the end of this scope
              return absl::OkStatus();
            }
            COLOSSAL_RETURN_IF_ERROR(d.copy_from(src, s.stream));
            if (!master) return absl::OkStatus();
            // The 16-bit values follow the loaded master (its rounding).
            return core::ops::cast(k.on_device ? s.stream : core::Stream::cpu(), value, d);
          }));
    }
  }
  if (s.cuda) s.stream.synchronize();
  COLOSSAL_RETURN_IF_ERROR(optimizer.load_state_meta(state));
  s.steps = std::max<int64_t>(steps, 0);
  return absl::OkStatus();
}

}  // namespace colossal::parallel
