#include "parallel/zero/zero_grad_reduction.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/device/device.h"
#include "core/ops/elementwise.h"
#include "core/status/status.h"

namespace colossal::parallel {

struct ZeroGradReduction::Bucket {
  int64_t chunk = 0;                // elements per rank in the reduce-scatter
  int64_t mine_lo = 0, mine_n = 0;  // this rank's part of the bucket
  // The one rank whose slice holds the whole bucket (reduce_owned_buckets), else -1.
  int owner = -1;
};

struct ZeroGradReduction::InFlight {
  size_t bucket = 0;
  core::Tensor grads;       // a stage-2 bucket reduced in place: its memory
  core::Tensor wire;        // converting, a bucket reduced in place: its converted copy
  core::Tensor send, recv;  // a reduce-scattered bucket's buffers (in the wire dtype)
  comm::WorkPtr work;       // its collective
  bool in_shard = false;    // `grads` is the shard's own range: nothing to add
};

namespace {

// Partitioned stage 2: buckets whose collectives may still run while the
// backward goes on. Older ones are retired as the next is launched (see
// retire_beyond), so a backward holds the buckets it writes and these, not
// every bucket's gradients: a few collectives of overlap is what hides them
// behind the backward (a bucket reduces far faster than the backward fills
// the next one over NVLink or InfiniBand).
constexpr size_t kInFlightBuckets = 4;

// Work enqueued on `waiter` from now on runs after the work enqueued on
// `producer` so far: on the device between CUDA streams, else (no event, or
// a CPU waiter) the host waits for `producer`. CPU work is done when enqueued.
void order_after(const core::Stream& waiter, const core::Stream& producer) {
  if (!producer.is_cuda() || (waiter.is_cuda() && waiter.handle() == producer.handle())) return;
  if (waiter.is_cuda()) {
    absl::StatusOr<core::Event> event = core::Event::create(producer.device());
    if (event.ok()) {
      core::wait_stream(waiter, producer, *event);
      return;
    }
  }
  producer.synchronize();
}

// dst = src converted (as many elements), on `on`.
absl::Status cast_on(const core::Tensor& dst, const core::Tensor& src, const core::Stream& on) {
  return core::annotate(core::ops::cast(on, dst, src), "converting gradients for communication_dtype");
}

// A new tensor of `dtype` on `on` holding `src` converted (as many elements).
absl::StatusOr<core::Tensor> converted(const core::Tensor& src, core::DType dtype,
                                       const core::Stream& on) {
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t, core::Tensor::empty({src.numel()}, dtype, on));
  COLOSSAL_RETURN_IF_ERROR(cast_on(t, src, on));
  return t;
}

}  // namespace

absl::StatusOr<core::Tensor> zero_filled(int64_t n, core::DType dtype, const core::Stream& stream) {
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t,
                            core::Tensor::empty({std::max<int64_t>(n, 1)}, dtype, stream));
  COLOSSAL_RETURN_IF_ERROR(t.set_zero(stream));
  if (n == 0) return t.slice(0, 0);
  return t;
}

