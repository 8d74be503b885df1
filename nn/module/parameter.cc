#include "nn/module/parameter.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/alloc/allocator.h"
#include "core/alloc/default_allocator.h"
#include "core/status/status.h"
#include "core/status/suggest.h"
#include "nn/module/parameter_init.h"

namespace colossal::nn {

namespace internal {
// What every copy of a store and every handle share.
struct StoreState {
  ParameterTable table;
  absl::flat_hash_map<int, core::Tensor> values, grads;  // flat buffers by dtype
  std::vector<Parameter> parameters;                      // table order
  ParameterStore::Fetcher fetcher;                        // may be null
  bool grads_released = false;                            // release_grads()
};
}  // namespace internal

namespace {

absl::Status check_init(const std::string& name, int64_t numel, const InitRule& init) {
  if (init.zero_tail < 0 || init.zero_tail > numel) {
    return absl::InvalidArgumentError(absl::StrCat("parameter \"", name, "\": zero_tail ",
                                                   init.zero_tail, " is outside [0, ", numel, "]"));
  }
  return absl::OkStatus();
}

int64_t round_up(int64_t n, int64_t align) { return (n + align - 1) / align * align; }

absl::Status no_memory(const std::string& name) {
  return absl::FailedPreconditionError(absl::StrCat(
      "parameter \"", name,
      "\" has no memory on this process (the model is declared but not materialized: boost it, "
      "or materialize its ParameterStore, before running it)"));
}

const internal::StoreState& empty_state() {
  static const auto* state = new internal::StoreState;
  return *state;
}

}  // namespace

std::vector<SplitRun> split_runs(const ParameterEntry& entry) {
  if (!entry.split.active()) return {SplitRun{0, 0, entry.numel()}};
  const TensorSplit& sp = entry.split;
  const absl::Span<const int64_t> g = entry.global_shape.dims();
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < sp.dim; ++d) outer *= g[d];
  for (size_t d = static_cast<size_t>(sp.dim) + 1; d < g.size(); ++d) inner *= g[d];
  const int64_t block = g[sp.dim] / sp.blocks, piece = block / sp.parts;
  std::vector<SplitRun> runs;
  runs.reserve(static_cast<size_t>(outer * sp.blocks));
  int64_t local = 0;
  for (int64_t o = 0; o < outer; ++o) {
    for (int b = 0; b < sp.blocks; ++b) {
      const int64_t row = b * block + sp.index * piece;
      runs.push_back(SplitRun{local, (o * g[sp.dim] + row) * inner, piece * inner});
      local += piece * inner;
    }
  }
  return runs;
}

absl::Status ParameterTable::add(std::string name, const core::Shape& global_shape,
                                 core::DType dtype, InitRule init, TensorSplit split) {
  if (name.empty()) return absl::InvalidArgumentError("parameter with an empty name");
  if (index_.contains(name)) {
    return absl::InvalidArgumentError(absl::StrCat("parameter \"", name, "\" declared twice"));
  }
  if (!core::dtype_is_floating(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("parameter \"", name, "\" has dtype ",
                                                   core::dtype_name(dtype),
                                                   "; parameters are floating point"));
  }
  COLOSSAL_RETURN_IF_ERROR(check_init(name, global_shape.numel(), init));
  core::Shape shape = global_shape;
  if (split.active()) {
    const int64_t cut = static_cast<int64_t>(split.blocks) * split.parts;
    if (split.dim >= global_shape.rank() || split.blocks < 1 || split.index < 0 ||
        split.index >= split.parts || global_shape.dims()[split.dim] % cut != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter \"", name, "\" ", global_shape.to_string(), ": dimension ", split.dim,
          " does not split into ", split.blocks, " block(s) x ", split.parts,
          " tensor-parallel parts (piece ", split.index, ")"));
    }
    std::vector<int64_t> dims(global_shape.dims().begin(), global_shape.dims().end());
    dims[split.dim] /= split.parts;
    COLOSSAL_ASSIGN_OR_RETURN(shape, core::Shape::make(dims));
  } else {
    split = TensorSplit{};
  }
  const int key = static_cast<int>(dtype);
  if (!buffer_numel_.contains(key)) dtypes_.push_back(dtype);
  int64_t& end = buffer_numel_[key];
  const int64_t offset =
      round_up(end, std::max<int64_t>(1, 16 / static_cast<int64_t>(core::dtype_size(dtype))));
  end = offset + shape.numel();
  // The float32 layout's offset (16 bytes = 4 elements), whatever `dtype` is.
  int64_t& init_end = init_numel_[key];
  const int64_t init_offset = round_up(init_end, 4);
  init_end = init_offset + global_shape.numel();
  index_[name] = entries_.size();
  entries_.push_back(ParameterEntry{std::move(name), shape, dtype, offset, init, init_offset,
                                    split, global_shape});
  return absl::OkStatus();
}

