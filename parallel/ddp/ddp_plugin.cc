#include "parallel/ddp/ddp_plugin.h"

#include <cmath>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "core/tensor/tensor.h"

namespace colossal::parallel {

std::vector<GradBucket> make_grad_buckets(const nn::ParameterTable& table, int64_t cap_bytes) {
  struct Open {
    GradBucket bucket;
    int64_t hi = 0;  // end (exclusive) of the open bucket's range
    int64_t lo = 0;  // offset of the last parameter added
  };
  std::vector<GradBucket> out;
  absl::flat_hash_map<int, Open> open;
  auto close = [&out](Open& o) {
    o.bucket.offset = o.lo;
    o.bucket.count = o.hi - o.lo;
    out.push_back(std::move(o.bucket));
    o.hi = o.lo;
    o.bucket = GradBucket{};
  };
  const std::vector<nn::ParameterEntry>& entries = table.entries();
  for (size_t i = entries.size(); i-- > 0;) {
    const nn::ParameterEntry& e = entries[i];
    const int key = static_cast<int>(e.dtype);
    auto it = open.find(key);
    if (it == open.end()) {
      Open o;
      o.hi = table.buffer_numel(e.dtype);
      it = open.emplace(key, std::move(o)).first;
    }
    Open& o = it->second;
    const int64_t dsize = static_cast<int64_t>(core::dtype_size(e.dtype));
    if (!o.bucket.params.empty() && (o.hi - e.offset) * dsize > cap_bytes) close(o);
    o.bucket.dtype = e.dtype;
    o.bucket.params.push_back(e.name);
    o.lo = e.offset;
  }
  for (core::DType dtype : table.dtypes()) {
    auto it = open.find(static_cast<int>(dtype));
    if (it != open.end() && !it->second.bucket.params.empty()) close(it->second);
  }
  return out;
}

struct DdpPlugin::State {
  std::shared_ptr<comm::ProcessGroup> pg;
  DdpOptions options;
  bool boosted = false;
  nn::ParameterStore store;
  std::vector<GradBucket> buckets;
  std::vector<int> bucket_of;         // per table entry
  std::vector<int> params_in_bucket;  // per bucket
  // Per backward.
  std::vector<int> remaining;  // per bucket: parameters not final yet
  std::vector<char> final;     // per table entry
  size_t next_launch = 0;
  bool in_backward = false;
  bool sync = false;
  std::optional<core::Stream> input_stream;  // CUDA: the stream that produced the gradients
  std::vector<comm::WorkPtr> works;
  int64_t issued = 0;
  int64_t issued_in_hooks = 0;

  comm::CollectiveOptions collective_options() const {
    comm::CollectiveOptions o;
    if (input_stream.has_value() && input_stream->is_cuda()) o.stream = input_stream;
    return o;
  }

  // Waits for every issued collective: on the host (CPU `stream`), or by
  // making the CUDA `stream` wait for it.
  absl::Status wait_all(const core::Stream& stream) {
    absl::Status first;
    for (const comm::WorkPtr& w : works) {
      if (stream.is_cuda()) {
        w->wait_stream(stream);
      } else {
        absl::Status s = w->wait();
        if (first.ok() && !s.ok()) first = s;
      }
    }
    works.clear();
    return first;
  }

  absl::Status launch(size_t b) {
    const GradBucket& bucket = buckets[b];
    const core::Tensor flat = store.flat_grads(bucket.dtype);
    comm::Buffer buffer;
    buffer.data = static_cast<char*>(flat.raw_data()) +
                  bucket.offset * static_cast<int64_t>(core::dtype_size(bucket.dtype));
    buffer.count = bucket.count;
    buffer.dtype = bucket.dtype;
    buffer.device = flat.device();
    absl::StatusOr<comm::WorkPtr> w =
        pg->all_reduce(buffer, comm::ReduceOp::kAvg, collective_options());
    if (!w.ok()) {
      return core::annotate(w.status(), absl::StrCat("all-reducing gradient bucket ", b, " of ",
                                                     buckets.size(), " (",
                                                     bucket.params.front(), " ...)"));
    }
    works.push_back(std::move(*w));
    ++issued;
    return absl::OkStatus();
  }

