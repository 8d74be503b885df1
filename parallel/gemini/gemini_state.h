// The gemini plugin's state, shared by its files: gemini_chunks.cc (tiers,
// gather / release, moves), gemini_grads.cc (gradient buffers, reduction),
// gemini_plugin.cc (materialize, the hooks), gemini_step.cc (the step),
// gemini_checkpoint.cc (state dicts).
#ifndef COLOSSAL_PARALLEL_GEMINI_GEMINI_STATE_H_
#define COLOSSAL_PARALLEL_GEMINI_GEMINI_STATE_H_

#include <algorithm>
#include <atomic>
#include <deque>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/process_group/process_group.h"
#include "comm/process_group/work.h"
#include "core/status/status.h"
#include "core/device/stream.h"
#include "core/dtype/dtype.h"
#include "core/tensor/tensor.h"
#include "nn/module/module.h"
#include "nn/module/parameter.h"
#include "nn/optim/optimizer.h"
#include "parallel/gemini/chunk_layout.h"
#include "parallel/gemini/chunk_updater.h"
#include "parallel/gemini/gemini_plugin.h"

namespace colossal::parallel {

// A piece of a chunk's shard lying in one parameter: offset in the shard,
// length, the parameter's optimizer group.
struct GeminiPiece {
  int64_t offset = 0;
  int64_t count = 0;
  int group = 0;
};

struct GeminiChunk {
  ChunkSpec spec;
  bool sharded = true;       // else every rank holds the whole chunk
  int64_t shard_size = 0;    // spec.numel / W, or spec.numel
  int64_t shard_begin = 0;   // this rank's first element in the chunk
  bool on_device = false;    // where the shard and its optimizer state live
  // This rank's shard, [shard_size] each: the values in the model's dtype;
  // the float32 masters (the values themselves for a float32 model; for a
  // bfloat16 model their low halves, uint16 bits of kernels/adam's
  // split_master.h, whose high halves are the values); the Adam moments; the
  // averaged gradients in the model's dtype, summed over the backwards of a
  // step. On the host (pinned, on CUDA): 14 bytes a parameter for a bfloat16
  // model, 16 for float16.
  core::Tensor value, master, exp_avg, exp_avg_sq, grad;
  // No backward reduced into grad since zero_grad: the next reduction
  // overwrites grad (zero_grad itself writes nothing, so it need not wait for
  // the host update that may still read grad).
  bool grad_zero = true;
  // CUDA, host chunk reduced once since zero_grad: its gradient shard's norm
  // was taken on the device before the download (State::chunk_norms), so the
  // step need not read the shard on the host. Set anew by every reduction
  // (a later micro-batch's part is folded in on the host: norm_from_fold).
  bool norm_on_device = false;
  // CUDA, host chunks: a later micro-batch's reduced gradients cross PCIe
  // into this pinned buffer (16 bits), which the fold worker adds into grad
  // once they land (State::folds); the first one lands in grad directly.
  // Allocated at the first such micro-batch and kept: pinning and unpinning
  // gigabytes every micro-batch cost seconds (and cudaFreeHost syncs the device).
  core::Tensor staging;
  // The last fold also took the norm of the summed shard (State::fold_norms):
  // the step need not read the shard for it.
  bool norm_from_fold = false;
  // CUDA, host chunks, when the step's micro-batches are summed on the device
  // (State::sum_on_device): the sum of this step's reduced gradients so far
  // [shard_size] (the first part itself, later parts added on the gradient
  // stream with the CPU fold's bits), counted in device_used as
  // device_sum_bytes; step() downloads it into grad while the updates run.
  // Kept between steps (the next first part replaces it).
  core::Tensor device_sum;
  int64_t device_sum_bytes = 0;
  bool sum_pending = false;  // device_sum holds this step's gradients, not yet in grad
  bool sum_current = false;  // device_sum holds this step's gradients (in grad or not)
  // CUDA, host chunks: this rank's 16-bit shard copied to the device ahead of
  // its use on the copy stream (max_prefetch), ready when the event is.
  // A view of value slot prefetch_slot (State::value_slots) when the GPU's
  // share of host Adam left the values there (-1: its own memory, counted).
  core::Tensor prefetched;
  std::shared_ptr<core::Event> prefetch_ready;
  int prefetch_slot = -1;
  // Written by the updater's GPU lane while it runs the chunk's job, read by
  // the caller's thread only once the update is done (State::adopt_handover):
  // the value slot holding the new values (-1: none), ready at the event.
  int handed_slot = -1;
  std::shared_ptr<core::Event> handed_ready;
  core::Tensor full;       // the gathered chunk [numel] on the device, while gathered
  // The all_gather filling `full`, issued ahead of the chunk's use
  // (prefetch_ahead) and not waited for yet: its use (access) or release
  // waits for it first.
  comm::WorkPtr gathering;
  core::Tensor full_grad;  // its gradients [numel], during a backward
  int compute = 0;         // modules running with this chunk
  int final_params = 0;    // parameters whose gradient is final in this backward
  bool reduced = false;    // reduced in this backward
  std::vector<GeminiPiece> pieces;
};

// Calls fn(param index, its offset in the chunk, [lo, hi) in the parameter)
// for the part of each of chunk k's parameters that lies in this rank's shard
// (its shard offset is off + lo - k.shard_begin); stops at the first error.
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

// Split masters (kernels/adam split_master.h), all of one length and device:
// float32 `master` into the bfloat16 `hi` and uint16 `lo`, and back.
absl::Status split_into(const core::Tensor& hi, const core::Tensor& lo, const core::Tensor& master,
                        const core::Stream& stream);
absl::Status join_into(const core::Tensor& master, const core::Tensor& hi, const core::Tensor& lo,
                       const core::Stream& stream);

struct GeminiPlugin::State {
  std::shared_ptr<comm::ProcessGroup> pg;
  GeminiOptions options;
  nn::ParameterStore store;
  core::Stream stream = core::Stream::cpu();  // every chunk operation's (materialize's)
  core::DType dtype = core::DType::kF32;      // the parameters'
  bool cuda = false;
  // CUDA, host chunks: the reduced gradients cross PCIe on their own stream,
  // so the download overlaps the backward of the modules before. Each
  // download keeps its device source (and the bytes it counts) until the host
  // sees it landed.
  struct Download {
    core::Tensor source;
    int64_t counted_bytes = 0;
    std::shared_ptr<core::Event> done;  // shared with the chunk's fold, if any
  };
  std::optional<core::OwnedStream> grad_stream;
  absl::Status ensure_grad_stream();
  // Copies chunk c's device gradients `src` into host `dst` on the gradient
  // stream, after the compute stream's work so far; the event marks the landing.
  absl::StatusOr<std::shared_ptr<core::Event>> download(int c, const core::Tensor& src,
                                                        core::Tensor dst);
  std::deque<Download> downloads;
  // Frees the sources of landed downloads; with wait, waits for all first
  // (before the host reads or drops what they wrote).
  void retire_downloads(bool wait);
  // CUDA: per chunk, the device-taken norm of its gradient shard and an
  // inf/NaN flag [2 * chunks] (norm_before_download), and the norm kernel's
  // scratch (reused: every norm runs on `stream`).
  core::Tensor chunk_norms, norm_scratch;
  absl::Status norm_before_download(int c, const core::Tensor& part);
  std::optional<core::OwnedStream> copy_stream;  // CUDA: prefetches (max_prefetch > 0)
  absl::Status ensure_copy_stream();
  // CUDA, gradient accumulation on host chunks (device_grad_accumulation):
  // whether this step sums its micro-batches on the device (chunk.device_sum)
  // instead of downloading each part and folding it in on the host. Decided
  // at zero_grad: the last step ran more than one backward (or one, for the
  // GPU's share of host Adam to read: then the sum also crosses during the
  // backward), no chunk changed tier in it, and its sampled peak of device
  // memory plus the sums fits under the capacity. The sums have the fold's
  // bits (accumulate_cuda), so the choice changes no result. accum_scratch:
  // accumulate_cuda's, used on the gradient stream.
  bool sum_on_device = false;
  int backwards = 0, last_step_backwards = 0;  // backwards since / before the last zero_grad
  int64_t step_peak = 0;                       // device allocator bytes, sampled, since zero_grad
  int64_t evictions_at_zero_grad = 0;
  int64_t device_sum_steps = 0;  // steps that summed on the device (tests)
  bool placement_changed = false;  // place_auto ran since the last zero_grad
  core::Tensor accum_scratch;
  void sample_device_peak();
  // Decides sum_on_device for the next step (frees the sums when it turns off).
  absl::Status choose_sum_on_device();
  void drop_device_sum(GeminiChunk& k);
  // Adds the part into chunk c's device_sum on the gradient stream (part
  // stays alive until the add lands), the sum's norm into chunk_norms.
  absl::Status add_to_device_sum(int c, core::Tensor part, int64_t counted);
  // CUDA: the GPU's share of the host chunks' Adam (gpu_shares_host_adam):
  // its stream, and the chunk updates it ran (counted on the updater's lane).
  std::optional<core::OwnedStream> host_adam_stream;
  std::atomic<int64_t> gpu_host_updates{0};
  // CUDA, that share: device buffers, each the size of the largest host
  // shard, into which the GPU's lane copies a chunk's 16-bit values, updates
  // them there (the rest of the state in place on the host) and copies them
  // back, leaving the new values on the device for the next forward, which
  // adopts them as the chunk's prefetched copy instead of copying in: the
  // values cross PCIe twice, not three times, in the update's bandwidth-bound
  // phase. Created at the first step, if the device has room then (counted
  // in device_used once; not tried again); a slot is taken by the lane
  // (busy) and given back by the caller's thread when its reader is done
  // (free_at, on `stream`); the lane takes only a slot free on the device
  // already and otherwise updates in place.
  struct ValueSlot {
    core::Tensor buffer;
    std::shared_ptr<core::Event> free_at;  // null: never read
    bool busy = false;
  };
  std::vector<ValueSlot> value_slots;
  bool value_slots_tried = false;
  std::mutex slots_mu;
  std::atomic<int64_t> value_handovers{0};
  absl::Status ensure_value_slots();
  int take_value_slot(int64_t elements);  // the lane: a free slot that holds them, or -1
  void give_back_slot(int slot, std::shared_ptr<core::Event> free_at);
  // The caller's thread, chunk c's update done: its handed-over values become
  // its prefetched copy (unless it holds one) / are dropped.
  void adopt_handover(GeminiChunk& k);
  void drop_handover(GeminiChunk& k);
  // Drops chunk k's prefetched copy once `stream` has read it (the stream
  // waits for the copy in first): its counted bytes, or its value slot.
  void drop_prefetched(GeminiChunk& k);
  bool materialized = false, boosted = false;
  ChunkLayout layout;
  std::vector<GeminiChunk> chunks;
  nn::Optimizer* optimizer = nullptr;
  int64_t steps = 0;  // Adam's step count, one for every parameter

