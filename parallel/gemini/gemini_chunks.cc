// The gemini plugin's chunks: memory tiers and accounting, placement moves,
// gather / release, gradient reduction, the access-order record and check.
#include <algorithm>
#include <iostream>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bazel/cuda_config.h"
#include "core/alloc/allocator.h"
#include "core/alloc/cpu_allocator.h"
#include "core/alloc/default_allocator.h"
#include "core/status/status.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/multi_tensor/multi_tensor.h"
#include "parallel/gemini/gemini_state.h"

namespace colossal::parallel {
namespace {

std::string bytes(int64_t n) {
  return core::format_bytes(static_cast<uint64_t>(std::max<int64_t>(n, 0)));
}

}  // namespace

absl::Status cast_into(const core::Tensor& dst, const core::Tensor& src, const core::Stream& stream) {
  if (dst.numel() != src.numel()) return absl::InternalError("gemini: cast of tensors of different lengths");
#if COLOSSAL_WITH_CUDA
  if (dst.device().is_cuda()) {
    return core::from_kernel_status(
        kernels::elementwise::cast_cuda(dst.raw_data(), src.raw_data(),
                                        dst.numel(), dst.dtype(), src.dtype(), stream.handle()),
        "gemini: cast");
  }
#endif
  return core::from_kernel_status(
      kernels::elementwise::cast_cpu(dst.raw_data(), src.raw_data(),
                                     dst.numel(), dst.dtype(), src.dtype()),
      "gemini: cast");
}

int64_t GeminiPlugin::State::shard_bytes(const GeminiChunk& k) const {
  // value + (separate master) + two moments + gradients (the model's dtype on the device)
  return k.shard_size * (esize() + (sixteen_bit() ? 4 : 0) + 8 + esize());
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
  if (cuda) {
    (*work)->wait_stream(stream);  // later work on the stream runs after it; no host wait
    return absl::OkStatus();
  }
  return core::annotate((*work)->wait(), what);
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
  COLOSSAL_RETURN_IF_ERROR(await_update(c));
  retire_downloads(/*wait=*/true);  // no gradient copy may land in the old tier
  COLOSSAL_RETURN_IF_ERROR(await_fold(c));
  drop_device_sum(k);  // its last sum is in grad (the update waited for the download)
  if (k.prefetched.defined()) {
    k.prefetch_ready->wait(stream);
    k.prefetched = core::Tensor();
    release_bytes(k.shard_size * esize());
  }
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
    COLOSSAL_ASSIGN_OR_RETURN(master, moved(k.master, core::DType::kF32));
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

absl::Status GeminiPlugin::State::check_same_access(int64_t param) {
  // A tiny collective on the host (CPU) or through the device (NCCL).
  std::vector<int64_t> all(static_cast<size_t>(world()), 0);
  if (cuda) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor mine, core::Tensor::empty({1}, core::DType::kI64, core::Stream::cpu()));
    *mine.data<int64_t>() = param;
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor d_mine, mine.to(stream.device(), stream));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor d_all,
                              core::Tensor::empty({world()}, core::DType::kI64, stream));
    COLOSSAL_RETURN_IF_ERROR(finish(pg->all_gather(d_all, d_mine, collective()),
                                    "gemini: checking the access order"));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h, d_all.to(core::Device::cpu(), stream));
    stream.synchronize();
    std::copy(h.data<int64_t>(), h.data<int64_t>() + world(), all.begin());
  } else {
    COLOSSAL_RETURN_IF_ERROR(finish(pg->all_gather(comm::Buffer::cpu(all.data(), all.size()),
                                                   comm::Buffer::cpu(&param, 1)),
                                    "gemini: checking the access order"));
  }
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
  if (!chunks[c].full.defined()) COLOSSAL_RETURN_IF_ERROR(gather(c));
  return prefetch_ahead();
}

