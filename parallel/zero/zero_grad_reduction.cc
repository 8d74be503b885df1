#include "parallel/zero/zero_grad_reduction.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bazel/cuda_config.h"
#include "core/device/device.h"
#include "core/status/status.h"
#include "kernels/elementwise/elementwise.h"

namespace colossal::parallel {

struct ZeroGradReduction::Bucket {
  int64_t chunk = 0;                // elements per rank in the reduce-scatter
  int64_t mine_lo = 0, mine_n = 0;  // this rank's part of the bucket
  // The one rank whose slice holds the whole bucket (reduce_owned_buckets), else -1.
  int owner = -1;
};

struct ZeroGradReduction::InFlight {
  size_t bucket = 0;
  core::Tensor send, recv;  // undefined for a bucket reduced in place
};

namespace {

// dst[i] += src[i], i < n, on `on`'s device (the host for the CPU stream).
absl::Status add_into(void* dst, const void* src, int64_t n, core::DType dtype,
                      const core::Stream& on) {
  kernels::KernelStatus s;
  if (!on.is_cuda()) {
    s = kernels::elementwise::binary_cpu(dst, dst, src, n, dtype,
                                         kernels::elementwise::BinaryOp::kAdd);
  } else {
#if COLOSSAL_WITH_CUDA
    core::DeviceGuard guard(on.device());
    s = kernels::elementwise::binary_cuda(dst, dst, src, n, dtype,
                                          kernels::elementwise::BinaryOp::kAdd, on.handle());
#else
    s = kernels::KernelStatus::unsupported("CUDA work in a build without CUDA");
#endif
  }
  return core::from_kernel_status(s, "accumulating the gradient shard");
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
  // Otherwise the shard buffer is made when a second backward first needs it
  // (fold_into_shard).
  if (options.shard_is_flat_buffer) r->grad_shard_ = store.flat_grads(dtype);  // the whole buffer
  return r;
}

ZeroGradReduction::~ZeroGradReduction() {
  // Finish unfinished collectives before the buffers they use go away.
  if (reducer_ != nullptr) wait(core::Stream::cpu()).IgnoreError();
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

// Stage 1 (and owned stage-2 buckets): all-reduce the bucket's range of the
// flat buffer in place. Stage 2: pack the ranks' parts into a send buffer,
// zero the range, and reduce-scatter, all enqueued on the input stream (after
// the backward that wrote the gradients); the collective runs after it.
absl::StatusOr<comm::WorkPtr> ZeroGradReduction::launch_bucket(size_t b,
                                                               const comm::CollectiveOptions& o) {
  const GradBucket& bucket = reducer_->buckets()[b];
  const core::Tensor flat = store_.flat_grads(dtype_);
  comm::CollectiveOptions co = o;
  if (stream_.is_cuda() && (!co.stream.has_value() || !co.stream->is_cuda())) co.stream = stream_;
  const core::Stream in = co.stream.has_value() ? *co.stream : core::Stream::cpu();
  if (options_.stage == 1 || buckets_[b].owner >= 0) {
    comm::Buffer buffer;
    buffer.data = static_cast<char*>(flat.raw_data()) + bucket.offset * esize();
    buffer.count = bucket.count;
    buffer.dtype = dtype_;
    buffer.device = flat.device();
    // Stage 2: the owner's range receives the average (the others' are
    // left unspecified); wait() leaves it there or adds it to the shard.
    absl::StatusOr<comm::WorkPtr> w =
        options_.stage == 1 ? pg_->all_reduce(buffer, comm::ReduceOp::kAvg, co)
                            : pg_->reduce(buffer, comm::ReduceOp::kAvg, buckets_[b].owner, co);
    if (w.ok() && options_.stage == 2 && !options_.shard_is_flat_buffer) {
      pending_.push_back(InFlight{b, {}, {}});
    }
    return w;
  }
  const Bucket& sc = buckets_[b];
  const int world = pg_->size();
  InFlight f{b, {}, {}};
  COLOSSAL_ASSIGN_OR_RETURN(f.send, core::Tensor::empty({std::max<int64_t>(sc.chunk * world, 1)},
                                                        dtype_, in));
  COLOSSAL_ASSIGN_OR_RETURN(f.recv, core::Tensor::empty({std::max<int64_t>(sc.chunk, 1)}, dtype_, in));
  buffer_stream_ = in;
  COLOSSAL_RETURN_IF_ERROR(f.send.set_zero(in));
  for (int j = 0; j < world; ++j) {
    int64_t lo = 0, n = 0;
    part(bucket.offset, bucket.offset + bucket.count, j, &lo, &n);
    if (n == 0) continue;
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dst, f.send.slice(j * sc.chunk, j * sc.chunk + n));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor src, flat.slice(lo, lo + n));
    COLOSSAL_RETURN_IF_ERROR(dst.copy_from(src, in));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor range,
                            flat.slice(bucket.offset, bucket.offset + bucket.count));
  COLOSSAL_RETURN_IF_ERROR(range.set_zero(in));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor recv, f.recv.slice(0, sc.chunk));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor send, f.send.slice(0, sc.chunk * world));
  absl::StatusOr<comm::WorkPtr> w = pg_->reduce_scatter(recv, send, comm::ReduceOp::kAvg, co);
  if (w.ok()) pending_.push_back(std::move(f));
  return w;
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
  const core::Tensor flat = store_.flat_grads(dtype_);
  // The first backward since zero_grad leaves its averaged slice in the flat
  // buffer: nothing to add or zero for buckets reduced in place, a copy
  // of this rank's received part for the others.
  const bool in_place = !shard_summed_ && !slice_in_flat_ && !pending_.empty();
  if (!in_place && !pending_.empty() && !grad_shard_.defined()) {
    // begin_backward folds a slice left in the flat buffer before the next
    // backward issues anything; parts to add and no shard break that order.
    pending_.clear();
    return absl::InternalError(
        "low_level_zero: stage-2 parts to add before the gradient shard exists");
  }
  absl::Status first;
  for (const InFlight& f : pending_) {
    const Bucket& sc = buckets_[f.bucket];
    const GradBucket& bucket = reducer_->buckets()[f.bucket];
    if (in_place) {
      if (sc.owner >= 0 || sc.mine_n == 0) continue;
      absl::StatusOr<core::Tensor> dst = flat.slice(sc.mine_lo, sc.mine_lo + sc.mine_n);
      absl::StatusOr<core::Tensor> src = f.recv.slice(0, sc.mine_n);
      const absl::Status s = !dst.ok()   ? dst.status()
                             : !src.ok() ? src.status()
                                         : dst->copy_from(*src, add_on);
      if (first.ok() && !s.ok()) first = s;
      continue;
    }
    // In-place buckets: the averaged gradients are in the flat buffer.
    const char* src = sc.owner >= 0 ? static_cast<const char*>(flat.raw_data()) +
                                          bucket.offset * esize()
                                    : static_cast<const char*>(f.recv.raw_data());
    if (sc.mine_n > 0) {
      char* dst =
          static_cast<char*>(grad_shard_.raw_data()) + (sc.mine_lo - shard_.begin) * esize();
      const absl::Status s = add_into(dst, src, sc.mine_n, dtype_, add_on);
      if (first.ok() && !s.ok()) first = s;
    }
    if (sc.owner >= 0) {  // the next backward accumulates afresh
      absl::StatusOr<core::Tensor> range = flat.slice(bucket.offset, bucket.offset + bucket.count);
      const absl::Status s = range.ok() ? range->set_zero(add_on) : range.status();
      if (first.ok() && !s.ok()) first = s;
    }
  }
  // The buffers go back to the pool on their allocation stream: it must
  // first wait for the additions (and so the collectives) done on `add_on`.
  const bool buffers = std::any_of(pending_.begin(), pending_.end(),
                                   [](const InFlight& f) { return f.send.defined(); });
  if (buffers && buffer_stream_.is_cuda() && buffer_stream_.handle() != add_on.handle()) {
    absl::StatusOr<core::Event> done = core::Event::create(add_on.device());
    if (done.ok()) {
      core::wait_stream(buffer_stream_, add_on, *done);
    } else {
      add_on.synchronize();  // no event: the host waits instead
    }
  }
  pending_.clear();
  if (in_place) slice_in_flat_ = true;
  return first;
}