absl::StatusOr<std::unique_ptr<ZeroGradReduction>> ZeroGradReduction::create(
    std::shared_ptr<comm::ProcessGroup> pg, nn::Module& model, const nn::ParameterStore& store,
    core::DType dtype, const ZeroShard& shard, const core::Stream& stream,
    const ZeroGradReductionOptions& options) {
  std::unique_ptr<ZeroGradReduction> r(new ZeroGradReduction);
  r->pg_ = std::move(pg);
  r->options_ = options;
  r->store_ = store;
  r->dtype_ = dtype;
  r->wire_dtype_ = options.communication_dtype.value_or(dtype);
  if (r->wire_dtype_ != dtype && options.shard_is_flat_buffer) {
    return absl::InvalidArgumentError(
        "low_level_zero: communication_dtype with shard_is_flat_buffer (nothing is reduced)");
  }
  r->shard_ = shard;
  r->numel_ = store.table().buffer_numel(dtype);
  r->stream_ = stream;
  ZeroGradReduction* raw = r.get();  // the reducer is owned by it: it never outlives it
  COLOSSAL_ASSIGN_OR_RETURN(
      r->reducer_,
      BucketedGradReducer::create(
          "low_level_zero", model, store, make_grad_buckets(store.table(), options.bucket_bytes),
          [raw](size_t b, const comm::CollectiveOptions& o) { return raw->launch(b, o); },
          options.overlap_communication));
  if (options.stage != 2) return r;
  const int world = r->pg_->size();
  for (const GradBucket& bucket : r->reducer_->buckets()) {
    Bucket sc;
    for (int j = 0; j < world; ++j) {
      int64_t lo = 0, cnt = 0;
      r->part(bucket.offset, bucket.offset + bucket.count, j, &lo, &cnt);
      sc.chunk = std::max(sc.chunk, cnt);
      if (j == r->pg_->rank()) {
        sc.mine_lo = lo;
        sc.mine_n = cnt;
      }
      if (cnt == bucket.count && options.reduce_owned_buckets) sc.owner = j;
    }
    r->buckets_.push_back(sc);
  }
  if (options.shard_is_flat_buffer) {
    r->grad_shard_ = store.flat_grads(dtype);  // the whole buffer
    return r;
  }
  r->partitioned_ = true;
  COLOSSAL_ASSIGN_OR_RETURN(r->grad_shard_, zero_filled(shard.size, dtype, stream));
  const nn::ParameterTable& table = store.table();
  r->bucket_of_.assign(table.size(), -1);
  for (const GradBucket& bucket : r->reducer_->buckets()) {
    std::vector<size_t> own;
    for (const std::string& name : bucket.params) {
      const nn::ParameterEntry* e = table.find(name);
      if (e == nullptr) return absl::InternalError(absl::StrCat("low_level_zero: no ", name));
      own.push_back(static_cast<size_t>(e - table.entries().data()));
      r->bucket_of_[own.back()] = static_cast<int>(r->bucket_params_.size());
    }
    r->bucket_params_.push_back(std::move(own));
  }
  r->live_.resize(r->bucket_params_.size());
  r->launched_.assign(r->bucket_params_.size(), 0);
  r->self_ = std::make_shared<ZeroGradReduction*>(raw);
  std::weak_ptr<ZeroGradReduction*> self = r->self_;
  r->store_.set_fetcher([self](size_t index, bool want_grad) -> absl::Status {
    const std::shared_ptr<ZeroGradReduction*> alive = self.lock();
    return alive ? (*alive)->fetch_grad(index, want_grad) : absl::OkStatus();
  });
  return r;
}

ZeroGradReduction::~ZeroGradReduction() {
  // Finish unfinished collectives before the buffers they use go away.
  if (reducer_ != nullptr) wait(core::Stream::cpu()).IgnoreError();
  if (!partitioned_) return;
  self_.reset();  // the store's fetcher answers nothing from here on
  for (size_t b = 0; b < live_.size(); ++b) take_memory(b);
}

absl::Status ZeroGradReduction::fetch_grad(size_t index, bool want_grad) {
  // Values are the store's flat buffer: a missing one is for the handle to report.
  if (!want_grad || index >= bucket_of_.size() || bucket_of_[index] < 0) return absl::OkStatus();
  if (!backward_stream_.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "low_level_zero stage 2 keeps only this rank's shard of the gradients: parameter \"",
        store_.table().entries()[index].name,
        "\" has a whole gradient only during a backward (Booster::backward)"));
  }
  const size_t b = static_cast<size_t>(bucket_of_[index]);
  if (launched_[b]) {
    // Its memory went to the collective: a new one would be dropped unread.
    return absl::FailedPreconditionError(absl::StrCat(
        "low_level_zero stage 2: parameter \"", store_.table().entries()[index].name,
        "\" is written after its gradient bucket was reduced (the backward of the module that "
        "declares it had finished), so that part of its gradient would be lost: a parameter "
        "used by a module whose backward runs later must be declared by the module that "
        "uses it last in the backward"));
  }
  return give_memory(b, *backward_stream_);
}