absl::Status GeminiPlugin::State::prefetch_ahead() {
  if (!cuda || options.max_prefetch <= 0 || recording_now()) return absl::OkStatus();
  if (!copy_stream.has_value()) {
    COLOSSAL_ASSIGN_OR_RETURN(core::OwnedStream s, core::OwnedStream::create(stream.device()));
    copy_stream.emplace(std::move(s));
  }
  int issued = 0;
  for (size_t i = cursor; i < order().size() && issued < options.max_prefetch; ++i) {
    GeminiChunk& k = chunks[order()[i]];
    if (k.on_device || k.full.defined()) continue;
    // Not updated yet: nor are the chunks after it (the update follows this
    // order); the next access tries again.
    if (!updater.ready(order()[i])) break;
    ++issued;
    if (k.prefetched.defined()) continue;
    const int64_t n = k.shard_size * esize();
    if (device_used + n > device_limit()) break;  // no room now: gather copies it then
    device_used += n;
    device_peak = std::max(device_peak, device_used);
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
  }
  return absl::OkStatus();
}

void GeminiPlugin::State::drop_prefetches() {
  for (GeminiChunk& k : chunks) {
    if (!k.prefetched.defined()) continue;
    k.prefetch_ready->wait(stream);  // the copy finishes before the memory is reused
    k.prefetched = core::Tensor();
    release_bytes(k.shard_size * esize());
  }
  if (copy_stream.has_value()) copy_stream->get().synchronize();
}

absl::Status GeminiPlugin::State::gather(int c) {
  GeminiChunk& k = chunks[c];
  COLOSSAL_RETURN_IF_ERROR(await_update(c));  // the values the last step wrote
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
      k.prefetched = core::Tensor();
      release_bytes(k.shard_size * esize());
    } else {
      COLOSSAL_RETURN_IF_ERROR(k.full.copy_from(k.value, stream));
    }
    return set_views(c);
  }
  core::Tensor src = k.value;
  if (k.prefetched.defined()) {  // copied in ahead (prefetch_ahead)
    k.prefetch_ready->wait(stream);
    src = k.prefetched;
    k.prefetched = core::Tensor();
    release_bytes(k.shard_size * esize());
  } else if (cuda && !k.on_device) {  // the 16-bit shard crosses PCIe, then the gather
    COLOSSAL_ASSIGN_OR_RETURN(src, k.value.to(stream.device(), stream));
  }
  COLOSSAL_RETURN_IF_ERROR(finish(pg->all_gather(k.full, src, collective()), what));
  ++gathers;
  return set_views(c);
}

void GeminiPlugin::State::release(int c) {
  GeminiChunk& k = chunks[c];
  if (!k.full.defined() || k.compute > 0) return;
  if (!full_is_value(k)) release_bytes(k.spec.numel * esize());
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
  if (grads_in_place(k)) {
    // One rank: the backward accumulates into the shard itself, zeroed first
    // after zero_grad.
    if (k.grad_zero) {
      COLOSSAL_RETURN_IF_ERROR(await_update(c));
      COLOSSAL_RETURN_IF_ERROR(k.grad.set_zero(cuda ? stream : core::Stream::cpu()));
    }
    k.full_grad = k.grad;
  } else {
    COLOSSAL_RETURN_IF_ERROR(
        reserve(k.spec.numel * esize(), c, absl::StrCat("the gradients of chunk ", c)));
    COLOSSAL_ASSIGN_OR_RETURN(k.full_grad, zeros(k.spec.numel, dtype, /*on_device=*/true));
  }
  return set_views(c);
}

absl::Status GeminiPlugin::State::queue_fold(int c, std::shared_ptr<core::Event> landed) {
  GeminiChunk& k = chunks[c];
  if (fold_norms.empty()) fold_norms.assign(2 * chunks.size(), 0.0f);  // no fold runs yet
  const kernels::multi_tensor::AccumulateTensor sum{k.grad.raw_data(), k.staging.raw_data(),
                                                    k.shard_size};
  auto job = [sum, dt = dtype, threads = options.cpu_threads,
              out = fold_norms.data() + 2 * c,
              ready = std::move(landed)](int) -> absl::Status {
    ready->synchronize();
    out[1] = 0.0f;
    return core::from_kernel_status(
        kernels::multi_tensor::accumulate_cpu(out, out + 1, &sum, 1, dt, threads),
        "gemini: accumulating gradients");
  };
  COLOSSAL_RETURN_IF_ERROR(folds.add(static_cast<int>(chunks.size()), c, std::move(job)));
  k.norm_from_fold = true;
  return absl::OkStatus();
}

