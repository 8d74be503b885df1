// The gemini plugin: chunk placement, gather / release, gradient reduction
// and the module hooks (see the header). The step and the checkpoints are in
// gemini_step.cc.
#include "parallel/gemini/gemini_plugin.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/alloc/allocator.h"
#include "core/alloc/default_allocator.h"
#include "core/status/status.h"
#include "nn/module/parameter_init.h"
#include "nn/optim/state_dict.h"
#include "parallel/common/grad_buckets.h"
#include "parallel/gemini/gemini_state.h"

namespace colossal::parallel {

namespace {

std::string bytes(int64_t n) { return core::format_bytes(static_cast<uint64_t>(std::max<int64_t>(n, 0))); }

absl::Status option_range(bool ok, const char* key, const std::string& want) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("gemini: ", key, " must be ", want));
}

// Adds `src` to `dst` (float32, same length), on the host.
void add_into(const core::Tensor& dst, const core::Tensor& src) {
  float* d = const_cast<core::Tensor&>(dst).data<float>();
  const float* s = src.data<float>();
  for (int64_t i = 0; i < dst.numel(); ++i) d[i] += s[i];
}

absl::StatusOr<core::Tensor> zeros(int64_t n) {
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t,
                            core::Tensor::empty({n}, core::DType::kF32, core::Stream::cpu()));
  COLOSSAL_RETURN_IF_ERROR(t.set_zero(core::Stream::cpu()));
  return t;
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
  return absl::OkStatus();
}

// ---- State: accounting and placement ----

void GeminiPlugin::State::note(const std::string& message) const {
  if (options.notice) {
    options.notice(message);
  } else {
    std::cerr << message << "\n";
  }
}

int64_t GeminiPlugin::State::non_model_bytes() const {
  return options.non_model_bytes ? options.non_model_bytes() : 0;
}

int GeminiPlugin::State::furthest_chunk(int keep) const {
  int best = -1;
  size_t best_next = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const GeminiChunk& k = chunks[c];
    if (static_cast<int>(c) == keep || !k.on_device || k.compute > 0 || k.full.defined() ||
        k.full_grad.defined()) {
      continue;
    }
    size_t next = std::numeric_limits<size_t>::max();  // not used again in this pass
    for (size_t i = cursor; i < order().size(); ++i) {
      if (order()[i] == static_cast<int>(c)) {
        next = i;
        break;
      }
    }
    if (best < 0 || next > best_next) {
      best = static_cast<int>(c);
      best_next = next;
    }
  }
  return best;
}

absl::Status GeminiPlugin::State::reserve(int64_t n, int keep, const std::string& what) {
  const bool automatic = options.placement_policy == "auto";
  const double ratio = automatic ? options.steady_cuda_cap_ratio : 1.0;
  auto limit = [&] { return static_cast<int64_t>(capacity * ratio) - non_model_bytes(); };
  while (device_used + n > limit()) {
    const int victim = automatic ? furthest_chunk(keep) : -1;
    if (victim < 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "gemini (placement \"", options.placement_policy, "\"): ", what, " needs ", bytes(n),
          " more device memory; the plugin holds ", bytes(device_used), " of the ", bytes(limit()),
          " it may use (", bytes(capacity), automatic ? " x steady_cuda_cap_ratio" : "",
          ", less ", bytes(non_model_bytes()), " of non-model memory)",
          automatic ? " and nothing more can move to the host"
                    : " (placement_policy \"auto\" or \"cpu\" keeps less on the device)"));
    }
    if (!told_offload) {
      note(absl::StrCat("gemini auto: device memory is short (", bytes(limit()),
                        " for the model's chunks); moving the chunks used furthest ahead to the "
                        "host (said once)"));
      told_offload = true;
    }
    COLOSSAL_RETURN_IF_ERROR(move_chunk(victim, /*to_device=*/false));
    ++evictions;
  }
  device_used += n;
  device_peak = std::max(device_peak, device_used);
  return absl::OkStatus();
}

absl::Status GeminiPlugin::State::move_chunk(int c, bool to_device) {
  GeminiChunk& k = chunks[c];
  if (k.on_device == to_device) return absl::OkStatus();
  if (to_device) {
    COLOSSAL_RETURN_IF_ERROR(reserve(k.shard_bytes(), c, absl::StrCat("chunk ", c)));
  } else {
    release_bytes(k.shard_bytes());
  }
  // The CPU stand-in: both tiers are host memory; a move is a copy into new
  // memory of the other tier.
  for (core::Tensor* t : {&k.shard, &k.grad_shard, &k.exp_avg, &k.exp_avg_sq}) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor moved,
                              core::Tensor::empty({k.shard_size}, core::DType::kF32, core::Stream::cpu()));
    COLOSSAL_RETURN_IF_ERROR(moved.copy_from(*t, core::Stream::cpu()));
    *t = std::move(moved);
  }
  k.on_device = to_device;
  return absl::OkStatus();
}

