// The gemini plugin's chunks: memory tiers and accounting, placement moves,
// gather (ahead) / release, the access-order record and check. Gradients and
// their reduction: gemini_grads.cc.
#include <algorithm>
#include <iostream>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bazel/cuda_config.h"
#include "core/alloc/allocator.h"
#include "core/alloc/cpu_allocator.h"
#include "core/alloc/default_allocator.h"
#include "core/status/status.h"
#include "core/trace/trace.h"
#include "kernels/adam/adam.h"
#include "parallel/gemini/gemini_state.h"

namespace colossal::parallel {
namespace {

std::string bytes(int64_t n) {
  return core::format_bytes(static_cast<uint64_t>(std::max<int64_t>(n, 0)));
}

}  // namespace

namespace {

absl::Status check_split(const core::Tensor& master, const core::Tensor& hi, const core::Tensor& lo) {
  if (hi.numel() != master.numel() || lo.numel() != master.numel() || master.dtype() != core::DType::kF32 ||
      hi.dtype() != core::DType::kBF16 || lo.dtype() != core::DType::kU16 ||
      hi.device() != master.device() || lo.device() != master.device()) {
    return absl::InternalError("gemini: split master tensors of different lengths, dtypes or devices");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status split_into(const core::Tensor& hi, const core::Tensor& lo, const core::Tensor& master,
                        const core::Stream& stream) {
  COLOSSAL_RETURN_IF_ERROR(check_split(master, hi, lo));
  auto* h = static_cast<uint16_t*>(hi.raw_data());
  auto* l = static_cast<int16_t*>(lo.raw_data());
#if COLOSSAL_WITH_CUDA
  if (master.device().is_cuda()) {
    return core::from_kernel_status(
        kernels::adam::split_master_cuda(master.data<float>(), h, l, master.numel(), stream.handle()),
        "gemini: split masters");
  }
#endif
  (void)stream;
  return core::from_kernel_status(kernels::adam::split_master_cpu(master.data<float>(), h, l, master.numel()),
                                  "gemini: split masters");
}

absl::Status join_into(const core::Tensor& master, const core::Tensor& hi, const core::Tensor& lo,
                       const core::Stream& stream) {
  COLOSSAL_RETURN_IF_ERROR(check_split(master, hi, lo));
  const auto* h = static_cast<const uint16_t*>(hi.raw_data());
  const auto* l = static_cast<const int16_t*>(lo.raw_data());
#if COLOSSAL_WITH_CUDA
  if (master.device().is_cuda()) {
    return core::from_kernel_status(
        kernels::adam::join_master_cuda(h, l, master.data<float>(), master.numel(), stream.handle()),
        "gemini: join masters");
  }
#endif
  (void)stream;
  return core::from_kernel_status(kernels::adam::join_master_cpu(h, l, master.data<float>(), master.numel()),
                                  "gemini: join masters");
}

int64_t GeminiPlugin::State::shard_bytes(const GeminiChunk& k) const {
  // value + (separate master, or its low half) + two moments + gradients (the model's dtype)
  const int64_t master = split_master() ? 2 : sixteen_bit() ? 4 : 0;
  return k.shard_size * (esize() + master + 8 + esize());
}

void GeminiPlugin::State::note(const std::string& message) const {
  if (options.notice) {
    options.notice(message);
  } else {
    std::cerr << message << "\n";
  }
}

int64_t GeminiPlugin::State::non_model_bytes() const {
  if (options.non_model_bytes) return options.non_model_bytes();
  if (!cuda) return 0;  // the CPU stand-in sees only the chunks
  absl::StatusOr<std::shared_ptr<core::Allocator>> a = core::device_allocator(stream.device());
  if (!a.ok()) return 0;
  return std::max<int64_t>(0, (*a)->stats().allocated_bytes - device_used);
}

absl::StatusOr<core::Tensor> GeminiPlugin::State::zeros(int64_t n, core::DType dt,
                                                        bool on_device) const {
  core::Tensor t;
  if (on_device || !cuda) {
    COLOSSAL_ASSIGN_OR_RETURN(t, core::Tensor::empty({n}, dt, on_device ? stream : core::Stream::cpu()));
  } else {
    COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<core::Allocator> pinned, core::pinned_host_allocator());
    COLOSSAL_ASSIGN_OR_RETURN(t, core::Tensor::empty({n}, dt, stream, pinned));
  }
  COLOSSAL_RETURN_IF_ERROR(t.set_zero(on_device ? stream : core::Stream::cpu()));
  return t;
}

comm::CollectiveOptions GeminiPlugin::State::collective() const {
  comm::CollectiveOptions o;
  if (cuda) o.stream = stream;
  return o;
}

absl::Status GeminiPlugin::State::finish(absl::StatusOr<comm::WorkPtr> work,
                                         const std::string& what) const {
  if (!work.ok()) return core::annotate(work.status(), what);
  // CUDA: later work on the stream runs after it, no host wait.
  return core::annotate((*work)->wait_on(stream), what);
}

// ---- accounting and placement ----

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

int64_t GeminiPlugin::State::device_limit() const {
  const double ratio = options.placement_policy == "auto" ? options.steady_cuda_cap_ratio : 1.0;
  return static_cast<int64_t>(capacity * ratio) - non_model_bytes();
}

absl::Status GeminiPlugin::State::evict(int victim) {
  if (!told_offload) {
    note(absl::StrCat("gemini auto: device memory is short (", bytes(device_limit()),
                      " for the model's chunks); moving the chunks used furthest ahead to the "
                      "host (said once)"));
    told_offload = true;
  }
  ++evictions;
  return move_chunk(victim, /*to_device=*/false);
}

absl::Status GeminiPlugin::State::shrink_to_fit(int keep) {
  if (options.placement_policy != "auto") return absl::OkStatus();
  while (device_used > device_limit()) {
    const int victim = furthest_chunk(keep);
    if (victim < 0) break;  // what is left is in use: a later allocation may still fail
    COLOSSAL_RETURN_IF_ERROR(evict(victim));
  }
  return absl::OkStatus();
}

absl::Status GeminiPlugin::State::reserve(int64_t n, int keep, const std::string& what) {
  const bool automatic = options.placement_policy == "auto";
  auto limit = [&] { return device_limit(); };
  while (device_used + n > limit()) {
    // Reductions in flight hold gradient buffers: the oldest finishes before
    // a chunk moves out. (Gathers ahead stay: dropping one would gather it
    // again at its use, a collective the other ranks might not issue.)
    if (!reductions.empty()) {
      COLOSSAL_RETURN_IF_ERROR(finish_oldest_reduction());
      continue;
    }
    const int victim = automatic ? furthest_chunk(keep) : -1;
    if (victim < 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "gemini (placement \"", options.placement_policy, "\"): ", what, " needs ", bytes(n),
          " more device memory; the plugin holds ", bytes(device_used), " of the ", bytes(limit()),
          " it may use (", bytes(capacity), automatic ? " x steady_cuda_cap_ratio" : "", ", less ",
          bytes(non_model_bytes()), " of non-model memory)",
          automatic ? " and nothing more can move to the host"
                    : "; placement_policy \"auto\" or \"cpu\" keeps less on the device"));
    }
    COLOSSAL_RETURN_IF_ERROR(evict(victim));
  }
  device_used += n;
  device_peak = std::max(device_peak, device_used);
  sample_device_peak();
  return absl::OkStatus();
}

absl::Status GeminiPlugin::State::move_chunk(int c, bool to_device) {
  GeminiChunk& k = chunks[c];
  if (k.on_device == to_device) return absl::OkStatus();
  COLOSSAL_RETURN_IF_ERROR(settle_reduce(c));  // its reduced part goes to the old tier's shard
  COLOSSAL_RETURN_IF_ERROR(settle_gather(k, c));
  COLOSSAL_RETURN_IF_ERROR(await_update(c));
  retire_downloads(/*wait=*/true);  // no gradient copy may land in the old tier
  COLOSSAL_RETURN_IF_ERROR(await_fold(c));
  drop_device_sum(k);  // its last sum is in grad (the update waited for the download)
  drop_handover(k);
  drop_prefetched(k);
  if (to_device) {
    COLOSSAL_RETURN_IF_ERROR(reserve(shard_bytes(k), c, absl::StrCat("chunk ", c)));
  } else {
    release_bytes(shard_bytes(k));
  }
  auto moved = [&](const core::Tensor& t, core::DType dt) -> absl::StatusOr<core::Tensor> {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor out, zeros(k.shard_size, dt, to_device));
    COLOSSAL_RETURN_IF_ERROR(out.copy_from(t, stream));
    return out;
  };
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor value, moved(k.value, dtype));
  core::Tensor master = value;
  if (sixteen_bit()) {
    COLOSSAL_ASSIGN_OR_RETURN(master, moved(k.master, master_dtype()));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor m, moved(k.exp_avg, core::DType::kF32));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor v, moved(k.exp_avg_sq, core::DType::kF32));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor g, moved(k.grad, dtype));
  if (cuda) stream.synchronize();  // the old tier's memory goes now
  k.value = std::move(value);
  k.master = std::move(master);
  k.exp_avg = std::move(m);
  k.exp_avg_sq = std::move(v);
  k.grad = std::move(g);
  k.staging = core::Tensor();
  k.on_device = to_device;
  return absl::OkStatus();
}