  // Device accounting (the CPU stand-in and the CUDA device alike).
  int64_t capacity = 0;
  int64_t device_used = 0, device_peak = 0;
  int64_t gathers = 0, gathers_ahead = 0, copies_ahead = 0, evictions = 0;
  bool told_offload = false;

  // Access order, per pass (0: forward, 1: backward): the chunk of every
  // access (module hook or fetch) of the first pass of that kind (recorded,
  // and checked across ranks when W > 1), and the cursor into it in later
  // passes (release and eviction choices).
  std::vector<int> orders[2];
  bool recording[2] = {true, true};
  size_t cursor = 0;
  bool in_backward = false;
  bool auto_placed = false;  // auto: the placement after the warm-up step
  int64_t peak_non_model = 0;
  const std::vector<int>& order() const { return orders[in_backward]; }
  bool recording_now() const { return recording[in_backward]; }

  int world() const { return pg->size(); }
  int rank() const { return pg->rank(); }
  int64_t esize() const { return static_cast<int64_t>(core::dtype_size(dtype)); }
  bool sixteen_bit() const { return dtype != core::DType::kF32; }
  // A bfloat16 model's chunks keep only the low halves of their masters:
  // the values are the high halves (kernels/adam split_master.h), so a
  // master costs 2 bytes instead of 4 and its Adam step moves 8 bytes of it
  // instead of 10.
  bool split_master() const { return dtype == core::DType::kBF16; }
  // The dtype of GeminiChunk::master: float32, or the low halves' uint16.
  core::DType master_dtype() const { return split_master() ? core::DType::kU16 : core::DType::kF32; }
  // The gathered chunk is the shard itself (whole, on the device), and the
  // backward may accumulate into the gradient shard directly (one rank).
  bool full_is_value(const GeminiChunk& k) const { return k.on_device && !k.sharded; }
  bool grads_in_place(const GeminiChunk& k) const { return k.on_device && world() == 1; }
  // Device bytes of chunk k's shard and optimizer state when on the device.
  int64_t shard_bytes(const GeminiChunk& k) const;
  void note(const std::string& message) const;
  int64_t non_model_bytes() const;