absl::Status ParameterTable::adopt_init_offsets(const ParameterTable& whole) {
  for (ParameterEntry& e : entries_) {
    const ParameterEntry* w = whole.find(e.name);
    if (w == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("parameter \"", e.name, "\" is not in the whole model's table"));
    }
    e.init_offset = w->init_offset;
  }
  return absl::OkStatus();
}

absl::Status ParameterTable::set_init(absl::string_view name, InitRule init) {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(absl::StrCat("no parameter \"", name, "\" to set the init rule of"));
  }
  ParameterEntry& e = entries_[it->second];
  COLOSSAL_RETURN_IF_ERROR(check_init(e.name, e.global_shape.numel(), init));
  e.init = init;
  return absl::OkStatus();
}

const ParameterEntry* ParameterTable::find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

int64_t ParameterTable::buffer_numel(core::DType dtype) const {
  auto it = buffer_numel_.find(static_cast<int>(dtype));
  return it == buffer_numel_.end() ? 0 : it->second;
}

int64_t ParameterTable::parameter_count() const {
  int64_t n = 0;
  for (const ParameterEntry& e : entries_) n += e.numel();
  return n;
}

// ParameterHandle

const std::string& ParameterHandle::name() const {
  static const std::string* unbound = new std::string("(unbound)");
  return state_ == nullptr ? *unbound : state_->parameters[index_].name;
}

bool ParameterHandle::present() const {
  return state_ != nullptr && state_->parameters[index_].value.defined();
}

absl::StatusOr<core::Tensor> ParameterHandle::value() const {
  if (state_ == nullptr) return absl::FailedPreconditionError("an unbound parameter handle");
  const Parameter& p = state_->parameters[index_];
  if (!p.value.defined() && state_->fetcher) {
    COLOSSAL_RETURN_IF_ERROR(state_->fetcher(index_, /*want_grad=*/false));
  }
  if (!p.value.defined()) return no_memory(p.name);
  return p.value;
}

absl::StatusOr<core::Tensor> ParameterHandle::grad() const {
  if (state_ == nullptr) return absl::FailedPreconditionError("an unbound parameter handle");
  const Parameter& p = state_->parameters[index_];
  if (!p.grad.defined() && state_->fetcher) {
    COLOSSAL_RETURN_IF_ERROR(state_->fetcher(index_, /*want_grad=*/true));
  }
  if (!p.grad.defined()) return no_memory(p.name);
  return p.grad;
}

// ParameterStore

ParameterStore ParameterStore::declare(const ParameterTable& table) {
  auto state = std::make_shared<internal::StoreState>();
  state->table = table;
  state->parameters.reserve(table.size());
  for (const ParameterEntry& e : table.entries()) state->parameters.push_back(Parameter{e.name, {}, {}});
  return ParameterStore(std::move(state));
}

absl::StatusOr<ParameterStore> ParameterStore::create(const ParameterTable& table,
                                                      const core::Stream& stream) {
  ParameterStore store = declare(table);
  COLOSSAL_RETURN_IF_ERROR(store.allocate(stream));
  return store;
}

int64_t ParameterStore::replicated_bytes() const {
  int64_t bytes = 0;
  for (core::DType dtype : table().dtypes()) {
    bytes += 2 * table().buffer_numel(dtype) * static_cast<int64_t>(core::dtype_size(dtype));
  }
  return bytes;
}