absl::Status GeminiPlugin::State::norm_before_download(int c, const core::Tensor& part) {
#if COLOSSAL_WITH_CUDA
  GeminiChunk& k = chunks[c];
  const kernels::multi_tensor::TensorRef ref{part.raw_data(), k.shard_size};
  const int64_t bytes = kernels::multi_tensor::l2_norm_cuda_scratch_bytes(&ref, 1);
  if (!chunk_norms.defined()) {
    COLOSSAL_ASSIGN_OR_RETURN(chunk_norms, core::Tensor::empty({2 * static_cast<int64_t>(chunks.size())},
                                                               core::DType::kF32, stream));
  }
  if (!norm_scratch.defined() || norm_scratch.numel() < bytes) {
    COLOSSAL_ASSIGN_OR_RETURN(norm_scratch, core::Tensor::empty({bytes}, core::DType::kU8, stream));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor slot, chunk_norms.slice(2 * c, 2 * c + 2));
  COLOSSAL_RETURN_IF_ERROR(slot.set_zero(stream));  // the flag is only ever set
  float* out = slot.data<float>();
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      kernels::multi_tensor::l2_norm_cuda(out, nullptr, out + 1, nullptr, &ref, norm_scratch.raw_data(),
                                          bytes, 1, dtype, 0.0f, stream.handle()),
      absl::StrCat("gemini: the gradient norm of chunk ", c)));
  k.norm_on_device = true;
#endif
  return absl::OkStatus();
}

void GeminiPlugin::State::retire_downloads(bool wait) {
  while (!downloads.empty() && (wait || downloads.front().done->query())) {
    downloads.front().done->synchronize();
    release_bytes(downloads.front().counted_bytes);
    downloads.pop_front();
  }
}

absl::Status GeminiPlugin::State::ensure_grad_stream() {
  if (grad_stream.has_value()) return absl::OkStatus();
  COLOSSAL_ASSIGN_OR_RETURN(core::OwnedStream gs, core::OwnedStream::create(stream.device()));
  grad_stream.emplace(std::move(gs));
  return absl::OkStatus();
}

void GeminiPlugin::State::sample_device_peak() {
  if (!cuda) return;
  absl::StatusOr<std::shared_ptr<core::Allocator>> a = core::device_allocator(stream.device());
  if (a.ok()) step_peak = std::max(step_peak, (*a)->stats().allocated_bytes);
}

void GeminiPlugin::State::drop_device_sum(GeminiChunk& k) {
  if (!k.device_sum.defined()) return;
  release_bytes(k.device_sum_bytes);
  k.device_sum = core::Tensor();
  k.device_sum_bytes = 0;
  k.sum_pending = false;
}

absl::Status GeminiPlugin::State::choose_sum_on_device() {
  if (backwards > 0) last_step_backwards = backwards;
  backwards = 0;
  bool want = options.device_grad_accumulation && cuda && last_step_backwards > 1 &&
              !placement_changed && evictions == evictions_at_zero_grad;
  int64_t sums = 0, held = 0;  // bytes of every host chunk's sum; those allocated now
  for (const GeminiChunk& k : chunks) {
    if (!host_updated(k)) continue;
    sums += k.shard_size * esize();
    held += k.device_sum_bytes;
  }
  if (sums == 0) want = false;
  // The last step's peak already held the sums allocated then.
  const double ratio = options.placement_policy == "auto" ? options.steady_cuda_cap_ratio : 1.0;
  const int64_t limit = static_cast<int64_t>(static_cast<double>(capacity) * ratio * 0.95);
  if (want && step_peak + sums - held > limit) want = false;
  placement_changed = false;
  evictions_at_zero_grad = evictions;
  step_peak = 0;
  if (!want && held > 0) {
    COLOSSAL_RETURN_IF_ERROR(settle());  // the last updates may read the sums
    retire_downloads(/*wait=*/true);
    for (GeminiChunk& k : chunks) drop_device_sum(k);
  }
  sum_on_device = want;
  device_sum_steps += want ? 1 : 0;
  return absl::OkStatus();
}

