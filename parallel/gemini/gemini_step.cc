// The gemini plugin's optimizer step (see the header): the global norm over
// every rank's gradient shards, clipping and loss scaling folded into Adam's
// grad_scale, the device shards updated by the CUDA Adam kernel and the host
// shards by CPU Adam and (CUDA) the GPU's share of it on the updater's two
// lanes, which write the 16-bit values the next gather copies in (or, from
// the GPU's lane, leave on the device).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bazel/cuda_config.h"
#include "core/device/device.h"
#include "core/device/stream.h"
#include "core/status/status.h"
#include "core/trace/trace.h"
#include "kernels/adam/adam.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/multi_tensor/multi_tensor.h"
#include "nn/optim/adam.h"
#include "parallel/gemini/gemini_plugin.h"
#include "parallel/gemini/gemini_state.h"

namespace colossal::parallel {
namespace {

// Sum of squares (and whether any is non-finite) of this rank's share of the
// gradients: a whole chunk's gradients are on every rank, rank 0 counts them.
struct NormParts {
  double sum = 0.0;
  bool non_finite = false;
};

absl::StatusOr<NormParts> local_norm(GeminiPlugin::State& s) {
  NormParts out;
  // Adds one (norm, inf/NaN flag) pair: a fold's, the host pass's, the device's.
  auto add = [&out](const float* pair) {
    const double norm = pair[0];
    out.sum += norm * norm;
    out.non_finite = out.non_finite || pair[1] != 0.0f || !std::isfinite(norm);
  };
  std::vector<kernels::multi_tensor::TensorRef> device, host;
  std::vector<int> taken;  // host chunks whose norm the device took before the download
  for (size_t c = 0; c < s.chunks.size(); ++c) {
    const GeminiChunk& k = s.chunks[c];
    if (!k.sharded && s.rank() != 0) continue;
    if (k.norm_on_device) {
      taken.push_back(static_cast<int>(c));
    } else if (k.norm_from_fold) {  // the fold took it (step waited for the folds)
      add(s.fold_norms.data() + 2 * c);
    } else {
      (s.cuda && k.on_device ? device : host).push_back({k.grad.raw_data(), k.shard_size});
    }
  }
#if COLOSSAL_WITH_CUDA
  // The device's share first (the device-resident shards' norm, and the norms
  // taken before the downloads), copied back on the stream; the host's pass
  // runs meanwhile; one sync reads both.
  core::Tensor device_norm, taken_norms;
  if (!device.empty()) {
    const int64_t n = static_cast<int64_t>(device.size());
    const int64_t scratch_bytes = kernels::multi_tensor::l2_norm_cuda_scratch_bytes(device.data(), n);
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor scratch,
                              core::Tensor::empty({std::max<int64_t>(scratch_bytes, 1)},
                                                  core::DType::kU8, s.stream));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor d, core::Tensor::empty({2}, core::DType::kF32, s.stream));
    COLOSSAL_RETURN_IF_ERROR(d.set_zero(s.stream));
    float* p = d.data<float>();
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
        kernels::multi_tensor::l2_norm_cuda(p, nullptr, p + 1, nullptr, device.data(), scratch.raw_data(),
                                            scratch_bytes, n, s.dtype, 0.0f, s.stream.handle()),
        "gemini: gradient norm"));
    COLOSSAL_ASSIGN_OR_RETURN(device_norm, d.to(core::Device::cpu(), s.stream));
  }
  if (!taken.empty()) {
    COLOSSAL_ASSIGN_OR_RETURN(taken_norms, s.chunk_norms.to(core::Device::cpu(), s.stream));
  }
#endif
  if (!host.empty()) {
    float pair[2] = {0.0f, 0.0f};  // norm, inf/NaN flag
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
        kernels::multi_tensor::l2_norm_cpu(&pair[0], nullptr, &pair[1], nullptr, host.data(),
                                           static_cast<int64_t>(host.size()), s.dtype, 0.0f,
                                           s.options.cpu_threads),
        "gemini: gradient norm"));
    add(pair);
  }
#if COLOSSAL_WITH_CUDA
  if (device.empty() && taken.empty()) return out;
  s.stream.synchronize();
  // The device-resident shards' pair, then each taken chunk's.
  if (device_norm.defined()) add(device_norm.data<float>());
  for (int c : taken) add(taken_norms.data<float>() + 2 * c);
