// colossal::parallel — ZeRO's gradient side: the gradients reduced over a
// data-parallel group in buckets issued from the module backward hooks
// (parallel/common/grad_buckets.h), while the backward goes on.
//
//   stage 1: each bucket of the store's flat gradient buffer is all-reduced
//            (average) in place; no_sync accumulates locally and the next
//            synced backward reduces the sum.
//   stage 2: the gradients are partitioned (ZeRO-2): the store has no flat
//            gradient buffer (the plugin materializes it without one,
//            ParameterStore::Gradients::kPlugin, or releases it at boost,
//            release_grads). A bucket's gradients get memory when the
//            backward first asks for one of them (the store's fetcher), zeroed,
//            and lose it when the bucket is reduced: each bucket is
//            reduce-scattered (average) and this rank adds its part to its
//            gradient shard [shard.size], which accumulates over the backwards
//            until zero_grad(). Between backwards only the shard exists: the
//            gradient memory of a step is the shard plus the buckets in
//            flight, not the model's size. (In the first backward since
//            zero_grad, a bucket reduced in place to this rank, below, is the
//            shard's own range: no memory, no addition.)
//
// One code path for both devices: buffers are tensors on the gradients'
// device, collectives take the stream their input was written on, and the
// received parts are added on the stream that waits for them (the CPU stream
// waits on the host). Two policies are device choices:
//   * reduce_owned_buckets (CUDA): a stage-2 bucket inside one rank's slice
//     is reduced (average) in place to that rank: no send/receive buffers,
//     each rank sends about its size once (NCCL's reduce) instead of (W-1)
//     sizes of a reduce-scatter padded for ranks with no part in it, or the
//     2(W-1)/W of an all-reduce. The CPU keeps reduce-scatter for every bucket
//     (its tests pin the sums bit for bit);
//   * shard_is_flat_buffer (CUDA at world size 1): nothing is reduced, and the
//     store keeps its flat gradient buffer, which is the shard and
//     accumulates as stage 1's does.
// A bucket's memory and its send/receive buffers come from the allocator on
// the backward's stream and go back once its part is added (none exist
// during the forward). Stage 2 adds a bucket's part while the backward goes
// on once four newer buckets were launched (the backward's stream waits for
// its collective there, long done unless the network is slower than the
// backward), so a backward holds about five buckets being reduced, not all.
//
//   COLOSSAL_ASSIGN_OR_RETURN(auto grads, ZeroGradReduction::create(pg, model, store, dtype,
//                                                                  shard, stream, options));
//   stage 2 (not shard_is_flat_buffer): store.release_grads() once the rest of boost
//   succeeded, unless the store was allocated without gradients
//   per backward: grads->begin_backward(compute, sync); model.backward(...); grads->end_backward(ok);
//   before the step: grads->wait(step_stream); then grads->slice_grads() are final.
#ifndef COLOSSAL_PARALLEL_ZERO_ZERO_GRAD_REDUCTION_H_
#define COLOSSAL_PARALLEL_ZERO_ZERO_GRAD_REDUCTION_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/process_group/process_group.h"
#include "core/device/stream.h"
#include "core/dtype/dtype.h"
#include "core/tensor/tensor.h"
#include "nn/module/module.h"
#include "nn/module/parameter.h"
#include "parallel/common/grad_buckets.h"
#include "parallel/zero/zero_shard.h"

namespace colossal::parallel {

// `n` zeroed elements of `dtype` on `stream` (at least one allocated, so that
// raw_data() is a valid pointer on the device): ZeRO's shard buffers.
absl::StatusOr<core::Tensor> zero_filled(int64_t n, core::DType dtype, const core::Stream& stream);

struct ZeroGradReductionOptions {
  int stage = 1;                          // 1 or 2
  int64_t bucket_bytes = 12 << 20;        // bucket cap, bytes of the gradient dtype
  bool reduce_owned_buckets = false;  // see the file comment
  bool shard_is_flat_buffer = false;      // see the file comment (world size 1)
  // false: buckets are reduced when the backward returns, none beside it
  // (BucketedGradReducer's overlap; Colossal-AI's overlap_communication).
  bool overlap_communication = true;
  // The dtype the gradients cross between ranks in (Colossal-AI's
  // communication_dtype); unset: the gradients' own. Another one converts
  // each bucket into a buffer of it before its collective and the result back
  // after: stage 1 writes the average back into the flat buffer, stage 2 adds
  // it to the shard (both in the gradients' dtype, so the conversion rounds
  // once each way). float32 for 16-bit gradients sums and averages the ranks'
  // gradients in float32 (twice the bytes); a 16-bit one for float32
  // gradients halves the bytes at 16-bit precision. Not with
  // shard_is_flat_buffer (nothing is reduced there).
  std::optional<core::DType> communication_dtype;
};

class ZeroGradReduction {
 public:
  // Over `store`'s gradients of `dtype` (one dtype per model), hooked into
  // `model`'s modules. `stream`: the default input stream of the collectives
  // (CUDA: the optimizer's; the CPU stream otherwise). Stage 2 allocates the
  // zeroed shard [shard.size] on it and, unless shard_is_flat_buffer,
  // becomes the store's fetcher: the store's gradients are then this
  // object's to give, once the caller released them (see the file comment).
  static absl::StatusOr<std::unique_ptr<ZeroGradReduction>> create(
      std::shared_ptr<comm::ProcessGroup> pg, nn::Module& model, const nn::ParameterStore& store,
      core::DType dtype, const ZeroShard& shard, const core::Stream& stream,
      const ZeroGradReductionOptions& options);
  ~ZeroGradReduction();