// ---- views, gather, release, reduce ----

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

absl::StatusOr<std::vector<int64_t>> GeminiPlugin::State::all_gather_value(int64_t mine,
                                                                          const std::string& what) {
  // A tiny collective on the host (CPU) or through the device (NCCL).
  std::vector<int64_t> all(static_cast<size_t>(world()), 0);
  if (cuda) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h_mine, core::Tensor::empty({1}, core::DType::kI64, core::Stream::cpu()));
    *h_mine.data<int64_t>() = mine;
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor d_mine, h_mine.to(stream.device(), stream));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor d_all,
                              core::Tensor::empty({world()}, core::DType::kI64, stream));
    COLOSSAL_RETURN_IF_ERROR(finish(pg->all_gather(d_all, d_mine, collective()), what));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h, d_all.to(core::Device::cpu(), stream));
    stream.synchronize();
    std::copy(h.data<int64_t>(), h.data<int64_t>() + world(), all.begin());
  } else {
    COLOSSAL_RETURN_IF_ERROR(finish(
        pg->all_gather(comm::Buffer::cpu(all.data(), all.size()), comm::Buffer::cpu(&mine, 1)), what));
  }
  return all;
}

absl::Status GeminiPlugin::State::check_same_access(int64_t param) {
  COLOSSAL_ASSIGN_OR_RETURN(const std::vector<int64_t> all,
                            all_gather_value(param, "gemini: checking the access order"));
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
  // auto: non-model memory grows (activations): chunks used furthest ahead leave.
  COLOSSAL_RETURN_IF_ERROR(shrink_to_fit(c));
  if (chunks[c].full.defined()) {
    COLOSSAL_RETURN_IF_ERROR(settle_gather(chunks[c], c));  // gathered ahead
  } else {
    COLOSSAL_RETURN_IF_ERROR(gather(c));
  }
  return prefetch_ahead();
}