  // A zeroed [n] tensor of `dtype` on the device or in (pinned, on CUDA) host memory.
  absl::StatusOr<core::Tensor> zeros(int64_t n, core::DType dtype, bool on_device) const;
  // Makes `stream` (or the host, on the CPU) wait for a collective.
  absl::Status finish(absl::StatusOr<comm::WorkPtr> work, const std::string& what) const;
  comm::CollectiveOptions collective() const;

  // Device bytes: `bytes` more must fit (reductions in flight finish first,
  // then auto evicts, never chunk `keep`); the error names what did not fit.
  absl::Status reserve(int64_t bytes, int keep, const std::string& what);
  void release_bytes(int64_t bytes) { device_used -= bytes; }
  // What the plugin may hold on the device now: the capacity (x
  // steady_cuda_cap_ratio for auto) less the non-model memory.
  int64_t device_limit() const;
  // auto: evicts chunks (furthest next use first, never `keep`) until the
  // plugin's device bytes fit device_limit() or nothing more can leave.
  absl::Status shrink_to_fit(int keep);
  absl::Status evict(int victim);
  // Moves chunk c's shard and optimizer state to the device or the host.
  absl::Status move_chunk(int c, bool to_device);
  // The chunk used furthest in the future (from the cursor), among
  // device-resident chunks not in use; -1 if none.
  int furthest_chunk(int keep) const;