// ---- State: gather, release, reduce ----

std::vector<int> GeminiPlugin::State::chunks_of(const std::vector<int>& params) const {
  std::vector<int> out;
  for (int p : params) {
    const int c = layout.chunk_of[p];
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

bool GeminiPlugin::State::next_use_is(int c) const {
  return !recording_now() && cursor < order().size() && order()[cursor] == c;
}

absl::Status GeminiPlugin::State::set_views(int c) {
  GeminiChunk& k = chunks[c];
  const auto& entries = store.table().entries();
  for (size_t s = 0; s < k.spec.params.size(); ++s) {
    const nn::ParameterEntry& e = entries[k.spec.params[s]];
    const int64_t off = k.spec.offsets[s];
    core::Tensor value, grad;
    if (k.full.defined()) {
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor v, k.full.slice(off, off + e.numel()));
      COLOSSAL_ASSIGN_OR_RETURN(value, v.reshape(e.shape.dims()));
    }
    if (k.full_grad.defined()) {
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor g, k.full_grad.slice(off, off + e.numel()));
      COLOSSAL_ASSIGN_OR_RETURN(grad, g.reshape(e.shape.dims()));
    }
    COLOSSAL_RETURN_IF_ERROR(store.set_views(k.spec.params[s], std::move(value), std::move(grad)));
  }
  return absl::OkStatus();
}

absl::Status GeminiPlugin::State::check_same_access(int64_t param) {
  std::vector<int64_t> all(static_cast<size_t>(world()), 0);
  COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w,
                            pg->all_gather(comm::Buffer::cpu(all.data(), all.size()),
                                           comm::Buffer::cpu(&param, 1)));
  COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), "gemini: checking the access order"));
  for (int r = 1; r < world(); ++r) {
    if (all[r] == all[0]) continue;
    auto name = [&](int64_t p) {
      return p < 0 ? std::string("(the end of the pass)")
                   : absl::StrCat("\"", store.table().entries()[p].name, "\"");
    };
    return absl::FailedPreconditionError(absl::StrCat(
        "gemini: the ranks use the parameters in different orders (access ", order().size(),
        " of the ", in_backward ? "backward" : "forward", "): rank 0 uses ", name(all[0]), ", rank ",
        r, " uses ", name(all[r]),
        ". Gemini gathers chunks collectively, so every rank must run the same modules in the "
        "same order"));
  }
  return absl::OkStatus();
}

absl::Status GeminiPlugin::State::access(int c, const std::string& param) {
  if (recording_now()) {
    if (world() > 1) {
      COLOSSAL_RETURN_IF_ERROR(
          check_same_access(store.table().find(param) - store.table().entries().data()));
    }
    orders[in_backward].push_back(c);
  } else if (cursor < order().size()) {
    ++cursor;
  }
  peak_non_model = std::max(peak_non_model, non_model_bytes());
  if (!chunks[c].full.defined()) COLOSSAL_RETURN_IF_ERROR(gather(c));
  return absl::OkStatus();
}

absl::Status GeminiPlugin::State::gather(int c) {
  GeminiChunk& k = chunks[c];
  if (k.full_is_shard()) {
    k.full = k.shard;
  } else {
    COLOSSAL_RETURN_IF_ERROR(reserve(k.spec.numel * 4, c, absl::StrCat("gathering chunk ", c)));
    COLOSSAL_ASSIGN_OR_RETURN(k.full, core::Tensor::empty({k.spec.numel}, core::DType::kF32,
                                                          core::Stream::cpu()));
    if (k.sharded) {
      COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, pg->all_gather(k.full, k.shard));
      COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), absl::StrCat("gemini: gathering chunk ", c)));
      ++gathers;
    } else {
      COLOSSAL_RETURN_IF_ERROR(k.full.copy_from(k.shard, core::Stream::cpu()));
    }
  }
  return set_views(c);
}

void GeminiPlugin::State::release(int c) {
  GeminiChunk& k = chunks[c];
  if (!k.full.defined() || k.compute > 0) return;
  if (!k.full_is_shard()) release_bytes(k.spec.numel * 4);
  k.full = core::Tensor();
  set_views(c).IgnoreError();  // slices of live tensors: cannot fail
}