absl::Status GeminiPlugin::State::prefetch_ahead() {
  if (options.max_prefetch <= 0 || recording_now()) return absl::OkStatus();
  // Gathers ahead (W > 1): the next gather_window sharded chunks of the order
  // not gathered for a use now. Each is a collective, so every rank must pick
  // the same ones at the same point: this reads only what is the same on every
  // rank (the order, the cursor, which chunks are gathered), never memory or
  // how far the host updates have got.
  if (world() > 1) {
    int ahead = 0;
    for (size_t i = cursor; i < order().size() && ahead < gather_window; ++i) {
      const int c = order()[i];
      GeminiChunk& k = chunks[c];
      if (!k.sharded || (k.full.defined() && k.gathering == nullptr)) continue;
      ++ahead;
      if (k.gathering == nullptr) COLOSSAL_RETURN_IF_ERROR(gather_ahead(c));
    }
  }
  // Copies ahead (CUDA): whole host chunks among the next max_prefetch
  // chunks, when updated and when the device has room (no collective).
  if (!cuda) return absl::OkStatus();
  int issued = 0;
  for (size_t i = cursor; i < order().size() && issued < options.max_prefetch; ++i) {
    const int c = order()[i];
    GeminiChunk& k = chunks[c];
    if (k.on_device || k.full.defined()) continue;  // nothing to copy, or in already
    ++issued;
    // A sharded chunk outside the gather window (W > 1) is copied in too: its
    // gather (ahead or at its use) then reads the copy. A copy is no
    // collective, so the ranks may differ here.
    // Not updated yet: nor are the chunks after it (the update follows this
    // order); the next access tries again.
    if (!updater.ready(c)) break;
    adopt_handover(k);
    if (k.prefetched.defined()) continue;
    if (device_used + k.shard_size * esize() > device_limit()) break;  // gather copies it then
    COLOSSAL_RETURN_IF_ERROR(copy_in_ahead(k));
    ++copies_ahead;
  }
  return absl::OkStatus();
}