absl::Status GeminiPlugin::State::add_to_device_sum(int c, core::Tensor part, int64_t counted) {
#if COLOSSAL_WITH_CUDA
  GeminiChunk& k = chunks[c];
  const kernels::multi_tensor::AccumulateTensor sum{k.device_sum.raw_data(), part.raw_data(),
                                                    k.shard_size};
  if (!accum_scratch.defined()) {
    // Sized once, for the largest chunk: a scratch replaced while an earlier
    // add still ran on the gradient stream would go back to the compute
    // stream's pool under it.
    int64_t largest = 0;
    for (const GeminiChunk& x : chunks) {
      const kernels::multi_tensor::AccumulateTensor t{nullptr, nullptr, x.shard_size};
      largest = std::max(largest, kernels::multi_tensor::accumulate_cuda_scratch_bytes(&t, 1));
    }
    COLOSSAL_ASSIGN_OR_RETURN(accum_scratch, core::Tensor::empty({largest}, core::DType::kU8, stream));
  }
  const int64_t bytes = accum_scratch.numel();
  if (!chunk_norms.defined()) {
    COLOSSAL_ASSIGN_OR_RETURN(chunk_norms, core::Tensor::empty({2 * static_cast<int64_t>(chunks.size())},
                                                               core::DType::kF32, stream));
  }
  COLOSSAL_RETURN_IF_ERROR(ensure_grad_stream());
  const core::Stream gs = grad_stream->get();
  COLOSSAL_ASSIGN_OR_RETURN(core::Event reduced, core::Event::create(stream.device()));
  reduced.record(stream);  // the part, and the scratch's last use on the compute stream
  reduced.wait(gs);
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor slot, chunk_norms.slice(2 * c, 2 * c + 2));
  COLOSSAL_RETURN_IF_ERROR(slot.set_zero(gs));  // accumulate only ever sets the flag
  float* out = slot.data<float>();
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      kernels::multi_tensor::accumulate_cuda(out, out + 1, &sum, accum_scratch.raw_data(), bytes, 1,
                                             dtype, gs.handle()),
      absl::StrCat("gemini: summing the gradients of chunk ", c, " on the device")));
  COLOSSAL_ASSIGN_OR_RETURN(core::Event added, core::Event::create(stream.device()));
  added.record(gs);
  downloads.push_back({std::move(part), counted, std::make_shared<core::Event>(std::move(added))});
  k.norm_on_device = true;
  return absl::OkStatus();
#else
  return absl::InternalError("gemini: device sums without CUDA");
#endif
}

absl::Status GeminiPlugin::State::reduce(int c) {
  GeminiChunk& k = chunks[c];
  if (!k.full_grad.defined()) {  // no parameter of the chunk was used: zero gradients
    COLOSSAL_RETURN_IF_ERROR(ensure_grad(c, "(unused)"));
  }
  const std::string what = absl::StrCat("gemini: reducing the gradients of chunk ", c);
  COLOSSAL_RETURN_IF_ERROR(await_update(c));  // its Adam may still read the gradient shard
  COLOSSAL_RETURN_IF_ERROR(await_fold(c));    // the last micro-batch's fold reads the staging
  // Each reduction decides anew who takes the norm (a chunk may have moved
  // tiers since the last one): the device before a first download, the fold
  // after a later one, else the step's pass.
  k.norm_on_device = false;
  k.norm_from_fold = false;
  // Every path ends here: the chunk holds this step's gradients, its
  // gathered gradient buffer is gone (or handed on).
  auto reduced = [&]() -> absl::Status {
    k.grad_zero = false;
    k.full_grad = core::Tensor();
    k.reduced = true;
    return set_views(c);
  };
  if (grads_in_place(k)) return reduced();  // accumulated in place already
  core::Tensor part = k.full_grad;  // this rank's averaged gradients, on the device
  if (world() > 1 && k.sharded) {
    COLOSSAL_ASSIGN_OR_RETURN(part, core::Tensor::empty({k.shard_size}, dtype, stream));
    COLOSSAL_RETURN_IF_ERROR(
        finish(pg->reduce_scatter(part, k.full_grad, comm::ReduceOp::kAvg, collective()), what));
  } else if (world() > 1) {
    COLOSSAL_RETURN_IF_ERROR(finish(pg->all_reduce(k.full_grad, comm::ReduceOp::kAvg, collective()), what));
  }
  if ((k.on_device || !cuda) && k.grad_zero) {  // the first backward since zero_grad
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor mine, part.slice(0, k.shard_size));
    COLOSSAL_RETURN_IF_ERROR(k.grad.copy_from(mine, cuda ? stream : core::Stream::cpu()));
  } else if (k.on_device || !cuda) {
    // The CPU build adds on the host; CUDA adds on the device in the model's dtype.
#if COLOSSAL_WITH_CUDA
    if (cuda) {
      COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
          kernels::elementwise::binary_cuda(k.grad.raw_data(), k.grad.raw_data(), part.raw_data(),
                                            k.shard_size, dtype, kernels::elementwise::BinaryOp::kAdd,
                                            stream.handle()),
          what));
    }