  // Issues the ready buckets, in bucket order.
  absl::Status launch_ready(bool in_hook) {
    while (next_launch < buckets.size() && remaining[next_launch] == 0) {
      COLOSSAL_RETURN_IF_ERROR(launch(next_launch));
      if (in_hook) ++issued_in_hooks;
      ++next_launch;
    }
    return absl::OkStatus();
  }

  absl::Status mark_final(int entry) {
    if (final[entry]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ddp: the gradient of ", store.table().entries()[entry].name,
          " was finalised twice in one backward (did a module run twice in the forward?); "
          "its bucket is reduced once per backward"));
    }
    final[entry] = 1;
    --remaining[bucket_of[entry]];
    return absl::OkStatus();
  }

  // A module's backward hook: `own` (table entries) are final.
  absl::Status on_module_done(const std::vector<int>& own) {
    if (!in_backward || !sync) return absl::OkStatus();
    for (int e : own) COLOSSAL_RETURN_IF_ERROR(mark_final(e));
    return launch_ready(/*in_hook=*/true);
  }
};

namespace {

// The names `module` and its descendants declare.
absl::StatusOr<absl::flat_hash_set<std::string>> subtree_names(nn::Module& module) {
  nn::ParameterTable table;
  COLOSSAL_RETURN_IF_ERROR(module.declare(table));
  absl::flat_hash_set<std::string> names;
  for (const nn::ParameterEntry& e : table.entries()) names.insert(e.name);
  return names;
}

// Table entries declared by `module` itself, for every module of the tree.
absl::Status collect_owned(nn::Module& module, const nn::ParameterTable& table,
                           std::vector<std::pair<nn::Module*, std::vector<int>>>& out) {
  COLOSSAL_ASSIGN_OR_RETURN(absl::flat_hash_set<std::string> mine, subtree_names(module));
  for (nn::Module* child : module.children()) {
    COLOSSAL_ASSIGN_OR_RETURN(absl::flat_hash_set<std::string> theirs, subtree_names(*child));
    for (const std::string& n : theirs) mine.erase(n);
  }
  std::vector<int> own;
  for (const std::string& n : mine) {
    const nn::ParameterEntry* e = table.find(n);
    if (e == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(module.description(), " declares parameter \"", n,
                       "\" but the store has none of that name: pass the store made from "
                       "this model's table"));
    }
    own.push_back(static_cast<int>(e - table.entries().data()));
  }
  if (!own.empty()) out.emplace_back(&module, std::move(own));
  for (nn::Module* child : module.children()) {
    COLOSSAL_RETURN_IF_ERROR(collect_owned(*child, table, out));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DdpPlugin>> DdpPlugin::create(std::shared_ptr<comm::ProcessGroup> pg,
                                                             const DdpOptions& options) {
  if (pg == nullptr) return absl::InvalidArgumentError("ddp: no process group");
  if (!std::isfinite(options.bucket_cap_mb) || options.bucket_cap_mb <= 0.0) {
    return absl::InvalidArgumentError(absl::StrCat("ddp: bucket_cap_mb must be positive, got ",
                                                   options.bucket_cap_mb));
  }
  auto state = std::make_shared<State>();
  state->pg = std::move(pg);
  state->options = options;
  return std::unique_ptr<DdpPlugin>(new DdpPlugin(std::move(state)));
}

DdpPlugin::DdpPlugin(std::shared_ptr<State> state) : state_(std::move(state)) {}

DdpPlugin::~DdpPlugin() {
  // The group may cancel unfinished work when destroyed; finish it first.
  if (state_ != nullptr) state_->wait_all(core::Stream::cpu()).IgnoreError();
}

int DdpPlugin::dp_rank() const { return state_->pg->rank(); }
int DdpPlugin::dp_size() const { return state_->pg->size(); }
const std::vector<GradBucket>& DdpPlugin::buckets() const { return state_->buckets; }
int64_t DdpPlugin::reductions_issued() const { return state_->issued; }
int64_t DdpPlugin::reductions_issued_in_hooks() const { return state_->issued_in_hooks; }

absl::Status DdpPlugin::boost(nn::Module& model, const nn::ParameterStore& store,
                              nn::Optimizer& optimizer) {
  State& s = *state_;
  if (s.boosted) return absl::FailedPreconditionError("ddp: boost called twice");
  const nn::ParameterTable& table = store.table();
  // The optimizer must read the gradients this plugin reduces.
  std::vector<core::Tensor> masters;
  for (int g = 0; g < optimizer.num_groups(); ++g) {
    for (const nn::ParamRef& p : optimizer.group_params(g)) {
      absl::StatusOr<nn::Parameter> mine = store.find(p.name);
      if (!mine.ok()) {
        return core::annotate(mine.status(), "an optimizer parameter is not in the model's store");
      }
      if (p.grad.raw_data() != mine->grad.raw_data()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the optimizer's gradient of ", p.name,
            " is not the store's gradient view; build its parameters with optimizer_params"));
      }
      if (p.model_copy.defined()) masters.push_back(p.master);
    }
  }
  std::vector<std::pair<nn::Module*, std::vector<int>>> owned;
  COLOSSAL_RETURN_IF_ERROR(collect_owned(model, table, owned));

