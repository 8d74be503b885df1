// colossal::comm — the vocabulary of collectives: reduction ops, buffers, options.
//
// Collectives work on Buffers: a pointer, an element count, a DType and the
// Device the memory is on, always contiguous. core::Tensor converts with
// Buffer::of (tensors are contiguous by construction), and ProcessGroup has
// Tensor overloads for every collective; raw buffers serve flat parameter and
// gradient buffers carved into ranges (DESIGN.md principle 2).
//
//   std::vector<float> grads(1 << 20);
//   Buffer b = Buffer::cpu(grads.data(), grads.size());          // float32 on the CPU
//   Buffer t = Buffer::of(tensor);                                  // a core::Tensor
//   CollectiveOptions o;  o.timeout = absl::Seconds(30);  o.tag = 7;
//   pg.all_reduce(b, ReduceOp::kAvg, o);
#ifndef COLOSSAL_COMM_PROCESS_GROUP_TYPES_H_
#define COLOSSAL_COMM_PROCESS_GROUP_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/device/device.h"
#include "core/device/stream.h"
#include "core/dtype/dtype.h"

namespace colossal::core {
class Tensor;
}

namespace colossal::comm {

using core::DType;

// How all_reduce and reduce_scatter combine the ranks' values. kAvg is the sum
// divided by the group size; it needs a floating-point dtype.
enum class ReduceOp : int { kSum, kAvg, kProd, kMax, kMin };

// "sum", "avg", "prod", "max", "min".
const char* reduce_op_name(ReduceOp op);

// `count` contiguous elements of `dtype` at `data`, on `device`. Not owned:
// the memory must stay valid until the collective's Work has completed.
struct Buffer {
  void* data = nullptr;
  int64_t count = 0;
  DType dtype = DType::kF32;
  core::Device device = core::Device::cpu();

  size_t nbytes() const { return static_cast<size_t>(count) * core::dtype_size(dtype); }

  // Host memory of element type T (float, double, int32_t, int64_t,
  // kernels::BFloat16, ...): the DType follows from T.
  template <typename T>
  static Buffer cpu(T* data, int64_t count) {
    return Buffer{const_cast<std::remove_const_t<T>*>(data), count,
                  core::dtype_of<std::remove_const_t<T>>(), core::Device::cpu()};
  }
  // The memory of a (contiguous) tensor. InvalidArgumentError if undefined.
  static absl::StatusOr<Buffer> of(const core::Tensor& tensor);

  // "float32 x 1000 on cpu".
  std::string to_string() const;
};

// Per-call options, as gloo's.
struct CollectiveOptions {
  // How long the collective may take before it fails with
  // DeadlineExceededError; zero or negative means the group's default.
  absl::Duration timeout = absl::ZeroDuration();
  // Carried in every message of the collective and checked by the receiver:
  // ranks that call collectives with different tags get an error naming both.
  uint32_t tag = 0;
  // CUDA buffers: the stream whose work produced the inputs. The collective
  // runs on the group's communication stream after that work (an event, no
  // host wait). Unset: the group's default stream (see the backend).
  std::optional<core::Stream> stream;
};

}  // namespace colossal::comm

#endif  // COLOSSAL_COMM_PROCESS_GROUP_TYPES_H_