#endif
    if (!cuda) {
      COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
          kernels::elementwise::binary_cpu(k.grad.raw_data(), k.grad.raw_data(), part.raw_data(),
                                           k.shard_size, dtype, kernels::elementwise::BinaryOp::kAdd),
          what));
    }
  } else {
    // A host chunk: the part crosses PCIe in 16 bits on the gradient stream,
    // into the gradient shard itself after zero_grad, else into the chunk's
    // staging buffer, which the fold worker adds into the shard once it
    // lands (taking the sum's norm on the way). The step waits for the
    // copies and the folds before reading the shards. When this step sums
    // on the device (sum_on_device), the parts are added there instead and
    // step() downloads each sum once.
    retire_downloads(/*wait=*/false);
    const bool first = k.grad_zero;
    // When the source is the gathered gradient buffer itself (one rank, or a
    // whole chunk), its bytes stay counted until the copy lands.
    const bool source_is_full = part.raw_data() == k.full_grad.raw_data();
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor mine, part.slice(0, k.shard_size));
    if (sum_on_device) {
      // Summed on the device; step() downloads the sum. The first part's
      // norm is the one-micro-batch step's (a later part replaces it).
      if (first) {
        COLOSSAL_RETURN_IF_ERROR(norm_before_download(c, mine));
        drop_device_sum(k);  // the last step's (its update and download are done)
        if (source_is_full) {  // its bytes are counted already
          k.device_sum_bytes = k.spec.numel * esize();
        } else {
          release_bytes(k.spec.numel * esize());
          k.device_sum_bytes = k.shard_size * esize();
          device_used += k.device_sum_bytes;
          device_peak = std::max(device_peak, device_used);
        }
        k.device_sum = std::move(mine);
      } else {
        const int64_t counted = source_is_full ? k.spec.numel * esize() : 0;
        COLOSSAL_RETURN_IF_ERROR(add_to_device_sum(c, std::move(mine), counted));
        if (!source_is_full) release_bytes(k.spec.numel * esize());
      }
      k.sum_pending = true;
      return reduced();
    }
    COLOSSAL_RETURN_IF_ERROR(ensure_grad_stream());
    COLOSSAL_ASSIGN_OR_RETURN(core::Event reduced_event, core::Event::create(stream.device()));
    reduced_event.record(stream);
    reduced_event.wait(grad_stream->get());
    if (first) {
      COLOSSAL_RETURN_IF_ERROR(norm_before_download(c, mine));
      COLOSSAL_RETURN_IF_ERROR(k.grad.copy_from(mine, grad_stream->get()));
    } else {
      if (!k.staging.defined()) {  // no zeros: the download overwrites it
        COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<core::Allocator> pinned, core::pinned_host_allocator());
        COLOSSAL_ASSIGN_OR_RETURN(k.staging, core::Tensor::empty({k.shard_size}, dtype, stream, pinned));
      }
      COLOSSAL_RETURN_IF_ERROR(k.staging.copy_from(mine, grad_stream->get()));
    }
    COLOSSAL_ASSIGN_OR_RETURN(core::Event event, core::Event::create(stream.device()));
    event.record(grad_stream->get());
    auto landed = std::make_shared<core::Event>(std::move(event));
    if (!first) COLOSSAL_RETURN_IF_ERROR(queue_fold(c, landed));
    const int64_t counted = source_is_full ? k.spec.numel * esize() : 0;
    downloads.push_back({std::move(part), counted, std::move(landed)});
    if (!source_is_full) release_bytes(k.spec.numel * esize());
    return reduced();
  }
  release_bytes(k.spec.numel * esize());
  return reduced();
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
  const int64_t budget = static_cast<int64_t>(capacity * options.steady_cuda_cap_ratio) -
                         peak_non_model - working;
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
  COLOSSAL_RETURN_IF_ERROR(
      finish(pg->all_gather(whole, src, collective()), "gemini: gathering a chunk for a checkpoint"));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h, whole.to(core::Device::cpu(), stream));
  if (cuda) stream.synchronize();
  return h;
}

}  // namespace colossal::parallel