absl::Status ZeroGradReduction::fold_into_shard(const core::Stream& on) {
  if (!grad_shard_.defined()) {
    COLOSSAL_ASSIGN_OR_RETURN(grad_shard_, zero_filled(shard_.size, dtype_, stream_));
    if (on.is_cuda() && on.handle() != stream_.handle()) {
      COLOSSAL_ASSIGN_OR_RETURN(core::Event made, core::Event::create(stream_.device()));
      core::wait_stream(on, stream_, made);  // the zeroing before the copy below
    }
  }
  core::Tensor flat = store_.flat_grads(dtype_);
  const int64_t n = shard_.end - shard_.begin;
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dst, grad_shard_.slice(0, n));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor src, flat.slice(shard_.begin, shard_.end));
  COLOSSAL_RETURN_IF_ERROR(dst.copy_from(src, on));
  // Other ranks' ranges of the buckets reduced in place hold averages or this
  // rank's own gradients: the next backward accumulates afresh.
  COLOSSAL_RETURN_IF_ERROR(flat.set_zero(on));
  slice_in_flat_ = false;
  shard_summed_ = true;
  return absl::OkStatus();
}

absl::Status ZeroGradReduction::begin_backward(const core::Stream& compute, bool sync) {
  COLOSSAL_RETURN_IF_ERROR(wait(compute));
  // A second backward before zero_grad (gradient accumulation): the first's
  // averaged slice moves into the shard, to which this one's parts are added.
  if (slice_in_flat_) COLOSSAL_RETURN_IF_ERROR(fold_into_shard(compute));
  return reducer_->begin_backward(compute, sync);
}

