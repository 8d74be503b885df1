// The gemini plugin's gradients: the gathered gradient buffers, their
// reduction into the ranks' shards (collectives left in flight beside the
// backward), and, for host chunks, the downloads, host folds and device sums.
#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bazel/cuda_config.h"
#include "core/alloc/allocator.h"
#include "core/alloc/default_allocator.h"
#include "core/ops/elementwise.h"
#include "core/status/status.h"
#include "core/trace/trace.h"
#include "kernels/multi_tensor/multi_tensor.h"
#include "parallel/gemini/gemini_state.h"

namespace colossal::parallel {

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
              ready = std::move(landed), c](int) -> absl::Status {
    ready->synchronize();
    std::optional<core::trace::Span> span;
    if (core::trace::enabled()) span.emplace("gemini", absl::StrCat("fold chunk ", c, " (cpu)"));
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

absl::StatusOr<std::shared_ptr<core::Event>> GeminiPlugin::State::download(int c, const core::Tensor& src,
                                                                            core::Tensor dst) {
  COLOSSAL_RETURN_IF_ERROR(ensure_grad_stream());
  const core::Stream gs = grad_stream->get();
  COLOSSAL_ASSIGN_OR_RETURN(core::Event reduced, core::Event::create(stream.device()));
  reduced.record(stream);
  reduced.wait(gs);
  std::optional<core::trace::Span> span;
  if (core::trace::enabled()) span.emplace("gemini", absl::StrCat("download chunk ", c, " gradients"), &gs);
  COLOSSAL_RETURN_IF_ERROR(dst.copy_from(src, gs));
  COLOSSAL_ASSIGN_OR_RETURN(core::Event landed, core::Event::create(stream.device()));
  landed.record(gs);
  return std::make_shared<core::Event>(std::move(landed));
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
  k.sum_current = false;
}

absl::Status GeminiPlugin::State::choose_sum_on_device() {
  if (backwards > 0) last_step_backwards = backwards;
  backwards = 0;
  // One backward a step: the sums serve the GPU's share of host Adam, which
  // reads them where they are instead of the downloaded copy through PCIe
  // (not under auto, whose device memory holds chunks instead).
  const bool for_gpu_share = last_step_backwards == 1 && options.gpu_shares_host_adam &&
                             options.placement_policy != "auto";
  bool want = options.device_grad_accumulation && cuda && (last_step_backwards > 1 || for_gpu_share) &&
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
  // The gathered gradient buffer leaves the chunk now (a later write to it
  // fails in ensure_grad); the reduction holds it until it is finished.
  Reduction r{c, std::move(k.full_grad), core::Tensor(), nullptr};
  k.full_grad = core::Tensor();
  k.reduced = true;
  COLOSSAL_RETURN_IF_ERROR(set_views(c));
  if (grads_in_place(k)) {  // accumulated in place already
    k.grad_zero = false;
    return absl::OkStatus();
  }
  r.part = r.full_grad;  // this rank's averaged gradients, on the device
  if (world() > 1) {
    absl::StatusOr<comm::WorkPtr> work;
    if (k.sharded) {
      if ((k.on_device || !cuda) && k.grad_zero) {
        r.part = k.grad;  // the first backward since zero_grad: into the shard itself
      } else {
        COLOSSAL_ASSIGN_OR_RETURN(r.part, core::Tensor::empty({k.shard_size}, dtype, stream));
      }
      work = pg->reduce_scatter(r.part, r.full_grad, comm::ReduceOp::kAvg, collective());
    } else {
      work = pg->all_reduce(r.full_grad, comm::ReduceOp::kAvg, collective());
    }
    if (!work.ok()) return core::annotate(work.status(), what);
    r.work = *std::move(work);
    // The collective runs beside the backward of the modules before; the
    // oldest in flight is finished once more than two are.
    reductions.push_back(std::move(r));
    while (reductions.size() > 2) COLOSSAL_RETURN_IF_ERROR(finish_oldest_reduction());
    return absl::OkStatus();
  }
  return finish_reduce(std::move(r));
}

absl::Status GeminiPlugin::State::settle_reduce(int c) {
  for (auto it = reductions.begin(); it != reductions.end(); ++it) {
    if (it->chunk != c) continue;
    Reduction r = std::move(*it);
    reductions.erase(it);
    return finish_reduce(std::move(r));
  }
  return absl::OkStatus();
}

absl::Status GeminiPlugin::State::settle_reductions() {
  absl::Status status;
  // Every one, even after an error: their buffers are in use.
  while (!reductions.empty()) status.Update(finish_oldest_reduction());
  return status;
}

absl::Status GeminiPlugin::State::finish_oldest_reduction() {
  Reduction oldest = std::move(reductions.front());
  reductions.pop_front();
  return finish_reduce(std::move(oldest));
}

absl::Status GeminiPlugin::State::finish_reduce(Reduction r) {
  const int c = r.chunk;
  GeminiChunk& k = chunks[c];
  const std::string what = absl::StrCat("gemini: reducing the gradients of chunk ", c);
  if (r.work != nullptr) COLOSSAL_RETURN_IF_ERROR(finish(r.work, what));
  core::Tensor part = std::move(r.part);
  // Every path ends here: the chunk holds this step's gradients.
  auto reduced = [&]() -> absl::Status {
    k.grad_zero = false;
    return absl::OkStatus();
  };
  if ((k.on_device || !cuda) && k.grad_zero) {  // the first backward since zero_grad
    if (part.raw_data() != k.grad.raw_data()) {   // else reduced into the shard itself
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor mine, part.slice(0, k.shard_size));
      COLOSSAL_RETURN_IF_ERROR(k.grad.copy_from(mine, cuda ? stream : core::Stream::cpu()));
    }
  } else if (k.on_device || !cuda) {
    // The CPU build adds on the host; CUDA adds on the device in the model's dtype.
    COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor mine, part.slice(0, k.shard_size));
    COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor into, k.grad.slice(0, k.shard_size));
    COLOSSAL_RETURN_IF_ERROR(
        core::annotate(core::ops::add(cuda ? stream : core::Stream::cpu(), into, into, mine), what));
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
    const bool source_is_full = part.raw_data() == r.full_grad.raw_data();
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
        k.sum_current = true;
        if (last_step_backwards == 1) {
          // One micro-batch expected: the sum crosses now, beside the
          // backward, as a download would (a later part adds to the sum after
          // this copy, on the same stream, and the step downloads it again).
          COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<core::Event> landed, download(c, k.device_sum, k.grad));
          downloads.push_back({core::Tensor(), 0, std::move(landed)});  // the step waits for it
          return reduced();
        }
      } else {
        const int64_t counted = source_is_full ? k.spec.numel * esize() : 0;
        COLOSSAL_RETURN_IF_ERROR(add_to_device_sum(c, std::move(mine), counted));
        if (!source_is_full) release_bytes(k.spec.numel * esize());
      }
      k.sum_pending = true;
      return reduced();
    }
    if (first) {
      COLOSSAL_RETURN_IF_ERROR(norm_before_download(c, mine));
    } else if (!k.staging.defined()) {  // no zeros: the download overwrites it
      COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<core::Allocator> pinned, core::pinned_host_allocator());
      COLOSSAL_ASSIGN_OR_RETURN(k.staging, core::Tensor::empty({k.shard_size}, dtype, stream, pinned));
    }
    COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<core::Event> landed, download(c, mine, first ? k.grad : k.staging));
    if (!first) COLOSSAL_RETURN_IF_ERROR(queue_fold(c, landed));
    const int64_t counted = source_is_full ? k.spec.numel * esize() : 0;
    downloads.push_back({std::move(part), counted, std::move(landed)});
    if (!source_is_full) release_bytes(k.spec.numel * esize());
    return reduced();
  }
  release_bytes(k.spec.numel * esize());
  return reduced();
}

}  // namespace colossal::parallel