#endif
  return out;
}

// The squared global norm and the non-finite flag summed over the ranks.
absl::StatusOr<std::pair<double, bool>> global_norm(GeminiPlugin::State& s, const NormParts& mine) {
  float v[2] = {static_cast<float>(mine.sum), mine.non_finite ? 1.0f : 0.0f};
  if (s.world() > 1) {
    if (s.cuda) {  // NCCL reduces device memory
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor h, core::Tensor::empty({2}, core::DType::kF32, core::Stream::cpu()));
      std::copy(v, v + 2, h.data<float>());
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor d, h.to(s.stream.device(), s.stream));
      COLOSSAL_RETURN_IF_ERROR(
          s.finish(s.pg->all_reduce(d, comm::ReduceOp::kSum, s.collective()), "gemini: gradient norm"));
      COLOSSAL_ASSIGN_OR_RETURN(h, d.to(core::Device::cpu(), s.stream));
      s.stream.synchronize();
      std::copy(h.data<float>(), h.data<float>() + 2, v);
    } else {
      COLOSSAL_RETURN_IF_ERROR(s.finish(s.pg->all_reduce(comm::Buffer::cpu(v, 2), comm::ReduceOp::kSum),
                                        "gemini: gradient norm"));
    }
  }
  return std::make_pair(static_cast<double>(v[0]), v[1] != 0.0f);
}

// One Adam call: a piece of a chunk's shard with its group's options.
struct AdamCall {
  kernels::adam::AdamOptions options;
  void* master;  // float32 masters, or (split) their low halves
  float* exp_avg;
  float* exp_avg_sq;
  void* value;  // the 16-bit values (the master's rounding); null for float32
  const void* grad;
  int64_t count;
  int group;
  bool split;  // master and value are a split master's halves

  // The call with its 16-bit values read and written at `values` instead of
  // `from` (another buffer of the same layout).
  AdamCall with_values(const void* from, void* values) const {
    AdamCall p = *this;
    p.value = static_cast<char*>(values) + (static_cast<char*>(value) - static_cast<const char*>(from));
    return p;
  }

  // The call's elements [at, at + n).
  AdamCall part(int64_t at, int64_t n, int64_t esize) const {
    AdamCall p = *this;
    p.master = static_cast<char*>(master) + at * (split ? 2 : 4);
    p.exp_avg += at;
    p.exp_avg_sq += at;
    if (value != nullptr) p.value = static_cast<char*>(value) + at * esize;
    p.grad = static_cast<const char*>(grad) + at * esize;
    p.count = n;
    return p;
  }
};

// `grad`: the gradient shard to read (the chunk's, or its device sum).
std::vector<AdamCall> adam_calls(GeminiPlugin::State& s, GeminiChunk& k, const core::Tensor& grad,
                                 float grad_scale) {
  std::vector<AdamCall> out;
  const int64_t es = s.esize();
  for (const GeminiPiece& p : k.pieces) {
    AdamCall whole{nn::kernel_adam_options(s.optimizer->group_hyper(p.group), s.steps, grad_scale),
                   k.master.raw_data(), k.exp_avg.data<float>(), k.exp_avg_sq.data<float>(),
                   s.sixteen_bit() ? k.value.raw_data() : nullptr, grad.raw_data(), 0, p.group,
                   s.split_master()};
    out.push_back(whole.part(p.offset, p.count, es));
  }
  return out;
}

// Runs one call with CPU Adam.
kernels::KernelStatus adam_cpu(const AdamCall& a, kernels::DType dtype, kernels::DType copy,
                               const kernels::adam::AdamCpuOptions& cpu) {
  if (a.split) {
    return kernels::adam::adam_step_split_cpu(static_cast<uint16_t*>(a.value), static_cast<int16_t*>(a.master),
                                              a.exp_avg, a.exp_avg_sq, a.grad, nullptr, a.count, dtype,
                                              a.options, cpu);
  }
  return kernels::adam::adam_step_cpu(static_cast<float*>(a.master), a.exp_avg, a.exp_avg_sq, a.value,
                                      a.grad, nullptr, a.count, dtype, copy, a.options, cpu);
}