absl::Status GeminiPlugin::State::ensure_copy_stream() {
  if (copy_stream.has_value()) return absl::OkStatus();
  COLOSSAL_ASSIGN_OR_RETURN(core::OwnedStream s, core::OwnedStream::create(stream.device()));
  copy_stream.emplace(std::move(s));
  return absl::OkStatus();
}

absl::Status GeminiPlugin::State::copy_in_ahead(GeminiChunk& k) {
  COLOSSAL_RETURN_IF_ERROR(ensure_copy_stream());
  const int64_t n = k.shard_size * esize();
  device_used += n;
  device_peak = std::max(device_peak, device_used);
  std::optional<core::trace::Span> span;
  if (core::trace::enabled()) {
    span.emplace("gemini", absl::StrCat("copy in ", n >> 20, " MiB ahead"), &copy_stream->get());
  }
  // Allocated in the compute stream's order; the copy waits for that point,
  // so it overlaps the modules running now.
  COLOSSAL_ASSIGN_OR_RETURN(k.prefetched, core::Tensor::empty({k.shard_size}, dtype, stream));
  COLOSSAL_ASSIGN_OR_RETURN(core::Event allocated, core::Event::create(stream.device()));
  allocated.record(stream);
  allocated.wait(copy_stream->get());
  COLOSSAL_RETURN_IF_ERROR(k.prefetched.copy_from(k.value, copy_stream->get()));
  COLOSSAL_ASSIGN_OR_RETURN(core::Event ready, core::Event::create(stream.device()));
  ready.record(copy_stream->get());
  k.prefetch_ready = std::make_shared<core::Event>(std::move(ready));
  return absl::OkStatus();
}

absl::Status GeminiPlugin::State::gather_ahead(int c) {
  GeminiChunk& k = chunks[c];
  // The values the last step wrote: every rank waits (host updates), so
  // every rank issues this gather here.
  COLOSSAL_RETURN_IF_ERROR(await_update(c));
  adopt_handover(k);
  const int64_t n = k.spec.numel * esize();
  device_used += n;  // counted, never refused: refusing would differ between ranks
  device_peak = std::max(device_peak, device_used);
  sample_device_peak();
  COLOSSAL_ASSIGN_OR_RETURN(k.full, core::Tensor::empty({k.spec.numel}, dtype, stream));
  comm::CollectiveOptions o = collective();
  core::Tensor src = k.value;
  if (cuda && !k.on_device) {
    // A host shard crosses PCIe on the copy stream first (unless the GPU's
    // Adam lane left it on the device), and the gather follows it there; the
    // copy stream also waits for the allocation above.
    COLOSSAL_RETURN_IF_ERROR(ensure_copy_stream());
    if (!k.prefetched.defined()) COLOSSAL_RETURN_IF_ERROR(copy_in_ahead(k));
    k.prefetch_ready->wait(copy_stream->get());  // a no-op after its own copy in
    COLOSSAL_ASSIGN_OR_RETURN(core::Event allocated, core::Event::create(stream.device()));
    allocated.record(stream);
    allocated.wait(copy_stream->get());
    o.stream = copy_stream->get();
    src = k.prefetched;
  }
  absl::StatusOr<comm::WorkPtr> work = pg->all_gather(k.full, src, o);
  if (!work.ok()) {
    return core::annotate(work.status(), absl::StrCat("gemini: gathering chunk ", c, " ahead of its use"));
  }
  k.gathering = *std::move(work);
  ++gathers;
  ++gathers_ahead;
  return absl::OkStatus();  // the views are set when the gather is waited for (settle_gather)
}

absl::Status GeminiPlugin::State::settle_gather(GeminiChunk& k, int c) {
  if (k.gathering == nullptr) return absl::OkStatus();
  comm::WorkPtr work = std::move(k.gathering);
  k.gathering = nullptr;
  COLOSSAL_RETURN_IF_ERROR(finish(work, absl::StrCat("gemini: gathering chunk ", c)));
  drop_prefetched(k);  // the host shard it read (the stream waited for the gather)
  return set_views(c);
}