  // Gather (all_gather of the shards) / release of chunk c's values; its
  // gradient buffer; the reduction of its gradients into the shards.
  absl::Status access(int c, const std::string& param);
  absl::Status gather(int c);
  absl::Status release(int c);
  absl::Status ensure_grad(int c, const std::string& param);
  absl::Status reduce(int c);
  // A reduction in flight: its collective was issued, the rest of reduce()
  // (adding the reduced part into the gradient shard, or its download) waits
  // until a later chunk's reduction is issued, so the collective overlaps the
  // backward of the modules before. The buffers stay alive (and counted) till then.
  struct Reduction {
    int chunk = -1;
    core::Tensor full_grad, part;  // the gathered gradients, this rank's reduced part
    comm::WorkPtr work;
  };
  std::deque<Reduction> reductions;
  absl::Status finish_reduce(Reduction r);
  // Finishes chunk c's reduction if it is in flight / every one in flight
  // (before anything reads the gradient shards: the step, the next backward).
  absl::Status settle_reduce(int c);
  absl::Status settle_reductions();
  // Finishes the reduction issued first of those in flight (one must be).
  absl::Status finish_oldest_reduction();
  // Waits for an all_gather issued ahead into chunk k (before using or
  // freeing `full`).
  absl::Status settle_gather(GeminiChunk& k, int c);
  // Issues chunk c's all_gather now (a host shard crosses PCIe first, on the
  // copy stream), waited for at its use. Its memory is counted, never
  // refused: max_prefetch bounds it.
  absl::Status gather_ahead(int c);
  // Starts copying host chunk k's 16-bit shard into k.prefetched on the copy stream.
  absl::Status copy_in_ahead(GeminiChunk& k);
  // Queues chunk c's fold: once `landed` completes, grad += staging on the
  // host, and the sum's norm into fold_norms.
  absl::Status queue_fold(int c, std::shared_ptr<core::Event> landed);
  // The next max_prefetch chunks of the recorded order (after the cursor):
  // sharded chunks (W > 1) are all-gathered now on the communication stream,
  // whatever their tier; whole host chunks' 16-bit shards start copying to
  // the device on the copy stream when there is room.
  absl::Status prefetch_ahead();
  // Drops prefetched shards not used (end of a pass) and waits for the copy
  // stream (before the host writes the shards again).
  void drop_prefetches();
  absl::Status set_views(int c);
  // The chunks of the parameters `params` (table indices), each once.
  std::vector<int> chunks_of(const std::vector<int>& params) const;
  // Whether the next access in the recorded order is chunk c.
  bool next_use_is(int c) const;
  // First pass, W > 1: every rank reports `param` (-1: the pass ended);
  // an error naming the first difference.
  absl::Status check_same_access(int64_t param);
  // Every rank's `mine`, in rank order (a small all_gather).
  absl::StatusOr<std::vector<int64_t>> all_gather_value(int64_t mine, const std::string& what);
  // Chunks gathered ahead of their use at most (W > 1): max_prefetch, or
  // what auto's placement left room for (the same on every rank).
  int gather_window = 0;
  // Ends the current pass: the first one of its kind stops recording (W > 1:
  // after checking that every rank's pass ended here too).
  absl::Status end_pass(bool ok);
  // auto, before the warm-up step (chunks not allocated yet): the first
  // chunks on the device up to capacity x steady_cuda_cap_ratio x (1 -
  // warmup_non_model_data_ratio), Colossal-AI's warm-up share; more when the
  // host could not hold the rest (said once).
  absl::Status place_warmup();
  // auto, after the warm-up step: as many chunks on the device as fit.
  absl::Status place_auto();
  // Chunk k's shard tensor `t` gathered into one [numel] host tensor (a
  // collective when the chunk is sharded).
  absl::StatusOr<core::Tensor> gather_whole(const GeminiChunk& k, const core::Tensor& t);