  // Around the model's backward (sync false: accumulate locally, stage 1
  // only). begin_backward first waits (on `compute`) for the previous
  // backward's collectives, whose results this one adds to. Stage 2's
  // gradients have memory only in between: a layer asking for one outside,
  // or for one whose bucket was already reduced in this backward (a
  // parameter written after its declaring module's backward hook, whose late
  // part would be lost), gets FailedPrecondition naming the parameter.
  absl::Status begin_backward(const core::Stream& compute, bool sync);
  absl::Status end_backward(bool ok);
  // Waits for the issued collectives on `on` (the CPU stream: the host waits)
  // and lands the buckets still in flight there (stage 2 adds their parts to
  // the shard; converting stage 1 writes their averages back). Errors: the
  // first collective's, addition's or conversion's.
  absl::Status wait(const core::Stream& on);
  // Stage 2: zeroes the shard (shard_is_flat_buffer: the flat buffer, which
  // its owner zeroes).
  absl::Status zero_grad();

  // This rank's averaged gradients of [shard.begin, shard.end) once wait()
  // returned, summed over the backwards since zero_grad(): the flat buffer's
  // range (stage 1) or the shard's head (stage 2).
  absl::StatusOr<core::Tensor> slice_grads() const;
  // Stage 2: where those gradients are, a view of dtype with at least
  // shard.end - shard.begin elements (the shard: [shard.size], the tail past
  // shard.end padding; shard_is_flat_buffer: the flat buffer). Undefined for
  // stage 1.
  core::Tensor grad_shard() const;
  // Waited for (on the host) with the reductions before buffers go: the
  // step's own collectives (the parameter all_gather).
  void track(comm::WorkPtr work);
  int64_t issued() const;
  int64_t issued_in_hooks() const;
  // Stage 2: the most buckets that waited for their collectives at once
  // during a backward (at most four once the next is launched).
  int64_t most_in_flight() const { return most_in_flight_; }

 private:
  struct Bucket;  // per-bucket reduce-scatter geometry
  struct InFlight;
  ZeroGradReduction() = default;
  absl::StatusOr<comm::WorkPtr> launch(size_t b, const comm::CollectiveOptions& o);
  absl::StatusOr<comm::WorkPtr> launch_bucket(size_t b, const comm::CollectiveOptions& o);
  // Stage 2: the fetcher's answer for parameter `index` (see begin_backward).
  absl::Status fetch_grad(size_t index, bool want_grad);
  // Stage 2: bucket `b`'s gradient memory, zeroed on `on`, its parameters'
  // gradients views into it (once per backward).
  absl::Status give_memory(size_t b, const core::Stream& on);
  // Stage 2: whether bucket `b` is reduced in place to this rank in the first
  // backward since zero_grad: its gradients are then the shard's range.
  bool in_shard(size_t b) const;
  // Stage 2: bucket `b`'s parameters lose their gradient views; returns its memory.
  core::Tensor take_memory(size_t b);
  // Lands in-flight bucket `f` on `on` (its collective done there): stage 2
  // adds its part to the shard; stage 1 (converting) writes its average back
  // into the flat buffer.
  absl::Status land(const InFlight& f, const core::Stream& on);
  // Retires the oldest in-flight buckets beyond `keep`: `on` (the stream
  // their buffers came from) waits for each one's collective and lands it;
  // the buffers go back to the pool in `on`'s order.
  absl::Status retire_beyond(size_t keep, const core::Stream& on);
  // Rank j's part [lo, lo + n) of flat range [a, e).
  void part(int64_t a, int64_t e, int j, int64_t* lo, int64_t* n) const;
  int64_t esize() const { return static_cast<int64_t>(core::dtype_size(dtype_)); }

  std::shared_ptr<comm::ProcessGroup> pg_;
  ZeroGradReductionOptions options_;
  nn::ParameterStore store_;
  core::DType dtype_ = core::DType::kF32;
  core::DType wire_dtype_ = core::DType::kF32;  // communication_dtype, or dtype_
  ZeroShard shard_;
  int64_t numel_ = 0;
  core::Stream stream_;
  std::shared_ptr<BucketedGradReducer> reducer_;
  std::vector<Bucket> buckets_;
  bool partitioned_ = false;       // stage 2 without shard_is_flat_buffer
  // Issued, not yet landed: stage 2's buckets, and stage 1's when converting.
  std::deque<InFlight> pending_;
  core::Stream buffer_stream_;    // where the pending buffers were allocated
  std::optional<core::Stream> retired_on_;  // where retire_beyond added parts since wait()
  int64_t most_in_flight_ = 0;
  bool shard_written_ = false;    // a backward added to the shard since zero_grad
  bool first_since_zero_ = false;  // this backward is the first since zero_grad
  core::Tensor grad_shard_;  // stage 2: [shard.size] (shard_is_flat_buffer: the flat buffer)
  // Partitioned stage 2, per bucket: its parameters' table indices, and its
  // gradient memory while the backward writes it.
  std::vector<std::vector<size_t>> bucket_params_;
  std::vector<int> bucket_of_;  // per table entry (-1: another dtype)
  std::vector<core::Tensor> live_;
  std::vector<char> launched_;  // per bucket: its collective issued in this backward
  std::optional<core::Stream> backward_stream_;  // set between begin_ and end_backward
  std::shared_ptr<ZeroGradReduction*> self_;     // the fetcher's weak link to this object
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_ZERO_ZERO_GRAD_REDUCTION_H_