void GeminiPlugin::State::drop_prefetches() {
  for (size_t c = 0; c < chunks.size(); ++c) {
    GeminiChunk& k = chunks[c];
    // A chunk still updating may yet hand values over; they go at its use or
    // at the next settle().
    if (updater.ready(static_cast<int>(c))) drop_handover(k);
    drop_prefetched(k);
  }
  if (copy_stream.has_value()) copy_stream->get().synchronize();
}

void GeminiPlugin::State::drop_prefetched(GeminiChunk& k) {
  if (!k.prefetched.defined()) return;
  k.prefetch_ready->wait(stream);  // the copy in finishes before the memory is reused
  k.prefetched = core::Tensor();
  if (k.prefetch_slot < 0) {
    release_bytes(k.shard_size * esize());
    return;
  }
  absl::StatusOr<core::Event> read = core::Event::create(stream.device());
  if (read.ok()) read->record(stream);
  // Without an event (the device failed) the slot stays busy: never reused.
  if (read.ok()) give_back_slot(k.prefetch_slot, std::make_shared<core::Event>(*std::move(read)));
  k.prefetch_slot = -1;
}

void GeminiPlugin::State::adopt_handover(GeminiChunk& k) {
  if (k.handed_slot < 0) return;
  if (k.prefetched.defined()) {  // cannot happen: a copy in waits for the update
    drop_handover(k);
    return;
  }
  absl::StatusOr<core::Tensor> view = value_slots[k.handed_slot].buffer.slice(0, k.shard_size);
  if (!view.ok()) {  // cannot happen: the slot holds the largest host shard
    drop_handover(k);
    return;
  }
  k.prefetched = *std::move(view);
  k.prefetch_ready = std::move(k.handed_ready);
  k.prefetch_slot = k.handed_slot;
  k.handed_slot = -1;
}

void GeminiPlugin::State::drop_handover(GeminiChunk& k) {
  if (k.handed_slot < 0) return;
  give_back_slot(k.handed_slot, std::move(k.handed_ready));  // no reader: free once written
  k.handed_slot = -1;
}

absl::Status GeminiPlugin::State::settle() {
  absl::Status s = updater.wait_all();
  for (GeminiChunk& k : chunks) drop_handover(k);
  return s;
}

absl::Status GeminiPlugin::State::ensure_value_slots() {
  if (value_slots_tried || !cuda) return absl::OkStatus();
  value_slots_tried = true;
  int64_t largest = 0;
  for (const GeminiChunk& k : chunks) {
    if (host_updated(k)) largest = std::max(largest, k.shard_size);
  }
  // Three: one the forward reads, one the lane fills, one whose last reader
  // the device has not reached yet (the lane takes only a slot free there).
  constexpr int kSlots = 3;
  const int64_t bytes = kSlots * largest * esize();
  if (largest == 0 || device_used + bytes > device_limit()) return absl::OkStatus();
  value_slots.resize(kSlots);
  for (ValueSlot& slot : value_slots) {
    COLOSSAL_ASSIGN_OR_RETURN(slot.buffer, core::Tensor::empty({largest}, dtype, stream));
  }
  device_used += bytes;
  device_peak = std::max(device_peak, device_used);
  return absl::OkStatus();
}

int GeminiPlugin::State::take_value_slot(int64_t elements) {
  std::lock_guard<std::mutex> lock(slots_mu);
  for (size_t i = 0; i < value_slots.size(); ++i) {
    // Sized for the host chunks at the first step: auto may later evict a
    // larger (outsized) chunk to the host.
    if (value_slots[i].buffer.numel() < elements) return -1;
    ValueSlot& slot = value_slots[i];
    if (slot.busy || (slot.free_at != nullptr && !slot.free_at->query())) continue;
    slot.busy = true;
    return static_cast<int>(i);
  }
  return -1;
}

void GeminiPlugin::State::give_back_slot(int slot, std::shared_ptr<core::Event> free_at) {
  std::lock_guard<std::mutex> lock(slots_mu);
  value_slots[slot].free_at = std::move(free_at);
  value_slots[slot].busy = false;
}

