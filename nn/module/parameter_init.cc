#include "nn/module/parameter_init.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/random/random.h"

namespace colossal::nn {
namespace {

kernels::KernelStatus fill_value(void* out, double value, int64_t n, core::DType dtype,
                                 bool on_cpu, const core::Stream& stream) {
  if (on_cpu) return kernels::elementwise::fill_cpu(out, value, n, dtype);
#if COLOSSAL_WITH_CUDA
  return kernels::elementwise::fill_cuda(out, value, n, dtype, stream.handle());
#else
  return kernels::KernelStatus::unsupported("CUDA buffers in a CPU-only build");
#endif
}

kernels::KernelStatus fill_normal(void* out, double std, uint64_t seed, uint64_t offset, int64_t n,
                                  core::DType dtype, bool on_cpu, const core::Stream& stream) {
  if (on_cpu) return kernels::random::fill_normal_cpu(out, 0.0, std, seed, offset, n, dtype);
#if COLOSSAL_WITH_CUDA
  return kernels::random::fill_normal_cuda(out, 0.0, std, seed, offset, n, dtype, stream.handle());
#else
  return kernels::KernelStatus::unsupported("CUDA buffers in a CPU-only build");
#endif
}

}  // namespace

absl::Status init_parameter(const ParameterEntry& entry, const core::Tensor& out, uint64_t seed,
                            int64_t first, const core::Stream& stream) {
  const int64_t n = out.numel();
  if (first < 0 || n > entry.numel() - first) {
    return absl::InvalidArgumentError(absl::StrCat("initialising ", entry.name, ": elements [",
                                                   first, ", ", first + n, ") are outside [0, ",
                                                   entry.numel(), ")"));
  }
  if (out.dtype() != entry.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("initialising ", entry.name, ": the tensor is ",
                                                   core::dtype_name(out.dtype()), ", the entry ",
                                                   core::dtype_name(entry.dtype)));
  }
  if (n == 0) return absl::OkStatus();
  const bool on_cpu = out.device().is_cpu();
  char* data = static_cast<char*>(out.raw_data());
  const size_t esize = core::dtype_size(entry.dtype);
  const InitRule& rule = entry.init;
  kernels::KernelStatus s;
  switch (rule.kind) {
    case InitRule::Kind::kZeros:
      s = fill_value(data, 0.0, n, entry.dtype, on_cpu, stream);
      break;
    case InitRule::Kind::kOnes:
      s = fill_value(data, 1.0, n, entry.dtype, on_cpu, stream);
      break;
    case InitRule::Kind::kNormal: {
      // [first, first + n) splits into drawn values and the zero tail.
      const int64_t tail_begin = entry.numel() - rule.zero_tail;
      const int64_t drawn = std::clamp<int64_t>(tail_begin - first, 0, n);
      s = fill_normal(data, rule.std, seed, static_cast<uint64_t>(entry.init_offset + first), drawn,
                      entry.dtype, on_cpu, stream);
      if (s.ok() && drawn < n) {
        s = fill_value(data + drawn * esize, 0.0, n - drawn, entry.dtype, on_cpu, stream);
      }
      break;
    }
  }
  return core::from_kernel_status(s, absl::StrCat("initialising ", entry.name));
}

}  // namespace colossal::nn
