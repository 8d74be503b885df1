#include "parallel/zero/zero_offload.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/alloc/default_allocator.h"
#include "core/status/status.h"
#include "kernels/elementwise/elementwise.h"

namespace colossal::parallel {
namespace {

absl::StatusOr<core::Tensor> pinned(int64_t n, core::DType dtype) {
  COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<core::Allocator> allocator,
                            core::pinned_host_allocator());
  return core::Tensor::empty({n}, dtype, core::Stream::cpu(), std::move(allocator));
}

absl::Status check_slice(const core::Tensor& t, const char* what, core::DType dtype, int64_t n,
                         const core::Stream& stream) {
  if (!t.defined() || t.rank() != 1 || t.dtype() != dtype || t.numel() != n ||
      t.device() != stream.device()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cpu_offload: ", what, " must be a ", core::dtype_name(dtype), " [", n, "] tensor on ",
        stream.device().to_string(), ", got ", t.defined() ? t.to_string() : "undefined"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ZeroOffload>> ZeroOffload::create(const core::Tensor& weights,
                                                                 const core::Stream& stream,
                                                                 int cpu_threads, int64_t chunk) {
  if (!stream.is_cuda()) {
    return absl::InvalidArgumentError("cpu_offload: the step's stream must be a CUDA stream");
  }
  if (!weights.defined() || weights.rank() != 1 || !weights.device().is_cuda()) {
    return absl::InvalidArgumentError("cpu_offload: the weights must be a 1-D CUDA tensor");
  }
  const core::DType dtype = weights.dtype();
  if (dtype != core::DType::kF32 && dtype != core::DType::kBF16 && dtype != core::DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cpu_offload: weights must be float32, bfloat16 or float16, got ",
        core::dtype_name(dtype)));
  }
  if (chunk <= 0 || cpu_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cpu_offload: chunk (", chunk,
                                                   ") must be positive and cpu_threads (",
                                                   cpu_threads, ") >= 0"));
  }
  std::unique_ptr<ZeroOffload> o(new ZeroOffload());
  o->n_ = weights.numel();
  o->chunk_ = chunk;
  o->dtype_ = dtype;
  o->stream_ = stream;
  o->cpu_.num_threads = cpu_threads;
  const int64_t n = o->n_;
  // At least one element each, so that every raw_data() is a valid address.
  const int64_t alloc = std::max<int64_t>(n, 1);
  COLOSSAL_ASSIGN_OR_RETURN(o->master_, pinned(alloc, core::DType::kF32));
  COLOSSAL_ASSIGN_OR_RETURN(o->exp_avg_, pinned(alloc, core::DType::kF32));
  COLOSSAL_ASSIGN_OR_RETURN(o->exp_avg_sq_, pinned(alloc, core::DType::kF32));
  COLOSSAL_ASSIGN_OR_RETURN(o->grad_, pinned(alloc, dtype));
  for (core::Tensor* t : {&o->master_, &o->exp_avg_, &o->exp_avg_sq_}) {
    COLOSSAL_ASSIGN_OR_RETURN(*t, t->slice(0, n));
    COLOSSAL_RETURN_IF_ERROR(t->set_zero(core::Stream::cpu()));
  }
  for (int64_t lo = 0; lo < n; lo += chunk) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Event e, core::Event::create(stream.device()));
    o->ready_.push_back(std::move(e));
  }
  if (dtype != core::DType::kF32) {
    // The host master: the weights widened exactly; the upload buffer starts
    // as the weights, so elements no piece covers keep their values.
    COLOSSAL_ASSIGN_OR_RETURN(o->copy_, pinned(alloc, dtype));
    COLOSSAL_ASSIGN_OR_RETURN(o->copy_, o->copy_.slice(0, n));
    COLOSSAL_RETURN_IF_ERROR(o->copy_.copy_from(weights, stream));
    stream.synchronize();
    COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
        kernels::elementwise::cast_cpu(o->master_.raw_data(), o->copy_.raw_data(), n,
                                       core::DType::kF32, dtype),
        "cpu_offload: widening the master slice"));
  }
  return o;
}

