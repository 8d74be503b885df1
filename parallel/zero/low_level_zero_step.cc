// The low_level_zero plugin's optimizer step (see the plugin header): the
// global gradient norm over the ranks' slices, clipping, Adam on this rank's
// slice, and the all_gather of the slices into the flat parameter buffer.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bazel/cuda_config.h"
#include "core/device/device.h"
#include "core/status/status.h"
#include "core/tensor/tensor.h"
#include "kernels/adam/adam.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/multi_tensor/multi_tensor.h"
#include "nn/optim/adam.h"
#include "parallel/zero/low_level_zero_state.h"

namespace colossal::parallel {

// The CUDA step (see the header's "CUDA" section).
static absl::StatusOr<nn::MixedPrecisionStepResult> step_cuda(LowLevelZeroPlugin::State& s,
                                                              nn::DynamicLossScaler* scaler,
                                                              float max_norm) {
#if COLOSSAL_WITH_CUDA
  const core::Stream& st = s.stream;
  const int64_t n = s.shard.end - s.shard.begin;
  const int64_t es = s.esize();
  // g: this rank's reduced gradients of its slice, in the gradient dtype.
  const char* g = s.options.stage == 1
                      ? static_cast<const char*>(s.store.flat_grads(s.dtype).raw_data()) +
                            s.shard.begin * es
                      : static_cast<const char*>(s.grads->grad_shard().raw_data());
  float* d = s.d_norm.data<float>();
  {
    core::DeviceGuard guard(st.device());
    COLOSSAL_RETURN_IF_ERROR(s.d_norm.set_zero(st));
    if (n > 0 && !s.norm_ranges.empty()) {
      // Local norm (and found_inf) on the device, squared there: d[0] is this
      // slice's sum of squares, d[1] its found_inf flag.
      std::vector<kernels::multi_tensor::TensorRef> refs;
      for (const auto& [a, b] : s.norm_ranges) refs.push_back({g + a * es, b - a});
      COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
          kernels::multi_tensor::l2_norm_cuda(d + 2, nullptr, d + 1, nullptr, refs.data(),
                                              s.d_norm_scratch.raw_data(), s.norm_scratch_bytes,
                                              static_cast<int64_t>(refs.size()), s.dtype, 0.0f,
                                              st.handle()),
          "low_level_zero: gradient norm"));
      COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
          kernels::elementwise::binary_cuda(d, d + 2, d + 2, 1, core::DType::kF32,
                                            kernels::elementwise::BinaryOp::kMul, st.handle()),
          "low_level_zero: gradient norm"));
    }
  }
  // Summed over the ranks (squares and flags), then the one host sync.
  {
    comm::CollectiveOptions o;
    o.stream = st;
    comm::Buffer b;
    b.data = d;
    b.count = 2;
    b.dtype = core::DType::kF32;
    b.device = st.device();
    COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w,
                              s.norm_group().all_reduce(b, comm::ReduceOp::kSum, o));
    COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), "low_level_zero: gradient norm"));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host, s.d_norm.to(core::Device::cpu(), st));
  st.synchronize();
  const float total = host.data<float>()[0];
  const bool found_inf = host.data<float>()[1] != 0.0f;

  // As nn::mixed_precision_step: s = the scale the loss was multiplied by.
  nn::MixedPrecisionStepResult r;
  r.loss_scale = scaler != nullptr ? scaler->scale() : 1.0f;
  const float scaled_norm = std::sqrt(total);
  const double norm = static_cast<double>(scaled_norm) / r.loss_scale;
  r.grad_norm = r.loss_scale == 1.0f ? scaled_norm : static_cast<float>(norm);
  const bool finite = !found_inf && std::isfinite(r.grad_norm);
  if (scaler != nullptr) scaler->update(!finite);
  if (!finite) {
    r.skipped = true;  // on every rank: they all saw the same sums
    return r;
  }
  if (max_norm > 0.0f) {
    const double coef = static_cast<double>(max_norm) / (norm + 1e-6);
    r.clip_coef = coef < 1.0 ? static_cast<float>(coef) : 1.0f;
  }
  const float grad_scale = r.clip_coef < 1.0f ? r.loss_scale / r.clip_coef : r.loss_scale;

  // The last step's rounds (overlap_allgather) read and write the weights.
  COLOSSAL_RETURN_IF_ERROR(s.settle_weights(st));
  COLOSSAL_RETURN_IF_ERROR(s.read_master());  // fp32: the weights (no-op after a gather)
  const int64_t size = s.shard.size;
  // `mine`: where this rank's updated slice goes. At world size 1 it is the
  // weights. When the weights split evenly over the ranks (and no offload
  // writes them), or when rounds of pieces gather them (overlap_allgather), it is
  // this rank's slice of the weights, gathered in place: no gather buffer
  // and no copy of the whole model after the gather. Otherwise a gather
  // buffer that lives for this step only (allocated and freed on the step's
  // stream, after the backward freed the activations).
  core::Tensor values = s.store.flat_values(s.dtype);
  const bool in_place =
      !s.local && !s.offload && (s.shard.padded == s.numel || s.gather != nullptr);
  core::Tensor gathered, mine;
  if (s.local) {
    mine = values;
  } else if (in_place) {
    gathered = values;
    COLOSSAL_ASSIGN_OR_RETURN(mine, values.slice(s.shard.begin, s.shard.begin + n));
  } else {
    COLOSSAL_ASSIGN_OR_RETURN(gathered, core::Tensor::empty({s.shard.padded}, s.dtype, st));
    COLOSSAL_ASSIGN_OR_RETURN(mine,
                              gathered.slice(static_cast<int64_t>(s.pg->rank()) * size,
                                             static_cast<int64_t>(s.pg->rank()) * size + size));
  }
  if (s.offload) {
    ++s.adam.step;
    std::vector<ZeroOffload::Piece> pieces;
    pieces.reserve(s.pieces.size());
    for (const ShardPiece& p : s.pieces) {
      pieces.push_back({p.offset - s.shard.begin, p.count,
                        nn::kernel_adam_options(s.optimizer->group_hyper(p.group), s.adam.step,
                                                grad_scale)});
    }
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor grad,
                              s.options.stage == 1
                                  ? s.store.flat_grads(s.dtype).slice(s.shard.begin, s.shard.end)
                                  : s.grads->grad_shard().slice(0, n));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor weights, values.slice(s.shard.begin, s.shard.end));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor out, mine.slice(0, n));
    COLOSSAL_RETURN_IF_ERROR(s.offload->step(grad, pieces, weights, out));
  } else if (s.sixteen_bit() && n > 0 && !s.local && !in_place) {
    // Elements of the slice no piece covers (alignment gaps) keep the weights.
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dst, mine.slice(0, n));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor src, values.slice(s.shard.begin, s.shard.end));
    COLOSSAL_RETURN_IF_ERROR(dst.copy_from(src, st));
  }
  if (!s.offload) {
    ++s.adam.step;
    core::DeviceGuard guard(st.device());
    std::vector<kernels::adam::AdamTensor> tensors;
    for (size_t group = 0; group < s.group_pieces.size(); ++group) {
      if (s.group_pieces[group].empty()) continue;
      tensors.clear();
      for (const ShardPiece& p : s.group_pieces[group]) {
        const int64_t at = p.offset - s.shard.begin;
        // 16-bit: the kernel writes the rounded master straight into this
        // rank's block of the gather buffer (world size 1: the weights).
        void* copy = s.sixteen_bit() ? static_cast<char*>(mine.raw_data()) + at * es : nullptr;
        tensors.push_back(kernels::adam::AdamTensor{
            s.d_master.data<float>() + at, s.d_exp_avg.data<float>() + at,
            s.d_exp_avg_sq.data<float>() + at, g + at * es, copy, p.count});
      }
      const kernels::adam::AdamOptions o = nn::kernel_adam_options(
          s.optimizer->group_hyper(static_cast<int>(group)), s.adam.step, grad_scale);
      const kernels::KernelStatus ks = kernels::adam::adam_step_tensors_cuda(
          tensors.data(), /*found_inf=*/nullptr,
          static_cast<char*>(s.d_adam_scratch.raw_data()) + s.adam_scratch_at[group],
          s.adam_scratch_bytes[group], static_cast<int64_t>(tensors.size()), s.dtype,
          s.sixteen_bit() ? s.dtype : core::DType::kF32, o, st.handle());
      COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
          ks, absl::StrCat("low_level_zero: Adam step of group ", group)));
    }
  }
  if (!s.sixteen_bit() && n > 0 && !s.offload) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dst, mine.slice(0, n));
    COLOSSAL_RETURN_IF_ERROR(dst.copy_from(s.d_master, st));
  }
  if (s.local) return r;  // the weights were written in place
  // overlap_allgather: the next forward's hooks wait for each piece.
  if (s.gather != nullptr) {
    COLOSSAL_RETURN_IF_ERROR(s.gather->issue(st));
    return r;
  }
  // Every rank's slice into the flat parameter buffer: the gather runs after
  // the step's work (input stream), the stream waits for it, then copies.
  {
    comm::CollectiveOptions o;
    o.stream = st;
    COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, s.pg->all_gather(gathered, mine, o));
    w->wait_stream(st);
    s.grads->track(std::move(w));  // waited for again (host) before the buffers go
  }
  if (in_place) return r;
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor all, gathered.slice(0, s.numel));
  COLOSSAL_RETURN_IF_ERROR(values.copy_from(all, st));
  return r;
