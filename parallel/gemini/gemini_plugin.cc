// The gemini plugin: chunk placement, gather / release, gradient reduction
// and the module hooks (see the header). The step and the checkpoints are in
// gemini_step.cc.
#include "parallel/gemini/gemini_plugin.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/alloc/default_allocator.h"
#include "core/ops/elementwise.h"
#include "core/status/status.h"
#include "nn/module/parameter_init.h"
#include "nn/optim/state_dict.h"
#include "parallel/common/grad_buckets.h"
#include "parallel/gemini/gemini_state.h"

namespace colossal::parallel {

namespace {

absl::Status option_range(bool ok, const char* key, const std::string& want) {
  if (ok) return absl::OkStatus();
  return core::option_error(key, absl::StrCat("must be ", want));
}

}  // namespace

absl::Status validate_gemini_options(const GeminiOptions& o) {
  const std::string& p = o.placement_policy;
  COLOSSAL_RETURN_IF_ERROR(option_range(p == "cuda" || p == "cpu" || p == "static" || p == "auto",
                                        "placement_policy",
                                        absl::StrCat("\"cuda\", \"cpu\", \"static\" or \"auto\", got \"",
                                                     p, "\"")));
  for (auto [v, key] : {std::pair{o.shard_param_frac, "shard_param_frac"},
                        std::pair{o.offload_optim_frac, "offload_optim_frac"},
                        std::pair{o.offload_param_frac, "offload_param_frac"},
                        std::pair{o.warmup_non_model_data_ratio, "warmup_non_model_data_ratio"}}) {
    COLOSSAL_RETURN_IF_ERROR(option_range(v >= 0.0 && v <= 1.0, key, "in [0, 1]"));
  }
  COLOSSAL_RETURN_IF_ERROR(option_range(o.steady_cuda_cap_ratio > 0.0 && o.steady_cuda_cap_ratio <= 1.0,
                                        "steady_cuda_cap_ratio", "in (0, 1]"));
  COLOSSAL_RETURN_IF_ERROR(option_range(
      o.offload_param_frac <= o.offload_optim_frac, "offload_param_frac",
      "<= offload_optim_frac (a chunk's values and its optimizer state move together)"));
  COLOSSAL_RETURN_IF_ERROR(option_range(o.chunks.hidden_dim >= 1, "hidden_dim", ">= 1"));
  COLOSSAL_RETURN_IF_ERROR(option_range(o.chunks.search_range_m >= 0, "search_range_m", ">= 0"));
  COLOSSAL_RETURN_IF_ERROR(option_range(o.chunks.min_chunk_size_m >= 0, "min_chunk_size_m", ">= 0"));
  COLOSSAL_RETURN_IF_ERROR(option_range(o.device_capacity_bytes >= 0, "device_capacity_bytes", ">= 0"));
  COLOSSAL_RETURN_IF_ERROR(option_range(o.gpu_host_adam_slice > 0, "gpu_host_adam_slice", "> 0"));
  return absl::OkStatus();
}

// ---- The plugin ----

GeminiPlugin::GeminiPlugin(std::shared_ptr<State> state) : state_(std::move(state)) {}
GeminiPlugin::~GeminiPlugin() = default;

absl::StatusOr<std::unique_ptr<GeminiPlugin>> GeminiPlugin::create(
    std::shared_ptr<comm::ProcessGroup> pg, const GeminiOptions& options) {
  if (pg == nullptr) return absl::InvalidArgumentError("gemini: a null process group");
  COLOSSAL_RETURN_IF_ERROR(core::annotate(validate_gemini_options(options), "gemini"));
  auto state = std::make_shared<State>();
  state->pg = std::move(pg);
  state->options = options;
  // auto gathers ahead once its placement has left room for it (place_auto):
  // the warm-up step measures the working set without.
  state->gather_window = options.placement_policy == "auto" ? 0 : options.max_prefetch;
  return std::unique_ptr<GeminiPlugin>(new GeminiPlugin(std::move(state)));
}

int GeminiPlugin::dp_rank() const { return state_->rank(); }
int GeminiPlugin::dp_size() const { return state_->world(); }
const ChunkLayout& GeminiPlugin::layout() const { return state_->layout; }
int64_t GeminiPlugin::device_bytes() const { return state_->device_used; }
int64_t GeminiPlugin::peak_device_bytes() const { return state_->device_peak; }
int64_t GeminiPlugin::gathers() const { return state_->gathers; }
int64_t GeminiPlugin::gathers_ahead() const { return state_->gathers_ahead; }
int64_t GeminiPlugin::copies_ahead() const { return state_->copies_ahead; }
int64_t GeminiPlugin::evictions() const { return state_->evictions; }
int64_t GeminiPlugin::gpu_host_updates() const { return state_->gpu_host_updates.load(); }
int64_t GeminiPlugin::gpu_value_handovers() const { return state_->value_handovers.load(); }
int64_t GeminiPlugin::device_sum_steps() const { return state_->device_sum_steps; }
int GeminiPlugin::chunks_on_device() const {
  int n = 0;
  for (const GeminiChunk& k : state_->chunks) n += k.on_device;
  return n;
}

bool GeminiPlugin::materialized(const nn::ParameterStore& store) const {
  return state_->materialized && store.table().size() == state_->store.table().size();
}

absl::Status GeminiPlugin::materialize(nn::ParameterStore& store, uint64_t seed,
                                       const core::Stream& stream) {
  State& s = *state_;
  if (s.materialized || store.materialized()) {
    return absl::FailedPreconditionError("gemini: the parameters have memory already");
  }
  const nn::ParameterTable& table = store.table();
  if (table.dtypes().size() > 1) {
    return absl::UnimplementedError("gemini: the model's parameters have several dtypes");
  }
  s.stream = stream;
  s.cuda = stream.is_cuda();
  s.dtype = table.dtypes().empty() ? core::DType::kF32 : table.dtypes()[0];
  if (!s.cuda && s.sixteen_bit()) {
    return absl::UnimplementedError(absl::StrCat(
        "gemini: the CPU path trains float32 parameters, the model's are ", core::dtype_name(s.dtype)));
  }
  const GeminiOptions& o = s.options;
  ChunkSearchOptions search = o.chunks;
  search.world = o.enable_distributed_storage ? s.world() : 1;
  COLOSSAL_ASSIGN_OR_RETURN(s.layout, plan_chunks(table, table_order(table), search));
  if (o.device_capacity_bytes > 0) {
    s.capacity = o.device_capacity_bytes;
  } else {
    COLOSSAL_ASSIGN_OR_RETURN(uint64_t cap, core::memory_capacity(stream.device()));
    s.capacity = static_cast<int64_t>(std::min<uint64_t>(cap, std::numeric_limits<int64_t>::max()));
  }
  const int n = static_cast<int>(s.layout.chunks.size());
  const int sharded_chunks = static_cast<int>(std::lround(o.shard_param_frac * n));
  const int host_chunks = static_cast<int>(std::lround(o.offload_optim_frac * n));
  s.store = store;
  s.chunks.clear();
  s.chunks.resize(n);
  for (int c = 0; c < n; ++c) {
    GeminiChunk& k = s.chunks[c];
    k.spec = s.layout.chunks[c];
    k.sharded = s.world() > 1 && o.enable_distributed_storage && !k.spec.keep_whole &&
                c < sharded_chunks;
    k.shard_size = k.sharded ? k.spec.numel / s.world() : k.spec.numel;
    k.shard_begin = k.sharded ? static_cast<int64_t>(s.rank()) * k.shard_size : 0;
    const std::string& p = o.placement_policy;
    k.on_device = p == "cuda" || (p == "static" && c < n - host_chunks);
  }
  if (o.placement_policy == "auto") COLOSSAL_RETURN_IF_ERROR(s.place_warmup());
  for (int c = 0; c < n; ++c) {
    GeminiChunk& k = s.chunks[c];
    if (k.on_device) {
      COLOSSAL_RETURN_IF_ERROR(s.reserve(s.shard_bytes(k), c, absl::StrCat("the shards of chunk ", c)));
    }
    COLOSSAL_ASSIGN_OR_RETURN(k.value, s.zeros(k.shard_size, s.dtype, k.on_device));
    k.master = k.value;
    if (s.sixteen_bit()) {
      COLOSSAL_ASSIGN_OR_RETURN(k.master, s.zeros(k.shard_size, s.master_dtype(), k.on_device));
    }
    COLOSSAL_ASSIGN_OR_RETURN(k.exp_avg, s.zeros(k.shard_size, core::DType::kF32, k.on_device));
    COLOSSAL_ASSIGN_OR_RETURN(k.exp_avg_sq, s.zeros(k.shard_size, core::DType::kF32, k.on_device));
    COLOSSAL_ASSIGN_OR_RETURN(k.grad, s.zeros(k.shard_size, s.dtype, k.on_device));
    // Initial values of the parameters' parts in this shard, by element index:
    // the float32 draws into the master, whose rounding is the value (split
    // masters: drawn into a float32 buffer of the shard's size first, pageable
    // on the host; on the device not counted: the chunk's own gradients,
    // counted, are not in use yet).
    const core::Stream& at = k.on_device ? stream : core::Stream::cpu();
    core::Tensor draws = k.master;
    if (s.split_master()) {
      COLOSSAL_ASSIGN_OR_RETURN(draws, core::Tensor::empty({k.shard_size}, core::DType::kF32, at));
      COLOSSAL_RETURN_IF_ERROR(draws.set_zero(at));  // the chunk's padding
    }
    COLOSSAL_RETURN_IF_ERROR(for_each_shard_part(
        k, table, [&](size_t param, int64_t off, int64_t lo, int64_t hi) -> absl::Status {
          nn::ParameterEntry wide = table.entries()[param];
          wide.dtype = core::DType::kF32;
          const int64_t at_shard = off + lo - k.shard_begin;
          COLOSSAL_ASSIGN_OR_RETURN(core::Tensor part, draws.slice(at_shard, at_shard + hi - lo));
          return nn::init_parameter(wide, part, seed, lo, at);
        }));
    if (s.split_master()) {
      COLOSSAL_RETURN_IF_ERROR(split_into(k.value, k.master, draws, at));
      if (k.on_device) stream.synchronize();  // draws is freed next
    } else if (s.sixteen_bit()) {
      COLOSSAL_RETURN_IF_ERROR(core::ops::cast(at, k.value, k.master));
    }
  }
  if (s.cuda) stream.synchronize();  // host shards are read by the host next
  std::weak_ptr<State> weak = state_;
  store.set_fetcher([weak](size_t index, bool want_grad) -> absl::Status {
    std::shared_ptr<State> st = weak.lock();
    if (st == nullptr) return absl::OkStatus();
    const int c = st->layout.chunk_of[index];
    const std::string& name = st->store.table().entries()[index].name;
    // Not gathered, or gathered ahead and not waited for: an access (as the
    // recorded pass saw, where nothing was gathered ahead).
    const GeminiChunk& k = st->chunks[c];
    if (!k.full.defined() || k.gathering != nullptr) COLOSSAL_RETURN_IF_ERROR(st->access(c, name));
    if (want_grad) COLOSSAL_RETURN_IF_ERROR(st->ensure_grad(c, name));
    return absl::OkStatus();
  });
  s.materialized = true;
  return absl::OkStatus();
}

absl::Status GeminiPlugin::boost(nn::Module& model, const nn::ParameterStore& store,
                                 nn::Optimizer& optimizer) {
  State& s = *state_;
  if (s.boosted) return absl::FailedPreconditionError("gemini: boost called twice");
  if (!nn::is_adam_type(optimizer.type())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gemini: the optimizer must be Adam-family (adamw, cpu_adam, hybrid_adam), got ",
        optimizer.type()));
  }
  const nn::ParameterTable& table = s.store.table();
  std::vector<int> group_of(table.size(), -1);
  for (int g = 0; g < optimizer.num_groups(); ++g) {
    for (const nn::ParamRef& p : optimizer.group_params(g)) {
      const nn::ParameterEntry* e = table.find(p.name);
      if (e == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "gemini: optimizer parameter \"", p.name, "\" is not in the model's table"));
      }
      group_of[e - table.entries().data()] = g;
    }
  }
  for (GeminiChunk& k : s.chunks) {
    k.pieces.clear();
    COLOSSAL_RETURN_IF_ERROR(for_each_shard_part(
        k, table, [&](size_t param, int64_t off, int64_t lo, int64_t hi) {
          if (group_of[param] >= 0) k.pieces.push_back({off + lo - k.shard_begin, hi - lo, group_of[param]});
          return absl::OkStatus();
        }));
  }
  COLOSSAL_ASSIGN_OR_RETURN(auto owned, module_owned_parameters(model, table));
  std::weak_ptr<State> weak = state_;
  for (auto& [module, params] : owned) {
    auto chunks = std::make_shared<std::vector<int>>(s.chunks_of(params));
    // The first of the module's parameters in each chunk, for messages.
    auto first = std::make_shared<std::vector<std::string>>();
    for (int c : *chunks) {
      for (int p : params) {
        if (s.layout.chunk_of[p] == c) {
          first->push_back(table.entries()[p].name);
          break;
        }
      }
    }
    auto own = std::make_shared<std::vector<int>>(params);
    auto pre = [weak, chunks, first](bool backward) {
      return [weak, chunks, first, backward](nn::Module&, const core::Tensor&) -> absl::Status {
        std::shared_ptr<State> st = weak.lock();
        if (st == nullptr) return absl::OkStatus();
        for (size_t i = 0; i < chunks->size(); ++i) {
          const int c = (*chunks)[i];
          COLOSSAL_RETURN_IF_ERROR(st->access(c, (*first)[i]));
          if (backward) COLOSSAL_RETURN_IF_ERROR(st->ensure_grad(c, (*first)[i]));
          ++st->chunks[c].compute;
        }
        return absl::OkStatus();
      };
    };
    module->add_forward_pre_hook(pre(false));
    module->add_backward_pre_hook(pre(true));
    module->add_forward_hook([weak, chunks](nn::Module& m, const core::Tensor&) -> absl::Status {
      std::shared_ptr<State> st = weak.lock();
      if (st == nullptr) return absl::OkStatus();
      for (int c : *chunks) {
        --st->chunks[c].compute;
        // A recomputation's chunks stay for the backward right after.
        if (!m.recomputing() && !st->next_use_is(c)) COLOSSAL_RETURN_IF_ERROR(st->release(c));
      }
      return absl::OkStatus();
    });
    module->add_backward_hook([weak, chunks, own](nn::Module&, const core::Tensor&) -> absl::Status {
      std::shared_ptr<State> st = weak.lock();
      if (st == nullptr) return absl::OkStatus();
      for (int c : *chunks) --st->chunks[c].compute;
      for (int p : *own) ++st->chunks[st->layout.chunk_of[p]].final_params;
      for (int c : *chunks) {
        GeminiChunk& k = st->chunks[c];
        if (!k.reduced && k.final_params >= static_cast<int>(k.spec.params.size())) {
          COLOSSAL_RETURN_IF_ERROR(st->reduce(c));
        }
        if (!st->next_use_is(c)) COLOSSAL_RETURN_IF_ERROR(st->release(c));
      }
      return absl::OkStatus();
    });
  }
  s.optimizer = &optimizer;
  s.boosted = true;
  return absl::OkStatus();
}

