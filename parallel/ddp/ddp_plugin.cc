#include "parallel/ddp/ddp_plugin.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "core/tensor/tensor.h"

namespace colossal::parallel {

struct DdpPlugin::State {
  std::shared_ptr<comm::ProcessGroup> pg;
  DdpOptions options;
  bool boosted = false;
  nn::ParameterStore store;
  std::shared_ptr<BucketedGradReducer> reducer;  // after boost
  std::vector<GradBucket> no_buckets;

  // All-reduce (average) of bucket `b`.
  absl::StatusOr<comm::WorkPtr> launch(size_t b, const comm::CollectiveOptions& o) {
    const std::vector<GradBucket>& buckets = reducer->buckets();
    const GradBucket& bucket = buckets[b];
    const core::Tensor flat = store.flat_grads(bucket.dtype);
    comm::Buffer buffer;
    buffer.data = static_cast<char*>(flat.raw_data()) +
                  bucket.offset * static_cast<int64_t>(core::dtype_size(bucket.dtype));
    buffer.count = bucket.count;
    buffer.dtype = bucket.dtype;
    buffer.device = flat.device();
    absl::StatusOr<comm::WorkPtr> w = pg->all_reduce(buffer, comm::ReduceOp::kAvg, o);
    if (!w.ok()) {
      return core::annotate(w.status(), absl::StrCat("all-reducing gradient bucket ", b, " of ",
                                                     buckets.size(), " (",
                                                     bucket.params.front(), " ...)"));
    }
    return w;
  }
};

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

// The reducer finishes its unfinished work when destroyed.
DdpPlugin::~DdpPlugin() = default;

int DdpPlugin::dp_rank() const { return state_->pg->rank(); }
int DdpPlugin::dp_size() const { return state_->pg->size(); }
const std::vector<GradBucket>& DdpPlugin::buckets() const {
  return state_->reducer != nullptr ? state_->reducer->buckets() : state_->no_buckets;
}
int64_t DdpPlugin::reductions_issued() const {
  return state_->reducer != nullptr ? state_->reducer->issued() : 0;
}
int64_t DdpPlugin::reductions_issued_in_hooks() const {
  return state_->reducer != nullptr ? state_->reducer->issued_in_hooks() : 0;
}

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
  const int64_t cap_bytes =
      std::max<int64_t>(1, static_cast<int64_t>(s.options.bucket_cap_mb * 1024.0 * 1024.0));
  State* raw = &s;  // the reducer is owned by the state: it never outlives it
  COLOSSAL_ASSIGN_OR_RETURN(
      std::shared_ptr<BucketedGradReducer> reducer,
      BucketedGradReducer::create(
          "ddp", model, store, make_grad_buckets(table, cap_bytes),
          [raw](size_t b, const comm::CollectiveOptions& o) { return raw->launch(b, o); },
          s.options.overlap_communication));
  s.store = store;

  if (s.options.broadcast_parameters) {
    const core::Stream stream = optimizer.stream();
    comm::CollectiveOptions o;
    if (stream.is_cuda()) o.stream = stream;
    for (core::DType dtype : table.dtypes()) {
      COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, s.pg->broadcast(store.flat_values(dtype), 0, o));
      reducer->track(std::move(w));
    }
    for (const core::Tensor& m : masters) {
      COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, s.pg->broadcast(m, 0, o));
      reducer->track(std::move(w));
    }
    COLOSSAL_RETURN_IF_ERROR(
        core::annotate(reducer->wait_all(stream), "broadcasting rank 0's parameters"));
  }
  s.reducer = std::move(reducer);
  s.boosted = true;
  return absl::OkStatus();
}

absl::Status DdpPlugin::begin_backward(core::Context& ctx, bool sync) {
  State& s = *state_;
  if (!s.boosted) return absl::FailedPreconditionError("ddp: backward before boost");
  return s.reducer->begin_backward(ctx.compute_stream(), sync);
}

absl::Status DdpPlugin::end_backward(bool ok) {
  if (state_->reducer == nullptr) return absl::OkStatus();
  return state_->reducer->end_backward(ok);
}

absl::Status DdpPlugin::before_step(const core::Stream& stream) {
  if (state_->reducer == nullptr) return absl::OkStatus();
  return core::annotate(state_->reducer->wait_all(stream),
                        "ddp: waiting for the gradient all-reduces");
}

}  // namespace colossal::parallel
