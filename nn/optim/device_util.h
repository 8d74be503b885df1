// Private to nn/: small helpers for running optimizer work on a tensor's device.
#ifndef COLOSSAL_NN_OPTIM_DEVICE_UTIL_H_
#define COLOSSAL_NN_OPTIM_DEVICE_UTIL_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device/device.h"
#include "core/device/stream.h"
#include "core/tensor/tensor.h"

namespace colossal::nn::internal {

// The stream for work on `device`: the CPU stream for the CPU; `stream` itself
// when it is a stream of that CUDA device. Otherwise InvalidArgument naming
// `what` ("parameter \"h.0.attn.bias\"") and both devices.
absl::StatusOr<core::Stream> stream_for(core::Device device, const core::Stream& stream,
                                        absl::string_view what);

// The value of a one-element float32 tensor on the CPU or on `stream`'s CUDA
// device; a device value is copied back on `stream` (the host waits for it).
// InvalidArgument naming `what` for another dtype, size or device.
absl::StatusOr<float> read_float_scalar(const core::Tensor& t, const core::Stream& stream,
                                        absl::string_view what);

// Whether two defined tensors share any byte of memory.
bool overlaps(const core::Tensor& a, const core::Tensor& b);

}  // namespace colossal::nn::internal

#endif  // COLOSSAL_NN_OPTIM_DEVICE_UTIL_H_