#if COLOSSAL_WITH_CUDA
// Runs one call with the CUDA kernel on `stream`.
kernels::KernelStatus adam_cuda(const AdamCall& a, kernels::DType dtype, kernels::DType copy,
                                const core::Stream& stream) {
  if (a.split) {
    return kernels::adam::adam_step_split_cuda(static_cast<uint16_t*>(a.value), static_cast<int16_t*>(a.master),
                                               a.exp_avg, a.exp_avg_sq, a.grad, nullptr, a.count, dtype,
                                               a.options, stream.handle());
  }
  return kernels::adam::adam_step_cuda(static_cast<float*>(a.master), a.exp_avg, a.exp_avg_sq, a.value,
                                       a.grad, nullptr, a.count, dtype, copy, a.options, stream.handle());
}
#endif

// Waits for a device event by polling: a blocking wait would spin a core
// that CPU Adam uses.
void await_event(const core::Event& e) {
  while (!e.query()) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

#if COLOSSAL_WITH_CUDA
// A host chunk's Adam on the GPU (the updater's lane 1): the kernel reads and
// writes the pinned host state through its UVA address, so PCIe carries the
// chunk's state both ways (no staging copies). It launches `slice` elements
// at a time (default 1M: 64 blocks of the Adam kernel). Its blocks wait on
// PCIe for most of their life; launched over a whole chunk they held every
// SM for the ~15 ms the chunk's state takes to cross, and the next forward's
// kernels, which overlap the update, waited behind them (measured on the
// 1.5B model: the forward ended ~65 ms after the last update, ~12 ms with
// slices). 64 blocks still keep PCIe busy and leave most SMs to the forward.
absl::Status enqueue_device_update(int c, const std::vector<AdamCall>& calls, kernels::DType dtype,
                                   kernels::DType copy, int64_t slice, const core::Stream& stream) {
  const int64_t esize = static_cast<int64_t>(core::dtype_size(dtype));
  for (const AdamCall& a : calls) {
    for (int64_t at = 0; at < a.count; at += slice) {
      COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
          adam_cuda(a.part(at, std::min(slice, a.count - at), esize), dtype, copy, stream),
          absl::StrCat("gemini: Adam step of chunk ", c, " on the GPU, group ", a.group)));
    }
  }
  return absl::OkStatus();
}

// Runs on the updater's GPU lane: chunk c's update, in place on the host, or,
// when a value slot is free, with its 16-bit values copied into the slot,
// updated there and copied back, the slot then handed over to the next
// forward (State::value_slots).
absl::Status device_update(GeminiPlugin::State& s, int c, const std::vector<AdamCall>& calls,
                           kernels::DType dtype, kernels::DType copy, const core::Stream& stream) {
  core::DeviceGuard guard(stream.device());  // the worker thread's device
  GeminiChunk& k = s.chunks[c];
  const int64_t slice = s.options.gpu_host_adam_slice;
  const int slot = s.sixteen_bit() ? s.take_value_slot(k.shard_size) : -1;
  if (slot < 0) {
    COLOSSAL_RETURN_IF_ERROR(enqueue_device_update(c, calls, dtype, copy, slice, stream));
    COLOSSAL_ASSIGN_OR_RETURN(core::Event done, core::Event::create(stream.device()));
    done.record(stream);
    await_event(done);
    return absl::OkStatus();
  }
  // Until handed over, the slot is this lane's: an error gives it back.
  absl::Status status = [&]() -> absl::Status {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor values, s.value_slots[slot].buffer.slice(0, k.shard_size));
    COLOSSAL_RETURN_IF_ERROR(values.copy_from(k.value, stream));
    std::vector<AdamCall> in_slot;
    for (const AdamCall& a : calls) in_slot.push_back(a.with_values(k.value.raw_data(), values.raw_data()));
    COLOSSAL_RETURN_IF_ERROR(enqueue_device_update(c, in_slot, dtype, copy, slice, stream));
    COLOSSAL_ASSIGN_OR_RETURN(core::Event updated, core::Event::create(stream.device()));
    updated.record(stream);
    COLOSSAL_RETURN_IF_ERROR(k.value.copy_from(values, stream));
    COLOSSAL_ASSIGN_OR_RETURN(core::Event done, core::Event::create(stream.device()));
    done.record(stream);
    await_event(done);
    k.handed_ready = std::make_shared<core::Event>(std::move(updated));
    k.handed_slot = slot;
    ++s.value_handovers;
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    stream.synchronize();  // nothing enqueued may still write the slot
    s.give_back_slot(slot, nullptr);
  }
  return status;
}
#endif