absl::Status ZeroGradReduction::give_memory(size_t b, const core::Stream& on) {
  if (live_[b].defined()) return absl::OkStatus();
  const GradBucket& bucket = reducer_->buckets()[b];
  core::Tensor memory;
  if (in_shard(b)) {
    // This rank's own bucket in the first backward since zero_grad: the
    // backward writes into the shard's (zero) range and the reduce averages
    // it there, so the bucket needs no memory and its part no addition.
    const int64_t at = bucket.offset - shard_.begin;
    COLOSSAL_ASSIGN_OR_RETURN(memory, grad_shard_.slice(at, at + bucket.count));
  } else {
    COLOSSAL_ASSIGN_OR_RETURN(memory, zero_filled(bucket.count, dtype_, on));
  }
  buffer_stream_ = on;  // the stream whose order retires it (retire_beyond)
  for (size_t index : bucket_params_[b]) {
    const nn::ParameterEntry& e = store_.table().entries()[index];
    COLOSSAL_ASSIGN_OR_RETURN(
        core::Tensor view,
        core::Tensor::from_storage(memory.storage(),
                                   memory.byte_offset() + (e.offset - bucket.offset) * esize(),
                                   e.shape, e.dtype));
    COLOSSAL_RETURN_IF_ERROR(store_.set_grad(index, std::move(view)));
  }
  live_[b] = std::move(memory);
  return absl::OkStatus();
}

core::Tensor ZeroGradReduction::take_memory(size_t b) {
  for (size_t index : bucket_params_[b]) store_.set_grad(index, core::Tensor()).IgnoreError();
  return std::move(live_[b]);
}

void ZeroGradReduction::part(int64_t a, int64_t e, int j, int64_t* lo, int64_t* n) const {
  const ZeroShard sj = zero_shard(numel_, pg_->size(), j);
  *lo = std::max(a, sj.begin);
  *n = std::max<int64_t>(0, std::min(e, sj.end) - *lo);
}

absl::StatusOr<comm::WorkPtr> ZeroGradReduction::launch(size_t b,
                                                        const comm::CollectiveOptions& o) {
  absl::StatusOr<comm::WorkPtr> w = launch_bucket(b, o);
  if (w.ok()) return w;
  const std::vector<GradBucket>& buckets = reducer_->buckets();
  return core::annotate(w.status(),
                        absl::StrCat(options_.stage == 1 ? "all-reducing" : "reduce-scattering",
                                     " gradient bucket ", b, " of ", buckets.size(), " (",
                                     buckets[b].params.front(), " ...)"));
}