ZeroOffload::~ZeroOffload() {
  // Copies still in flight read or write the pinned buffers.
  if (n_ > 0) stream_.synchronize();
}

absl::Status ZeroOffload::step(const core::Tensor& grad, const std::vector<Piece>& pieces,
                               const core::Tensor& weights, const core::Tensor& out) {
  COLOSSAL_RETURN_IF_ERROR(check_slice(grad, "the gradient slice", dtype_, n_, stream_));
  COLOSSAL_RETURN_IF_ERROR(check_slice(weights, "the weight slice", dtype_, n_, stream_));
  COLOSSAL_RETURN_IF_ERROR(check_slice(out, "the output slice", dtype_, n_, stream_));
  int64_t end = 0;
  for (const Piece& p : pieces) {
    if (p.at < end || p.count < 0 || p.at + p.count > n_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cpu_offload: piece [", p.at, ", ", p.at + p.count, ") is out of order or outside the "
          "slice of ", n_, " elements"));
    }
    end = p.at + p.count;
  }
  if (n_ == 0) return absl::OkStatus();
  const bool sixteen = dtype_ != core::DType::kF32;
  const int64_t es = static_cast<int64_t>(core::dtype_size(dtype_));

  // 1. Every chunk's download, each marked by its event.
  for (size_t c = 0; c < ready_.size(); ++c) {
    const int64_t lo = static_cast<int64_t>(c) * chunk_, hi = std::min(n_, lo + chunk_);
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host_grad, grad_.slice(lo, hi));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dev_grad, grad.slice(lo, hi));
    COLOSSAL_RETURN_IF_ERROR(host_grad.copy_from(dev_grad, stream_));
    if (!sixteen) {  // float32: the weights are the masters
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host_master, master_.slice(lo, hi));
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dev_weights, weights.slice(lo, hi));
      COLOSSAL_RETURN_IF_ERROR(host_master.copy_from(dev_weights, stream_));
    }
    ready_[c].record(stream_);
  }

  // 2. Chunk by chunk: wait, update on the CPU, upload.
  float* master = master_.data<float>();
  float* m = exp_avg_.data<float>();
  float* v = exp_avg_sq_.data<float>();
  char* g = static_cast<char*>(grad_.raw_data());
  char* copy = sixteen ? static_cast<char*>(copy_.raw_data()) : nullptr;
  size_t next = 0;  // the first piece that may reach into this chunk
  for (size_t c = 0; c < ready_.size(); ++c) {
    const int64_t lo = static_cast<int64_t>(c) * chunk_, hi = std::min(n_, lo + chunk_);
    ready_[c].synchronize();
    while (next < pieces.size() && pieces[next].at + pieces[next].count <= lo) ++next;
    for (size_t i = next; i < pieces.size() && pieces[i].at < hi; ++i) {
      const int64_t a = std::max(pieces[i].at, lo);
      const int64_t b = std::min(pieces[i].at + pieces[i].count, hi);
      if (a >= b) continue;
      const kernels::KernelStatus ks = kernels::adam::adam_step_cpu(
          master + a, m + a, v + a, sixteen ? copy + a * es : nullptr, g + a * es,
          /*found_inf=*/nullptr, b - a, dtype_, sixteen ? dtype_ : core::DType::kF32,
          pieces[i].options, cpu_);
      COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(ks, "cpu_offload: CPU Adam"));
    }
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor src, (sixteen ? copy_ : master_).slice(lo, hi));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dst, out.slice(lo, hi));
    COLOSSAL_RETURN_IF_ERROR(dst.copy_from(src, stream_));
  }
  return absl::OkStatus();
}

}  // namespace colossal::parallel