#else
  return absl::InternalError("low_level_zero: the CUDA path in a build without CUDA");
#endif
}

absl::StatusOr<nn::MixedPrecisionStepResult> LowLevelZeroPlugin::step(
    nn::DynamicLossScaler* scaler, float max_norm) {
  State& s = *state_;
  if (!s.boosted) return absl::FailedPreconditionError("low_level_zero: step before boost");
  if (scaler != nullptr && !s.cuda) {
    return absl::UnimplementedError(
        "low_level_zero: loss scaling is for 16-bit weights, which this plugin supports only "
        "on CUDA; train the CPU model in float32 without a scaler");
  }
  if (!std::isfinite(max_norm) || max_norm < 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("low_level_zero: max_norm must be >= 0 (0: no clipping), got ", max_norm));
  }
  if (s.cuda) return step_cuda(s, scaler, max_norm);
  const core::Tensor grads = s.store.flat_grads(core::DType::kF32);
  const core::Tensor values = s.store.flat_values(core::DType::kF32);
  // g[i - shard.begin]: the averaged gradient of flat element i of this rank's slice.
  const float* g = s.options.stage == 1 ? grads.data<float>() + s.shard.begin
                                        : s.grads->grad_shard().data<float>();

  // Global norm: this slice's sum of squares, summed over the ranks.
  double local = 0.0;
  for (const auto& [a, b] : s.norm_ranges) {
    for (int64_t i = a; i < b; ++i) local += double(g[i]) * g[i];
  }
  float total = static_cast<float>(local);
  {
    COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, s.norm_group().all_reduce(
                                                   comm::Buffer::cpu(&total, 1), comm::ReduceOp::kSum));
    COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), "low_level_zero: gradient norm"));
  }
  nn::MixedPrecisionStepResult r;
  r.loss_scale = 1.0f;
  r.grad_norm = std::sqrt(total);
  if (!std::isfinite(r.grad_norm)) {
    r.skipped = true;
    return r;
  }
  if (max_norm > 0.0f) {  // as nn::clip_grad_by_norm: in double, eps 1e-6
    const double coef = static_cast<double>(max_norm) / (static_cast<double>(r.grad_norm) + 1e-6);
    r.clip_coef = coef < 1.0 ? static_cast<float>(coef) : 1.0f;
  }

  // Adam on this rank's slice, piece by piece with the piece's group. The
  // master slice equals the weights after every step's all_gather (so this
  // is a no-op then), but weights loaded into the model after boost (a
  // checkpoint) must not be overwritten by a stale master.
  COLOSSAL_RETURN_IF_ERROR(s.settle_weights(core::Stream::cpu()));
  COLOSSAL_RETURN_IF_ERROR(s.read_master());
  ++s.adam.step;
  for (const ShardPiece& p : s.pieces) {
    const kernels::adam::AdamOptions o =
        nn::kernel_adam_options(s.optimizer->group_hyper(p.group), s.adam.step,
                     r.clip_coef < 1.0f ? 1.0f / r.clip_coef : 1.0f);
    const int64_t at = p.offset - s.shard.begin;
    const kernels::KernelStatus ks = kernels::adam::adam_step_cpu(
        s.master.data() + at, s.adam.exp_avg.data() + at, s.adam.exp_avg_sq.data() + at,
        /*model_copy=*/nullptr, g + at, /*found_inf=*/nullptr, p.count,
        kernels::DType::kF32, kernels::DType::kF32, o);
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
        ks, absl::StrCat("low_level_zero: Adam step of group ", p.group)));
  }

  if (s.gather != nullptr) {  // overlap_allgather: in place, then sent round by round
    std::copy(s.master.begin(), s.master.end(), values.data<float>() + s.shard.begin);
    COLOSSAL_RETURN_IF_ERROR(s.gather->issue(core::Stream::cpu()));
    return r;
  }
  // Every rank's slice into the flat parameter buffer.
  const int64_t size = s.shard.size;
  float* mine = s.gathered.data() + static_cast<int64_t>(s.pg->rank()) * size;
  std::fill(mine, mine + size, 0.0f);
  std::copy(s.master.begin(), s.master.end(), mine);
  {
    COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w,
                              s.pg->all_gather(comm::Buffer::cpu(s.gathered.data(), s.shard.padded),
                                               comm::Buffer::cpu(mine, size)));
    COLOSSAL_RETURN_IF_ERROR(core::annotate(w->wait(), "low_level_zero: gathering parameters"));
  }
  std::memcpy(values.data<float>(), s.gathered.data(), sizeof(float) * s.numel);
  return r;
}

}  // namespace colossal::parallel