absl::Status ParameterStore::allocate(const core::Stream& stream, Gradients gradients) {
  if (state_ == nullptr) return absl::FailedPreconditionError("allocating an empty ParameterStore");
  internal::StoreState& s = *state_;
  if (!s.values.empty() || std::any_of(s.parameters.begin(), s.parameters.end(),
                                       [](const Parameter& p) { return p.value.defined(); })) {
    return absl::FailedPreconditionError("the parameters have memory already");
  }
  const core::Device device = stream.device();
  const bool flat_grads = gradients == Gradients::kFlat;
  const int64_t needed = flat_grads ? replicated_bytes() : replicated_bytes() / 2;
  const std::string what = absl::StrFormat(
      "materializing %d parameters (%s of values%s) on %s", s.table.parameter_count(),
      core::format_bytes(static_cast<uint64_t>(needed)), flat_grads ? " and gradients" : "",
      device.to_string());
  // A model far larger than the device fails here, before any allocation (a
  // host that overcommits memory would otherwise accept it and die on first touch).
  absl::StatusOr<uint64_t> capacity = core::memory_capacity(device);
  if (capacity.ok() && static_cast<uint64_t>(needed) > *capacity) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": ", device.to_string(), " has ",
                                                     core::format_bytes(*capacity), " in all"));
  }
  absl::flat_hash_map<int, core::Tensor> values, grads;
  for (core::DType dtype : s.table.dtypes()) {
    const int64_t n = s.table.buffer_numel(dtype);
    absl::StatusOr<core::Tensor> v = core::Tensor::empty({n}, dtype, stream);
    if (!v.ok()) return core::annotate(v.status(), what);
    COLOSSAL_RETURN_IF_ERROR(v->set_zero(stream));
    values[static_cast<int>(dtype)] = *std::move(v);
    if (!flat_grads) continue;
    absl::StatusOr<core::Tensor> g = core::Tensor::empty({n}, dtype, stream);
    if (!g.ok()) return core::annotate(g.status(), what);
    COLOSSAL_RETURN_IF_ERROR(g->set_zero(stream));
    grads[static_cast<int>(dtype)] = *std::move(g);
  }
  std::vector<Parameter> parameters;
  parameters.reserve(s.table.size());
  for (const ParameterEntry& e : s.table.entries()) {
    const size_t byte_offset = static_cast<size_t>(e.offset) * core::dtype_size(e.dtype);
    Parameter p;
    p.name = e.name;
    COLOSSAL_ASSIGN_OR_RETURN(p.value, core::Tensor::from_storage(
                                           values[static_cast<int>(e.dtype)].storage(),
                                           byte_offset, e.shape, e.dtype));
    if (flat_grads) {
      COLOSSAL_ASSIGN_OR_RETURN(p.grad, core::Tensor::from_storage(
                                            grads[static_cast<int>(e.dtype)].storage(),
                                            byte_offset, e.shape, e.dtype));
    }
    parameters.push_back(std::move(p));
  }
  s.values = std::move(values);
  s.grads = std::move(grads);
  s.grads_released = !flat_grads;
  s.parameters = std::move(parameters);
  return absl::OkStatus();
}

bool ParameterStore::materialized() const {
  if (state_ == nullptr) return false;
  return std::all_of(state_->parameters.begin(), state_->parameters.end(),
                     [this](const Parameter& p) {
                       return p.value.defined() && (p.grad.defined() || state_->grads_released);
                     });
}

absl::Status ParameterStore::initialize(uint64_t seed, const core::Stream& stream) {
  if (state_ == nullptr) return absl::OkStatus();
  for (size_t i = 0; i < state_->parameters.size(); ++i) {
    const Parameter& p = state_->parameters[i];
    if (!p.value.defined()) return no_memory(p.name);
    const ParameterEntry& e = state_->table.entries()[i];
    if (!e.split.active()) {
      COLOSSAL_RETURN_IF_ERROR(init_parameter(e, p.value, seed, /*first=*/0, stream));
      continue;
    }
    // A tensor-parallel piece: each run draws the whole parameter's elements.
    ParameterEntry whole = e;
    whole.shape = e.global_shape;
    whole.split = TensorSplit{};
    COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor flat, p.value.reshape({-1}));
    for (const SplitRun& r : split_runs(e)) {
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor part, flat.slice(r.local, r.local + r.count));
      COLOSSAL_RETURN_IF_ERROR(init_parameter(whole, part, seed, r.global, stream));
    }
  }
  return absl::OkStatus();
}

const ParameterTable& ParameterStore::table() const {
  return state_ == nullptr ? empty_state().table : state_->table;
}

const std::vector<Parameter>& ParameterStore::parameters() const {
  return state_ == nullptr ? empty_state().parameters : state_->parameters;
}