absl::Status ZeroGradReduction::end_backward(bool ok) {
  const absl::Status s = reducer_->end_backward(ok);
  if (!ok) wait(core::Stream::cpu()).IgnoreError();
  return s;
}

absl::Status ZeroGradReduction::zero_grad() {
  slice_in_flat_ = false;  // the optimizer zeroed the flat buffer
  if (!shard_summed_) return absl::OkStatus();
  shard_summed_ = false;
  return grad_shard_.set_zero(stream_);
}

core::Tensor ZeroGradReduction::grad_shard() const {
  if (options_.stage != 2) return core::Tensor();
  if (options_.shard_is_flat_buffer || shard_summed_) return grad_shard_;
  // This rank's range of the flat buffer: the averaged slice of the one
  // backward since zero_grad, or zeros before any.
  absl::StatusOr<core::Tensor> mine = store_.flat_grads(dtype_).slice(shard_.begin, shard_.end);
  return mine.ok() ? *std::move(mine) : core::Tensor();
}

absl::StatusOr<core::Tensor> ZeroGradReduction::slice_grads() const {
  if (options_.stage == 1) return store_.flat_grads(dtype_).slice(shard_.begin, shard_.end);
  return grad_shard().slice(0, shard_.end - shard_.begin);
}

void ZeroGradReduction::track(comm::WorkPtr work) { reducer_->track(std::move(work)); }
int64_t ZeroGradReduction::issued() const { return reducer_->issued(); }
int64_t ZeroGradReduction::issued_in_hooks() const { return reducer_->issued_in_hooks(); }

}  // namespace colossal::parallel