// Chunk c's device sum copied into its gradient shard (State::download: on
// the gradient stream, after the compute stream's work); the event marks the
// landing.
absl::StatusOr<std::shared_ptr<core::Event>> download_sum(GeminiPlugin::State& s, int c) {
  GeminiChunk& k = s.chunks[c];
  COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<core::Event> landed, s.download(c, k.device_sum, k.grad));
  k.sum_pending = false;
  return landed;
}

// The host-updated chunks in the order of the next forward's first uses
// (the recorded forward order), then any the forward does not use.
std::vector<int> host_update_order(const GeminiPlugin::State& s) {
  std::vector<char> seen(s.chunks.size(), 0);
  std::vector<int> out;
  auto add = [&](int c) {
    if (seen[c] || !s.host_updated(s.chunks[c])) return;
    seen[c] = 1;
    out.push_back(c);
  };
  for (int c : s.orders[0]) add(c);
  for (size_t c = 0; c < s.chunks.size(); ++c) add(static_cast<int>(c));
  return out;
}

}  // namespace

absl::StatusOr<nn::MixedPrecisionStepResult> GeminiPlugin::step(nn::DynamicLossScaler* scaler,
                                                                 float max_norm) {
  State& s = *state_;
  if (!s.boosted) return absl::FailedPreconditionError("gemini: step before boost");
  if (scaler != nullptr && !s.cuda) {
    return absl::UnimplementedError(
        "gemini: loss scaling is for 16-bit chunks, which the CPU path does not have; train in "
        "float32 without a scaler");
  }
  if (!std::isfinite(max_norm) || max_norm < 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("gemini: max_norm must be >= 0 (0: no clipping), got ", max_norm));
  }
  COLOSSAL_RETURN_IF_ERROR(s.settle());  // the last step's host updates (the gathers waited for most)
  // Every gradient copy lands, and every staged part is folded in, before
  // the host reads the shards or zeroes them (one from before zero_grad
  // could still be in flight).
  if (s.cuda) s.stream.synchronize();
  s.retire_downloads(/*wait=*/true);
  COLOSSAL_RETURN_IF_ERROR(s.folds.wait_all());
  for (size_t c = 0; c < s.chunks.size(); ++c) {
    GeminiChunk& k = s.chunks[c];
    // No backward reached it since zero_grad: its gradients are zero.
    if (k.grad_zero) {
      COLOSSAL_RETURN_IF_ERROR(k.grad.set_zero(s.cuda && k.on_device ? s.stream : core::Stream::cpu()));
    }
  }
  COLOSSAL_ASSIGN_OR_RETURN(NormParts mine, local_norm(s));
  COLOSSAL_ASSIGN_OR_RETURN(auto total, global_norm(s, mine));

  // As nn::mixed_precision_step: s = the scale the loss was multiplied by.
  nn::MixedPrecisionStepResult r;
  r.loss_scale = scaler != nullptr ? scaler->scale() : 1.0f;
  const float scaled_norm = static_cast<float>(std::sqrt(total.first));
  const double norm = static_cast<double>(scaled_norm) / r.loss_scale;
  r.grad_norm = r.loss_scale == 1.0f ? scaled_norm : static_cast<float>(norm);
  const bool finite = !total.second && std::isfinite(r.grad_norm);
  if (scaler != nullptr) scaler->update(!finite);
  if (!finite) {
    r.skipped = true;  // on every rank: they all saw the same sums
    return r;
  }
  if (max_norm > 0.0f) {  // as nn::clip_grad_by_norm: in double, eps 1e-6
    const double coef = static_cast<double>(max_norm) / (norm + 1e-6);
    r.clip_coef = coef < 1.0 ? static_cast<float>(coef) : 1.0f;
  }
  const float grad_scale = r.clip_coef < 1.0f ? r.loss_scale / r.clip_coef : r.loss_scale;
  ++s.steps;
  kernels::adam::AdamCpuOptions cpu;
  cpu.num_threads = s.options.cpu_threads;
  const kernels::DType dtype = s.dtype;
  const kernels::DType copy = s.sixteen_bit() ? s.dtype : kernels::DType::kF32;