  // CPU Adam of the chunks updated on the host (every chunk on the CPU build;
  // host-resident ones on CUDA) runs on `updater` after step() returns, in
  // the order of the next forward's first uses. Whatever reads or writes such
  // a chunk's shards waits for its update first (await_update), and whatever
  // reads them all for every update (settle): the step, checkpoints, moves.
  bool host_updated(const GeminiChunk& k) const { return !(cuda && k.on_device); }
  absl::Status await_update(int c) { return updater.wait(c); }
  // Also drops the values the GPU's lane handed over and nothing adopted (a
  // caller may write the shards next).
  absl::Status settle();
  // CUDA, host chunks under gradient accumulation: the folds of staged parts
  // into the gradient shards run on their own worker in the order the
  // downloads were enqueued, overlapping the backward. Whatever writes a
  // chunk's staging or gradient shard waits for its fold first (await_fold),
  // the step for every fold. fold_norms: per chunk, the norm of the shard
  // its last fold summed and an inf/NaN flag [2 * chunks], written by the
  // worker, read after the wait.
  absl::Status await_fold(int c) { return folds.wait(c); }
  std::vector<float> fold_norms;
  // Declared last: destroyed first, so no fold or update runs over freed shards.
  ChunkUpdater folds;
  ChunkUpdater updater;
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_GEMINI_GEMINI_STATE_H_