core::Tensor ParameterStore::flat_values(core::DType dtype) const {
  if (state_ == nullptr) return core::Tensor();
  auto it = state_->values.find(static_cast<int>(dtype));
  return it == state_->values.end() ? core::Tensor() : it->second;
}

core::Tensor ParameterStore::flat_grads(core::DType dtype) const {
  if (state_ == nullptr) return core::Tensor();
  auto it = state_->grads.find(static_cast<int>(dtype));
  return it == state_->grads.end() ? core::Tensor() : it->second;
}

absl::StatusOr<size_t> ParameterStore::index_of(absl::string_view name) const {
  const ParameterTable& t = table();
  if (const ParameterEntry* e = t.find(name)) return static_cast<size_t>(e - t.entries().data());
  std::vector<absl::string_view> names;
  for (const ParameterEntry& e : t.entries()) names.push_back(e.name);
  return absl::NotFoundError(
      absl::StrCat("no parameter \"", name, "\"", core::did_you_mean(name, names)));
}

absl::StatusOr<Parameter> ParameterStore::find(absl::string_view name) const {
  COLOSSAL_ASSIGN_OR_RETURN(size_t i, index_of(name));
  return state_->parameters[i];
}

absl::Status ParameterStore::release_grads() {
  if (state_ == nullptr || state_->values.empty() || state_->grads.empty()) {
    return absl::FailedPreconditionError(
        "release_grads: the store has no flat gradient buffers (allocate it first)");
  }
  state_->grads.clear();
  for (Parameter& p : state_->parameters) p.grad = core::Tensor();
  state_->grads_released = true;
  return absl::OkStatus();
}

bool ParameterStore::grads_released() const {
  return state_ != nullptr && state_->grads_released;
}

absl::Status ParameterStore::set_grad(size_t index, core::Tensor grad) {
  if (state_ == nullptr || index >= state_->parameters.size()) {
    return absl::InvalidArgumentError(absl::StrCat("set_grad: no parameter at index ", index));
  }
  const ParameterEntry& e = state_->table.entries()[index];
  if (!state_->grads_released) {
    return absl::FailedPreconditionError(absl::StrCat(
        "set_grad: parameter \"", e.name, "\"'s gradient is the store's (release_grads first)"));
  }
  if (grad.defined() && (grad.shape() != e.shape || grad.dtype() != e.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("set_grad: parameter \"", e.name, "\" is ",
                                                   core::dtype_name(e.dtype), " ",
                                                   e.shape.to_string(), ", given ", grad.to_string()));
  }
  state_->parameters[index].grad = std::move(grad);
  return absl::OkStatus();
}

absl::Status ParameterStore::set_views(size_t index, core::Tensor value, core::Tensor grad) {
  if (state_ == nullptr || index >= state_->parameters.size()) {
    return absl::InvalidArgumentError(absl::StrCat("set_views: no parameter at index ", index));
  }
  const ParameterEntry& e = state_->table.entries()[index];
  if (!state_->values.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "set_views: parameter \"", e.name, "\" lives in the store's flat buffers"));
  }
  for (const core::Tensor* t : {&value, &grad}) {
    if (t->defined() && (t->shape() != e.shape || t->dtype() != e.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat("set_views: parameter \"", e.name, "\" is ",
                                                     core::dtype_name(e.dtype), " ",
                                                     e.shape.to_string(), ", given ",
                                                     t->to_string()));
    }
  }
  Parameter& p = state_->parameters[index];
  p.value = std::move(value);
  p.grad = std::move(grad);
  return absl::OkStatus();
}

void ParameterStore::set_fetcher(Fetcher fetcher) {
  if (state_ != nullptr) state_->fetcher = std::move(fetcher);
}

absl::StatusOr<ParameterHandle> ParameterStore::handle(absl::string_view name) const {
  COLOSSAL_ASSIGN_OR_RETURN(size_t i, index_of(name));
  return ParameterHandle(state_, i);
}

absl::Status ParameterStore::zero_grad(const core::Stream& stream) {
  if (state_ == nullptr) return absl::OkStatus();
  for (auto& [key, grads] : state_->grads) COLOSSAL_RETURN_IF_ERROR(grads.set_zero(stream));
  if (!state_->grads_released) return absl::OkStatus();
  for (Parameter& p : state_->parameters) {
    if (p.grad.defined()) COLOSSAL_RETURN_IF_ERROR(p.grad.set_zero(stream));
  }
  return absl::OkStatus();
}

}  // namespace colossal::nn
