#include "nn/optim/device_util.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"

namespace colossal::nn::internal {

absl::StatusOr<core::Stream> stream_for(core::Device device, const core::Stream& stream,
                                        absl::string_view what) {
  if (device.is_cpu()) return core::Stream::cpu();
  if (stream.device() == device) return stream;
  return absl::InvalidArgumentError(absl::StrCat(
      what, " is on ", device.to_string(), " but the optimizer's stream is ",
      stream.device().to_string(), "; pass a stream of ", device.to_string(),
      " (e.g. Context::get().compute_stream())"));
}

absl::StatusOr<float> read_float_scalar(const core::Tensor& t, const core::Stream& stream,
                                        absl::string_view what) {
  if (!t.defined() || t.dtype() != core::DType::kF32 || t.numel() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be a float32 tensor of one element, got ",
                                                   t.to_string()));
  }
  if (t.device().is_cpu()) {
    stream.synchronize();  // a producer on a CUDA stream may still be writing it
    return *t.data<float>();
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Stream s, stream_for(t.device(), stream, what));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host, t.to(core::Device::cpu(), s));
  s.synchronize();
  return *host.data<float>();
}

bool overlaps(const core::Tensor& a, const core::Tensor& b) {
  if (!a.defined() || !b.defined() || a.storage() != b.storage()) return false;
  if (a.nbytes() == 0 || b.nbytes() == 0) return false;
  const size_t a0 = a.byte_offset(), a1 = a0 + a.nbytes();
  const size_t b0 = b.byte_offset(), b1 = b0 + b.nbytes();
  return a0 < b1 && b0 < a1;
}

}  // namespace colossal::nn::internal