absl::Status GeminiPlugin::State::gather(int c) {
  GeminiChunk& k = chunks[c];
  std::optional<core::trace::Span> span;  // at its use: what the compute stream waits for
  if (core::trace::enabled()) span.emplace("gemini", absl::StrCat("gather chunk ", c), &stream);
  COLOSSAL_RETURN_IF_ERROR(await_update(c));  // the values the last step wrote
  adopt_handover(k);  // the GPU's lane left them on the device
  if (full_is_value(k)) {
    k.full = k.value;
    return set_views(c);
  }
  const std::string what = absl::StrCat("gemini: gathering chunk ", c);
  COLOSSAL_RETURN_IF_ERROR(reserve(k.spec.numel * esize(), c, what));
  COLOSSAL_ASSIGN_OR_RETURN(k.full, core::Tensor::empty({k.spec.numel}, dtype, stream));
  if (!k.sharded) {  // whole, on the host: one copy in (or the prefetched one)
    if (k.prefetched.defined()) {
      k.prefetch_ready->wait(stream);
      COLOSSAL_RETURN_IF_ERROR(k.full.copy_from(k.prefetched, stream));
      drop_prefetched(k);
    } else {
      COLOSSAL_RETURN_IF_ERROR(k.full.copy_from(k.value, stream));
    }
    return set_views(c);
  }
  core::Tensor src = k.value;
  if (k.prefetched.defined()) {  // copied in ahead (prefetch_ahead)
    k.prefetch_ready->wait(stream);
    src = k.prefetched;
  } else if (cuda && !k.on_device) {  // the 16-bit shard crosses PCIe, then the gather
    COLOSSAL_ASSIGN_OR_RETURN(src, k.value.to(stream.device(), stream));
  }
  COLOSSAL_RETURN_IF_ERROR(finish(pg->all_gather(k.full, src, collective()), what));
  drop_prefetched(k);  // after the gather that reads it (a value slot is reused then)
  ++gathers;
  return set_views(c);
}

absl::Status GeminiPlugin::State::release(int c) {
  GeminiChunk& k = chunks[c];
  if (!k.full.defined() || k.compute > 0) return absl::OkStatus();
  // A gather issued ahead and never used (the pass took another path) still
  // writes into `full`: its memory is freed only after it.
  absl::Status gathered = settle_gather(k, c);
  if (!full_is_value(k)) release_bytes(k.spec.numel * esize());
  k.full = core::Tensor();
  set_views(c).IgnoreError();  // slices of live tensors: cannot fail
  return gathered;
}

absl::Status GeminiPlugin::State::end_pass(bool ok) {
  if (!recording_now()) return absl::OkStatus();
  if (ok && world() > 1) COLOSSAL_RETURN_IF_ERROR(check_same_access(-1));
  recording[in_backward] = false;
  return absl::OkStatus();
}

absl::Status GeminiPlugin::State::place_warmup() {
  const double steady = static_cast<double>(capacity) * options.steady_cuda_cap_ratio;
  const int64_t warm = static_cast<int64_t>(steady * (1.0 - options.warmup_non_model_data_ratio));
  int64_t used = 0, host = 0, largest = 0;
  for (GeminiChunk& k : chunks) {
    k.on_device = used + shard_bytes(k) <= warm;
    (k.on_device ? used : host) += shard_bytes(k);
    largest = std::max(largest, k.spec.numel * esize());
  }
  if (!cuda) return absl::OkStatus();  // the stand-in's host is the machine's: no limit here
  // Host shards are pinned: leave a tenth of the host's memory free. The
  // device keeps room for the warm-up's working set (two chunks and their
  // gradients) and a tenth of the rest for activations.
  const int64_t host_limit = static_cast<int64_t>(0.9 * static_cast<double>(core::host_memory_available()));
  const int64_t device_limit = static_cast<int64_t>(0.9 * steady) - 4 * largest;
  int moved = 0;
  for (GeminiChunk& k : chunks) {
    if (host <= host_limit) break;
    if (k.on_device || used + shard_bytes(k) > device_limit) continue;
    k.on_device = true;
    used += shard_bytes(k);
    host -= shard_bytes(k);
    ++moved;
  }
  if (moved > 0) {
    note(absl::StrCat("gemini auto: the host cannot hold the offloaded shards (", bytes(host + used),
                      " with the device's share, ", bytes(host_limit), " free): ", moved,
                      " more chunks start on the device"));
  }
  if (host > host_limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "gemini auto: the model's shards and optimizer state need ", bytes(host),
        " of host memory beyond what the device can hold, the host has ", bytes(host_limit),
        " to spare: use more ranks, or a smaller model"));
  }
  return absl::OkStatus();
}