  const int64_t cap_bytes =
      std::max<int64_t>(1, static_cast<int64_t>(s.options.bucket_cap_mb * 1024.0 * 1024.0));
  s.store = store;
  s.buckets = make_grad_buckets(table, cap_bytes);
  s.bucket_of.assign(table.size(), -1);
  s.params_in_bucket.assign(s.buckets.size(), 0);
  for (size_t b = 0; b < s.buckets.size(); ++b) {
    for (const std::string& n : s.buckets[b].params) {
      s.bucket_of[table.find(n) - table.entries().data()] = static_cast<int>(b);
      ++s.params_in_bucket[b];
    }
  }

  if (s.options.broadcast_parameters) {
    const core::Stream stream = optimizer.stream();
    comm::CollectiveOptions o;
    if (stream.is_cuda()) o.stream = stream;
    for (core::DType dtype : table.dtypes()) {
      COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, s.pg->broadcast(store.flat_values(dtype), 0, o));
      s.works.push_back(std::move(w));
    }
    for (const core::Tensor& m : masters) {
      COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, s.pg->broadcast(m, 0, o));
      s.works.push_back(std::move(w));
    }
    COLOSSAL_RETURN_IF_ERROR(
        core::annotate(s.wait_all(stream), "broadcasting rank 0's parameters"));
  }

  std::weak_ptr<State> weak = state_;
  for (auto& [module, own] : owned) {
    module->add_backward_hook(
        [weak, own = std::move(own)](nn::Module&, const core::Tensor&) -> absl::Status {
          std::shared_ptr<State> st = weak.lock();
          if (st == nullptr) return absl::OkStatus();
          return st->on_module_done(own);
        });
  }
  s.boosted = true;
  return absl::OkStatus();
}

absl::Status DdpPlugin::begin_backward(core::Context& ctx, bool sync) {
  State& s = *state_;
  if (!s.boosted) return absl::FailedPreconditionError("ddp: backward before boost");
  // The previous backward's reductions write the buffer this backward adds to.
  s.input_stream = ctx.compute_stream();
  COLOSSAL_RETURN_IF_ERROR(s.wait_all(ctx.compute_stream()));
  s.in_backward = true;
  s.sync = sync;
  s.remaining = s.params_in_bucket;
  s.final.assign(s.bucket_of.size(), 0);
  s.next_launch = 0;
  return absl::OkStatus();
}

absl::Status DdpPlugin::end_backward(bool ok) {
  State& s = *state_;
  s.in_backward = false;
  if (!ok) return s.wait_all(core::Stream::cpu());
  if (!s.sync) return absl::OkStatus();
  // Parameters this backward did not reach: final now.
  for (size_t e = 0; e < s.final.size(); ++e) {
    if (!s.final[e]) COLOSSAL_RETURN_IF_ERROR(s.mark_final(static_cast<int>(e)));
  }
  return s.launch_ready(/*in_hook=*/false);
}

absl::Status DdpPlugin::before_step(const core::Stream& stream) {
  return core::annotate(state_->wait_all(stream), "ddp: waiting for the gradient all-reduces");
}

}  // namespace colossal::parallel