absl::Status GeminiPlugin::State::ensure_grad(int c, const std::string& param) {
  GeminiChunk& k = chunks[c];
  if (k.reduced) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gemini: the gradient of parameter \"", param,
        "\" is written after its chunk was reduced in this backward (a module other than the one "
        "that declares it uses it after that module's backward)"));
  }
  if (k.full_grad.defined()) return absl::OkStatus();
  COLOSSAL_RETURN_IF_ERROR(reserve(k.spec.numel * 4, c, absl::StrCat("the gradients of chunk ", c)));
  COLOSSAL_ASSIGN_OR_RETURN(k.full_grad, zeros(k.spec.numel));
  return set_views(c);
}

absl::Status GeminiPlugin::State::reduce(int c) {
  GeminiChunk& k = chunks[c];
  if (!k.full_grad.defined()) {  // no parameter of the chunk was used: zero gradients
    COLOSSAL_RETURN_IF_ERROR(ensure_grad(c, "(unused)"));
  }
  const std::string what = absl::StrCat("gemini: reducing the gradients of chunk ", c);
  if (world() > 1 && k.sharded) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor part, zeros(k.shard_size));
    COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w,
                              pg->reduce_scatter(part, k.full_grad, comm::ReduceOp::kAvg));
    COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), what));
    add_into(k.grad_shard, part);
  } else {
    if (world() > 1) {
      COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, pg->all_reduce(k.full_grad, comm::ReduceOp::kAvg));
      COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), what));
    }
    add_into(k.grad_shard, k.full_grad);
  }
  release_bytes(k.spec.numel * 4);
  k.full_grad = core::Tensor();
  k.reduced = true;
  return set_views(c);
}

absl::Status GeminiPlugin::State::end_pass(bool ok) {
  if (!recording_now()) return absl::OkStatus();
  if (ok && world() > 1) COLOSSAL_RETURN_IF_ERROR(check_same_access(-1));
  recording[in_backward] = false;
  return absl::OkStatus();
}

absl::Status GeminiPlugin::State::place_auto() {
  auto_placed = true;
  // The warm-up ran with every shard on the host: its device peak is the
  // working set (gathered chunks, gradient buffers).
  const int64_t budget = static_cast<int64_t>(capacity * options.steady_cuda_cap_ratio) -
                         peak_non_model - device_peak;
  int64_t used = 0;
  std::vector<char> placed(chunks.size(), 0);
  auto try_place = [&](int c) -> absl::Status {
    if (placed[c]) return absl::OkStatus();
    placed[c] = 1;
    if (used + chunks[c].shard_bytes() > budget) return absl::OkStatus();
    used += chunks[c].shard_bytes();
    return move_chunk(c, /*to_device=*/true);
  };
  for (int c : orders[0]) COLOSSAL_RETURN_IF_ERROR(try_place(c));  // first use first
  for (size_t c = 0; c < chunks.size(); ++c) COLOSSAL_RETURN_IF_ERROR(try_place(static_cast<int>(c)));
  int on = 0;
  int64_t host = 0;
  for (const GeminiChunk& k : chunks) {
    on += k.on_device;
    if (!k.on_device) host += k.shard_bytes();
  }
  if (on < static_cast<int>(chunks.size())) {
    note(absl::StrCat("gemini auto: ", on, " of ", chunks.size(),
                      " chunks on the device, the others' shards and optimizer state (",
                      bytes(host), ") in host memory"));
    told_offload = true;
  }
  return absl::OkStatus();
}

// ---- The plugin ----

GeminiPlugin::GeminiPlugin(std::shared_ptr<State> state) : state_(std::move(state)) {}
GeminiPlugin::~GeminiPlugin() = default;

absl::StatusOr<std::unique_ptr<GeminiPlugin>> GeminiPlugin::create(
    std::shared_ptr<comm::ProcessGroup> pg, const GeminiOptions& options) {
  if (pg == nullptr) return absl::InvalidArgumentError("gemini: a null process group");
  COLOSSAL_RETURN_IF_ERROR(validate_gemini_options(options));
  auto state = std::make_shared<State>();
  state->pg = std::move(pg);
  state->options = options;
  return std::unique_ptr<GeminiPlugin>(new GeminiPlugin(std::move(state)));
}