// Stage 1: all-reduce the bucket's range of the flat buffer in place. Stage
// 2: the bucket's memory (zeros for a bucket the backward never wrote) is
// reduced in place to its owner, or packed into a send buffer of the ranks'
// parts and reduce-scattered, all enqueued on the input stream (after the
// backward that wrote the gradients); the collective runs after it. The
// bucket's parameters lose their gradient views.
absl::StatusOr<comm::WorkPtr> ZeroGradReduction::launch_bucket(size_t b,
                                                               const comm::CollectiveOptions& o) {
  const GradBucket& bucket = reducer_->buckets()[b];
  comm::CollectiveOptions co = o;
  if (stream_.is_cuda() && (!co.stream.has_value() || !co.stream->is_cuda())) co.stream = stream_;
  const core::Stream in = co.stream.has_value() ? *co.stream : core::Stream::cpu();
  const bool converts = wire_dtype_ != dtype_;
  // Issues `f`'s collective, keeps it in flight and retires older ones.
  const auto issue = [&](InFlight f, absl::StatusOr<comm::WorkPtr> w) -> absl::StatusOr<comm::WorkPtr> {
    if (!w.ok()) return w;
    f.work = *w;
    buffer_stream_ = in;
    pending_.push_back(std::move(f));
    COLOSSAL_RETURN_IF_ERROR(retire_beyond(kInFlightBuckets, in));
    return w;
  };
  if (options_.stage == 1 || options_.shard_is_flat_buffer) {
    COLOSSAL_ASSIGN_OR_RETURN(
        const core::Tensor range,
        store_.flat_grads(dtype_).slice(bucket.offset, bucket.offset + bucket.count));
    if (!converts) return pg_->all_reduce(range, comm::ReduceOp::kAvg, co);
    // The converted copy is averaged; land() writes it back.
    InFlight f;
    f.bucket = b;
    COLOSSAL_ASSIGN_OR_RETURN(f.wire, converted(range, wire_dtype_, in));
    absl::StatusOr<comm::WorkPtr> w = pg_->all_reduce(f.wire, comm::ReduceOp::kAvg, co);
    return issue(std::move(f), std::move(w));
  }
  COLOSSAL_RETURN_IF_ERROR(give_memory(b, in));
  launched_[b] = 1;
  InFlight f;
  f.bucket = b;
  f.grads = take_memory(b);
  f.in_shard = in_shard(b);
  const Bucket& sc = buckets_[b];
  if (sc.owner >= 0) {
    // The owner's memory (converting: its converted copy) receives the
    // average (the others' is left unspecified); land() adds it to the
    // owner's shard.
    if (converts) {
      COLOSSAL_ASSIGN_OR_RETURN(f.wire, converted(f.grads, wire_dtype_, in));
      f.grads = core::Tensor();  // back to the pool, after the conversion on `in`
    }
    const core::Tensor& reduced = converts ? f.wire : f.grads;
    absl::StatusOr<comm::WorkPtr> w =
        pg_->reduce(reduced, comm::ReduceOp::kAvg, sc.owner, co);
    return issue(std::move(f), std::move(w));
  }
  const int world = pg_->size();
  COLOSSAL_ASSIGN_OR_RETURN(f.send, core::Tensor::empty({std::max<int64_t>(sc.chunk * world, 1)},
                                                        wire_dtype_, in));
  COLOSSAL_ASSIGN_OR_RETURN(f.recv,
                            core::Tensor::empty({std::max<int64_t>(sc.chunk, 1)}, wire_dtype_, in));
  buffer_stream_ = in;
  COLOSSAL_RETURN_IF_ERROR(f.send.set_zero(in));
  for (int j = 0; j < world; ++j) {
    int64_t lo = 0, n = 0;
    part(bucket.offset, bucket.offset + bucket.count, j, &lo, &n);
    if (n == 0) continue;
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dst, f.send.slice(j * sc.chunk, j * sc.chunk + n));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor src,
                              f.grads.slice(lo - bucket.offset, lo - bucket.offset + n));
    COLOSSAL_RETURN_IF_ERROR(
        converts ? cast_on(dst, src, in) : dst.copy_from(src, in));
  }
  f.grads = core::Tensor();  // packed: back to the pool, after the copies on `in`
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor recv, f.recv.slice(0, sc.chunk));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor send, f.send.slice(0, sc.chunk * world));
  absl::StatusOr<comm::WorkPtr> w = pg_->reduce_scatter(recv, send, comm::ReduceOp::kAvg, co);
  return issue(std::move(f), std::move(w));
}

absl::Status ZeroGradReduction::land(const InFlight& f, const core::Stream& on) {
  const GradBucket& bucket = reducer_->buckets()[f.bucket];
  if (options_.stage == 1) {
    COLOSSAL_ASSIGN_OR_RETURN(
        const core::Tensor range,
        store_.flat_grads(dtype_).slice(bucket.offset, bucket.offset + bucket.count));
    return cast_on(range, f.wire, on);
  }
  const Bucket& sc = buckets_[f.bucket];
  if (sc.mine_n == 0 || f.in_shard) return absl::OkStatus();
  // A bucket reduced in place to this rank: its average is in its memory (or
  // its converted copy); else in the receive buffer. All in the wire dtype.
  const core::Tensor& reduced = f.wire.defined() ? f.wire : f.grads;
  const int64_t first = reduced.defined() ? sc.mine_lo - bucket.offset : 0;
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor mine,
                            (reduced.defined() ? reduced : f.recv).slice(first, first + sc.mine_n));
  const int64_t at = sc.mine_lo - shard_.begin;
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor dst, grad_shard_.slice(at, at + sc.mine_n));
  core::Tensor addend = mine;
  if (wire_dtype_ != dtype_) {
    COLOSSAL_ASSIGN_OR_RETURN(addend, core::Tensor::empty({sc.mine_n}, dtype_, on));
    COLOSSAL_RETURN_IF_ERROR(cast_on(addend, mine, on));
  }
  return core::annotate(core::ops::add(on, dst, dst, addend), "accumulating the gradient shard");
}