absl::Status GeminiPlugin::begin_forward(core::Context& ctx) {
  State& s = *state_;
  if (!s.materialized) return absl::FailedPreconditionError("gemini: forward before materialize");
  s.in_backward = false;
  s.cursor = 0;
  return absl::OkStatus();
}

absl::Status GeminiPlugin::end_forward(bool ok) {
  State& s = *state_;
  absl::Status status;
  for (size_t c = 0; c < s.chunks.size(); ++c) {
    s.chunks[c].compute = 0;
    status.Update(s.release(static_cast<int>(c)));
  }
  s.drop_prefetches();
  absl::Status ended = s.end_pass(ok && status.ok());
  return status.ok() ? ended : status;
}

absl::Status GeminiPlugin::begin_backward(core::Context& ctx, bool sync) {
  State& s = *state_;
  if (!s.boosted) return absl::FailedPreconditionError("gemini: backward before boost");
  // no_sync changes nothing (see the header): every backward is reduced.
  s.in_backward = true;
  s.cursor = 0;
  ++s.backwards;
  s.sample_device_peak();  // the activations are at their peak about now
  for (GeminiChunk& k : s.chunks) {
    k.final_params = 0;
    k.reduced = false;
  }
  return absl::OkStatus();
}

absl::Status GeminiPlugin::end_backward(bool ok) {
  State& s = *state_;
  absl::Status status;
  if (ok) {
    // Chunks the hooks did not finish (unused parameters) reduce now, in chunk
    // order on every rank.
    for (size_t c = 0; c < s.chunks.size() && status.ok(); ++c) {
      if (!s.chunks[c].reduced) status = s.reduce(static_cast<int>(c));
    }
  }
  // The reductions still in flight finish (after a failure too: their
  // collectives use the buffers).
  status.Update(s.settle_reductions());
  for (size_t c = 0; c < s.chunks.size(); ++c) {
    GeminiChunk& k = s.chunks[c];
    k.compute = 0;
    if (k.full_grad.defined()) {  // a failed backward: drop its gradients
      if (!s.grads_in_place(k)) s.release_bytes(k.spec.numel * s.esize());
      k.full_grad = core::Tensor();
    }
    status.Update(s.release(static_cast<int>(c)));
  }
  s.drop_prefetches();
  absl::Status ended = s.end_pass(ok && status.ok());
  s.in_backward = false;
  return status.ok() ? ended : status;
}

absl::Status GeminiPlugin::before_step(const core::Stream& stream) { return absl::OkStatus(); }

absl::Status GeminiPlugin::zero_grad() {
  // Nothing is written: the next reduction overwrites a gradient shard marked
  // grad_zero (the step zeroes those no backward reached). So zero_grad right
  // after a step does not wait for the host updates still reading gradients,
  // nor for a fold of a part reduced but never stepped (the next reduction
  // of its chunk waits for it before overwriting the shard).
  State& s = *state_;
  for (size_t c = 0; c < s.chunks.size(); ++c) {
    GeminiChunk& k = s.chunks[c];
    k.grad_zero = true;
    k.norm_on_device = false;
    k.norm_from_fold = false;
    k.sum_pending = false;
    k.sum_current = false;
  }
  return s.choose_sum_on_device();
}

}  // namespace colossal::parallel