int GeminiPlugin::dp_rank() const { return state_->rank(); }
int GeminiPlugin::dp_size() const { return state_->world(); }
const ChunkLayout& GeminiPlugin::layout() const { return state_->layout; }
int64_t GeminiPlugin::device_bytes() const { return state_->device_used; }
int64_t GeminiPlugin::peak_device_bytes() const { return state_->device_peak; }
int64_t GeminiPlugin::gathers() const { return state_->gathers; }
int64_t GeminiPlugin::evictions() const { return state_->evictions; }
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
  if (stream.is_cuda()) {
    return absl::UnimplementedError(
        "gemini: the CUDA path is not built yet (this build trains gemini on the CPU); use "
        "low_level_zero with cpu_offload on GPUs for now");
  }
  const nn::ParameterTable& table = store.table();
  for (core::DType d : table.dtypes()) {
    if (d != core::DType::kF32) {
      return absl::UnimplementedError(absl::StrCat(
          "gemini: the CPU path trains float32 parameters, the model's are ", core::dtype_name(d)));
    }
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
    if (k.on_device) {
      COLOSSAL_RETURN_IF_ERROR(s.reserve(k.shard_bytes(), c, absl::StrCat("the shards of chunk ", c)));
    }
    for (core::Tensor* t : {&k.shard, &k.grad_shard, &k.exp_avg, &k.exp_avg_sq}) {
      COLOSSAL_ASSIGN_OR_RETURN(*t, zeros(k.shard_size));
    }
    // Initial values of the parameters' parts in this shard, by element index.
    for (size_t i = 0; i < k.spec.params.size(); ++i) {
      const nn::ParameterEntry& e = table.entries()[k.spec.params[i]];
      const int64_t off = k.spec.offsets[i];
      const int64_t lo = std::max(off, k.shard_begin);
      const int64_t hi = std::min(off + e.numel(), k.shard_begin + k.shard_size);
      if (lo >= hi) continue;
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor part,
                                k.shard.slice(lo - k.shard_begin, hi - k.shard_begin));
      COLOSSAL_RETURN_IF_ERROR(nn::init_parameter(e, part, seed, lo - off, core::Stream::cpu()));
    }
  }
  std::weak_ptr<State> weak = state_;
  store.set_fetcher([weak](size_t index, bool want_grad) -> absl::Status {
    std::shared_ptr<State> st = weak.lock();
    if (st == nullptr) return absl::OkStatus();
    const int c = st->layout.chunk_of[index];
    const std::string& name = st->store.table().entries()[index].name;
    if (!st->chunks[c].full.defined()) {
      COLOSSAL_RETURN_IF_ERROR(st->access(c, name));
      st->touched.push_back(c);
    }
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
    for (size_t i = 0; i < k.spec.params.size(); ++i) {
      const int g = group_of[k.spec.params[i]];
      const int64_t off = k.spec.offsets[i];
      const int64_t lo = std::max(off, k.shard_begin);
      const int64_t hi = std::min(off + table.entries()[k.spec.params[i]].numel(),
                                  k.shard_begin + k.shard_size);
      if (g >= 0 && lo < hi) k.pieces.push_back({lo - k.shard_begin, hi - lo, g});
    }
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
        if (!m.recomputing() && !st->next_use_is(c)) st->release(c);
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
        if (!st->next_use_is(c)) st->release(c);
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
  for (size_t c = 0; c < s.chunks.size(); ++c) {
    s.chunks[c].compute = 0;
    s.release(static_cast<int>(c));
  }
  s.touched.clear();
  return s.end_pass(ok);
}

absl::Status GeminiPlugin::begin_backward(core::Context& ctx, bool sync) {
  State& s = *state_;
  if (!s.boosted) return absl::FailedPreconditionError("gemini: backward before boost");
  // no_sync changes nothing (see the header): every backward is reduced.
  s.in_backward = true;
  s.cursor = 0;
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
  for (size_t c = 0; c < s.chunks.size(); ++c) {
    GeminiChunk& k = s.chunks[c];
    k.compute = 0;
    if (k.full_grad.defined()) {  // a failed backward: drop its gradients
      s.release_bytes(k.spec.numel * 4);
      k.full_grad = core::Tensor();
    }
    s.release(static_cast<int>(c));
  }
  s.touched.clear();
  absl::Status ended = s.end_pass(ok && status.ok());
  s.in_backward = false;
  return status.ok() ? ended : status;
}

absl::Status GeminiPlugin::before_step(const core::Stream& stream) { return absl::OkStatus(); }

absl::Status GeminiPlugin::zero_grad() {
  for (GeminiChunk& k : state_->chunks) {
    COLOSSAL_RETURN_IF_ERROR(k.grad_shard.set_zero(core::Stream::cpu()));
  }
  return absl::OkStatus();
}

}  // namespace colossal::parallel