absl::Status ZeroGradReduction::retire_beyond(size_t keep, const core::Stream& on) {
  // Only where the buffers were allocated: there the pool reuses them after
  // the addition, in the stream's order (wait() frees the rest otherwise).
  if (on.is_cuda() != buffer_stream_.is_cuda() ||
      (on.is_cuda() && on.handle() != buffer_stream_.handle())) {
    return absl::OkStatus();
  }
  while (pending_.size() > keep) {
    const InFlight& f = pending_.front();
    COLOSSAL_RETURN_IF_ERROR(f.work->wait_on(on));  // CUDA: the stream waits; the CPU: the host
    COLOSSAL_RETURN_IF_ERROR(land(f, on));
    pending_.pop_front();
    retired_on_ = on;
  }
  most_in_flight_ = std::max<int64_t>(most_in_flight_, static_cast<int64_t>(pending_.size()));
  return absl::OkStatus();
}

absl::Status ZeroGradReduction::wait(const core::Stream& on) {
  if (!on.is_cuda()) {
    // The host waits (CPU training, a destructor, a failed backward).
    absl::Status s = reducer_->wait_all(core::Stream::cpu());
    if (!s.ok()) {
      pending_.clear();  // the host waited: nothing uses the buffers
      return s;
    }
  } else {
    COLOSSAL_RETURN_IF_ERROR(reducer_->wait_all(on));
  }
  // Where the additions run: `on`, or for a host wait on device tensors the
  // reduction's own stream.
  const core::Stream add_on = !on.is_cuda() && stream_.is_cuda() ? stream_ : on;
  absl::Status first;
  // The parts retired during the backward were added on its stream.
  if (retired_on_.has_value()) order_after(add_on, *retired_on_);
  retired_on_.reset();
  for (const InFlight& f : pending_) {
    const absl::Status s = land(f, add_on);
    if (first.ok() && !s.ok()) first = s;
  }
  // The buffers go back to the pool on their allocation stream: it must
  // first wait for the additions (and so the collectives) done on `add_on`.
  if (!pending_.empty()) order_after(buffer_stream_, add_on);
  pending_.clear();
  return first;
}

absl::Status ZeroGradReduction::begin_backward(const core::Stream& compute, bool sync) {
  COLOSSAL_RETURN_IF_ERROR(wait(compute));
  COLOSSAL_RETURN_IF_ERROR(reducer_->begin_backward(compute, sync));
  if (partitioned_) {
    std::fill(launched_.begin(), launched_.end(), 0);
    backward_stream_ = compute;
    first_since_zero_ = !shard_written_;
    shard_written_ = true;
  }
  return absl::OkStatus();
}

bool ZeroGradReduction::in_shard(size_t b) const {
  // (Converting, the average arrives in another dtype: it is added.)
  return first_since_zero_ && buckets_[b].owner == pg_->rank() && wire_dtype_ == dtype_;
}

absl::Status ZeroGradReduction::end_backward(bool ok) {
  const absl::Status s = reducer_->end_backward(ok);
  backward_stream_.reset();
  if (!ok) wait(core::Stream::cpu()).IgnoreError();
  // After a failed backward (or launch), buckets never reduced: their
  // gradients are dropped with the step.
  for (size_t b = 0; b < live_.size(); ++b) {
    if (live_[b].defined()) take_memory(b);
  }
  return s;
}

absl::Status ZeroGradReduction::zero_grad() {
  // (shard_is_flat_buffer: the plugin zeroes the flat buffer, or its optimizer.)
  if (!partitioned_) return absl::OkStatus();
  shard_written_ = false;
  return grad_shard_.set_zero(stream_);
}

core::Tensor ZeroGradReduction::grad_shard() const {
  return options_.stage == 2 ? grad_shard_ : core::Tensor();
}

absl::StatusOr<core::Tensor> ZeroGradReduction::slice_grads() const {
  if (options_.stage == 1) return store_.flat_grads(dtype_).slice(shard_.begin, shard_.end);
  return grad_shard_.slice(0, shard_.end - shard_.begin);
}

void ZeroGradReduction::track(comm::WorkPtr work) { reducer_->track(std::move(work)); }
int64_t ZeroGradReduction::issued() const { return reducer_->issued(); }
int64_t ZeroGradReduction::issued_in_hooks() const { return reducer_->issued_in_hooks(); }

}  // namespace colossal::parallel