#if COLOSSAL_WITH_CUDA
  // The device shards: kernels queued on the stream, before the host starts.
  for (size_t c = 0; c < s.chunks.size(); ++c) {
    if (s.host_updated(s.chunks[c])) continue;
    for (const AdamCall& a : adam_calls(s, s.chunks[c], s.chunks[c].grad, grad_scale)) {
      COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
          adam_cuda(a, dtype, copy, s.stream), absl::StrCat("gemini: Adam step of chunk ", c, ", group ", a.group)));
    }
  }
#endif
  // The host shards: Adam on the updater's workers, chunk by chunk in the
  // next forward's order; the forward's gathers wait for their chunk only.
  // Lane 0 runs CPU Adam; lane 1 (CUDA) has the Adam kernel read and write
  // the chunk's pinned host state in place (UVA; its 16-bit values in a
  // value slot when one is free) and waits for it.
  const int lanes = s.cuda && s.options.gpu_shares_host_adam ? 2 : 1;
  if (lanes == 2 && !s.host_adam_stream.has_value()) {
    COLOSSAL_ASSIGN_OR_RETURN(core::OwnedStream hs, core::OwnedStream::create(s.stream.device()));
    s.host_adam_stream.emplace(std::move(hs));
  }
  const core::Stream device_stream = lanes == 2 ? s.host_adam_stream->get() : s.stream;
  if (lanes == 2) COLOSSAL_RETURN_IF_ERROR(s.ensure_value_slots());
  std::vector<std::pair<int, ChunkUpdater::Job>> jobs;
  for (int c : host_update_order(s)) {
    GeminiChunk& k = s.chunks[c];
    // A sum kept on the device (State::sum_on_device) crosses PCIe now, in
    // the updates' order, while the earlier chunks update, unless it crossed
    // during the backward (one micro-batch); the GPU's lane reads it where it
    // is. Either lane waits for the copy before it ends, so the next
    // reduction may replace the sum.
    std::shared_ptr<core::Event> landed;
    std::vector<AdamCall> device_calls;
    if (k.sum_current) device_calls = adam_calls(s, k, k.device_sum, grad_scale);
    if (k.sum_pending) {
      COLOSSAL_ASSIGN_OR_RETURN(landed, download_sum(s, c));
    }
    jobs.emplace_back(c, [&s, c, calls = adam_calls(s, k, k.grad, grad_scale),
                          device_calls = std::move(device_calls), landed, dtype, copy, cpu,
                          device_stream](int lane) -> absl::Status {
      std::optional<core::trace::Span> span;
      if (core::trace::enabled()) {
        span.emplace("adam", absl::StrCat("adam chunk ", c, lane == 1 ? " (GPU lane)" : " (CPU)"));
      }
#if COLOSSAL_WITH_CUDA
      if (lane == 1) {
        ++s.gpu_host_updates;
        COLOSSAL_RETURN_IF_ERROR(
            device_update(s, c, device_calls.empty() ? calls : device_calls, dtype, copy, device_stream));
        if (landed) await_event(*landed);
        return absl::OkStatus();
      }
#endif
      if (landed) await_event(*landed);
      for (const AdamCall& a : calls) {
        COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
            adam_cpu(a, dtype, copy, cpu), absl::StrCat("gemini: Adam step of chunk ", c, ", group ", a.group)));
      }
      return absl::OkStatus();
    });
  }
  COLOSSAL_RETURN_IF_ERROR(s.updater.start(static_cast<int>(s.chunks.size()), std::move(jobs), lanes));
  if (s.options.placement_policy == "auto" && !s.auto_placed) {
    COLOSSAL_RETURN_IF_ERROR(s.settle());  // the warm-up step's placement moves updated chunks
    COLOSSAL_RETURN_IF_ERROR(s.place_auto());
  }
  return r;
}

}  // namespace colossal::parallel