absl::Status GeminiPlugin::State::place_auto() {
  auto_placed = true;
  placement_changed = true;  // the next step's memory is not the warm-up's
  // The warm-up's device peak less the shards that stayed on the device is
  // its working set (gathered chunks, gradient buffers).
  int64_t used = 0;
  for (const GeminiChunk& k : chunks) used += k.on_device ? shard_bytes(k) : 0;
  const int64_t working = std::max<int64_t>(0, device_peak - used);
  const int64_t room = static_cast<int64_t>(capacity * options.steady_cuda_cap_ratio) -
                       peak_non_model - working;
  // Chunks gathered ahead of their use (max_prefetch, W > 1) need room beside
  // the working set: as many as fit, the same number on every rank (each
  // gather ahead is a collective), the smallest rank's.
  int64_t ahead_bytes = 0;
  if (world() > 1 && options.max_prefetch > 0) {
    int64_t largest = 1;
    for (const GeminiChunk& k : chunks) {
      if (k.sharded) largest = std::max(largest, k.spec.numel * esize());
    }
    const int64_t fit = std::clamp<int64_t>(room / largest, 0, options.max_prefetch);
    COLOSSAL_ASSIGN_OR_RETURN(const std::vector<int64_t> fits,
                              all_gather_value(fit, "gemini auto: sizing the gathers ahead"));
    gather_window = static_cast<int>(*std::min_element(fits.begin(), fits.end()));
    ahead_bytes = gather_window * largest;
    if (gather_window < options.max_prefetch) {
      note(absl::StrCat("gemini auto: ", gather_window, " chunk(s) gathered ahead of their use, not ",
                        "max_prefetch = ", options.max_prefetch, " (device memory is short)"));
    }
  }
  const int64_t budget = room - ahead_bytes;
  std::vector<char> placed(chunks.size(), 0);
  auto try_place = [&](int c) -> absl::Status {
    if (placed[c] || chunks[c].on_device) return absl::OkStatus();
    placed[c] = 1;
    if (used + shard_bytes(chunks[c]) > budget) return absl::OkStatus();
    used += shard_bytes(chunks[c]);
    return move_chunk(c, /*to_device=*/true);
  };
  for (int c : orders[0]) COLOSSAL_RETURN_IF_ERROR(try_place(c));  // first use first
  for (size_t c = 0; c < chunks.size(); ++c) COLOSSAL_RETURN_IF_ERROR(try_place(static_cast<int>(c)));
  int on = 0;
  int64_t host = 0;
  for (const GeminiChunk& k : chunks) {
    on += k.on_device;
    if (!k.on_device) host += shard_bytes(k);
  }
  if (on < static_cast<int>(chunks.size()) && !told_offload) {
    note(absl::StrCat("gemini auto: ", on, " of ", chunks.size(),
                      " chunks on the device, the others' shards and optimizer state (",
                      bytes(host), ") in host memory"));
    told_offload = true;
  }
  return absl::OkStatus();
}

absl::StatusOr<core::Tensor> GeminiPlugin::State::gather_whole(const GeminiChunk& k,
                                                               const core::Tensor& t) {
  if (!k.sharded) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h, t.to(core::Device::cpu(), stream));
    if (cuda) stream.synchronize();
    return h;
  }
  core::Tensor src = t;
  if (cuda && !t.device().is_cuda()) {
    COLOSSAL_ASSIGN_OR_RETURN(src, t.to(stream.device(), stream));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor whole, core::Tensor::empty({k.spec.numel}, t.dtype(), stream));
  COLOSSAL_ASSIGN_OR_RETURN(comm::Buffer out, comm::Buffer::of(whole));
  COLOSSAL_ASSIGN_OR_RETURN(comm::Buffer in, comm::Buffer::of(src));
  if (t.dtype() == core::DType::kU16) {
    // Split masters' low halves: NCCL has no uint16, and a gather only moves
    // bytes, so they cross as a 16-bit float type, bits unchanged.
    out.dtype = in.dtype = core::DType::kBF16;
  }
  COLOSSAL_RETURN_IF_ERROR(
      finish(pg->all_gather(out, in, collective()), "gemini: gathering a chunk for a checkpoint"));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h, whole.to(core::Device::cpu(), stream));
  if (cuda) stream.synchronize();
  return h;
}

}  // namespace colossal::parallel
