// colossal::nn — drawing a parameter's initial values from its InitRule.
//
// Values depend only on the entry (rule, init_offset), the seed and the
// element index, never on where the memory is: element i of a parameter takes
// Philox stream element entry.init_offset + i (kernels/random). So a process
// that holds a piece of a parameter (a ZeRO shard, a Gemini chunk, a tensor
// parallel slice) initialises exactly the values the whole model would have
// there, on any device and in any floating dtype (the normal draws are
// float32 values rounded to the dtype, as casting a float32 model would).
#ifndef COLOSSAL_NN_MODULE_PARAMETER_INIT_H_
#define COLOSSAL_NN_MODULE_PARAMETER_INIT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/device/stream.h"
#include "core/tensor/tensor.h"
#include "nn/module/parameter.h"

namespace colossal::nn {

// Writes elements [first, first + out.numel()) of `entry`'s initial values
// into `out` (contiguous, entry.dtype, on the CPU or the device of `stream`),
// enqueued on `stream` (Stream::cpu() for host memory). Errors:
// InvalidArgument when the range leaves the parameter or the dtype differs;
// a kernel's failure (e.g. a CUDA tensor in a CPU-only build).
absl::Status init_parameter(const ParameterEntry& entry, const core::Tensor& out, uint64_t seed,
                            int64_t first, const core::Stream& stream);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODULE_PARAMETER_INIT_H_
