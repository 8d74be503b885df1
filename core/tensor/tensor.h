// colossal::core — Tensor: a typed, shaped, contiguous view of shared storage.
//
// A Tensor is a handle (cheap to copy; copies share memory) to `numel` elements
// of one DType laid out contiguously in row-major order, starting `byte_offset`
// bytes into a Storage (core/alloc/allocator.h) on one Device. Tensors are
// always contiguous: views that would need strides (most narrows past dim 0,
// transposes) are errors, and ops that need a transposed operand take a flag
// instead (core/gemm). Memory is freed when the last tensor viewing it goes,
// stream-ordered on CUDA.
//
//   const Stream& s = ctx.compute_stream();   // core/context, or Stream::cpu()
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor x, Tensor::empty({8, 1024, 768}, DType::kBF16, s));
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor rows, x.reshape({-1, 768}));     // [8192, 768]
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor first, x.slice(0, 2));           // [2, 1024, 768]
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor host, x.to(Device::cpu(), s));   // a copy
//   kernels::BFloat16* p = host.data<kernels::BFloat16>();
//
// Streams and asynchrony: copy_from() and to() enqueue on the given stream.
// Host<->device copies are truly asynchronous only when the host side is
// pinned memory (pinned_host_allocator()); then the caller synchronises the
// stream before touching the host data, and keeps both tensors alive until the
// copy has run. With pageable host memory CUDA makes host->device copies return
// once the source is staged and device->host copies return when the data has
// arrived, so the host side is safe to use on return.
//
// Every error a user can cause is an absl::Status whose message names the
// shapes and dtypes involved.
#ifndef COLOSSAL_CORE_TENSOR_TENSOR_H_
#define COLOSSAL_CORE_TENSOR_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/alloc/allocator.h"
#include "core/device/device.h"
#include "core/device/stream.h"
#include "core/dtype/dtype.h"
#include "core/status/check.h"
#include "core/tensor/shape.h"

namespace colossal::core {

class Tensor {
 public:
  // An undefined tensor (defined() is false); only assignment and defined()
  // are meaningful on it.
  Tensor() = default;

  // Uninitialised memory for `shape` of `dtype` on stream.device(), from that
  // device's process-wide allocator (device_allocator), ordered on `stream`
  // (the memory is usable by work enqueued on it after this call).
  // Errors: the device is not available; out of memory.
  static absl::StatusOr<Tensor> empty(const Shape& shape, DType dtype, const Stream& stream);
  // As above, from `allocator` (e.g. pinned_host_allocator()); the tensor's
  // device is allocator->device(), and `stream` must be a stream the allocator
  // accepts (for a CUDA pool, one of its device).
  static absl::StatusOr<Tensor> empty(const Shape& shape, DType dtype, const Stream& stream,
                                      std::shared_ptr<Allocator> allocator);

  // A view of `storage` from `byte_offset` (a multiple of the element size),
  // e.g. a named slice of a flat parameter buffer. Errors: the view would run
  // past the storage's end, or the offset is misaligned.
  static absl::StatusOr<Tensor> from_storage(std::shared_ptr<Storage> storage, size_t byte_offset,
                                             const Shape& shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  // Dimension i (negative counts from the end); aborts if out of range.
  int64_t dim(int i) const { return shape_[i]; }
  DType dtype() const { return dtype_; }
  Device device() const;
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  size_t byte_offset() const { return byte_offset_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // Whether the memory is pinned host memory (host<->device copies are async).
  bool is_pinned() const;

  // The first element's address (a device address on CUDA); nullptr when
  // numel() is 0 or the tensor is undefined.
  void* raw_data() const;
  // raw_data() as T*, T one of float, double, kernels::Half, kernels::BFloat16,
  // int32_t, int64_t, uint8_t, uint16_t. Asking for the wrong type is a bug and
  // aborts, naming both dtypes.
  template <typename T>
  T* data() const {
    COLOSSAL_CHECK(dtype_of<T>() == dtype_)
        << "data<" << dtype_name(dtype_of<T>()) << ">() of " << to_string();
    return static_cast<T*>(raw_data());
  }

  // The same elements with shape `dims`; one entry may be -1 and is inferred.
  // Shares storage. Errors: element counts differ, more than one -1, -1 with
  // an ambiguous or non-integral size, a negative or too-large dimension.
  absl::StatusOr<Tensor> reshape(absl::Span<const int64_t> dims) const;

  // Elements [start, start + length) along `dim` (negative counts from the
  // end), sharing storage. Since tensors are contiguous this works along dim 0,
  // and along a later dim only when every earlier dim is 1; other cases are
  // errors that say so. Errors: dim out of range, start/length outside the dim.
  absl::StatusOr<Tensor> narrow(int dim, int64_t start, int64_t length) const;

  // Rows [start, end) of dim 0: narrow(0, start, end - start).
  absl::StatusOr<Tensor> slice(int64_t start, int64_t end) const;

  // Copies `src` into this tensor's memory, enqueued on `stream` (see the
  // file comment for when it is asynchronous). Any direction: host<->host,
  // host<->device, device<->device (same or different CUDA devices). `stream`
  // must be a CUDA stream of the source's or destination's device when either
  // is on CUDA; a CUDA stream also orders host-to-host copies; with the CPU
  // stream a host-to-host copy is a memmove in the calling thread.
  // Errors: undefined tensors, different dtypes or shapes, an unsuitable stream.
  absl::Status copy_from(const Tensor& src, const Stream& stream);

  // This tensor on `device`: *this (sharing storage) when already there,
  // otherwise a new tensor from `device`'s process-wide allocator holding a
  // copy, allocated and copied on `stream` (a stream of `device` when it is a
  // CUDA device, else of this tensor's device).
  absl::StatusOr<Tensor> to(Device device, const Stream& stream) const;
  // As above, always copying, into memory from `allocator` (e.g. pinned host
  // memory for offload). The new tensor's device is allocator->device().
  absl::StatusOr<Tensor> to(const Stream& stream, std::shared_ptr<Allocator> allocator) const;

  // Sets every byte to zero, enqueued on `stream` (a stream of the tensor's
  // device, or the CPU stream for host memory).
  absl::Status set_zero(const Stream& stream);

  // "Tensor(float32 [2, 3] on cuda:0)", or "Tensor(undefined)".
  std::string to_string() const;

 private:
  Tensor(std::shared_ptr<Storage> storage, size_t byte_offset, const Shape& shape, DType dtype)
      : storage_(std::move(storage)), byte_offset_(byte_offset), shape_(shape), dtype_(dtype) {}

  std::shared_ptr<Storage> storage_;
  size_t byte_offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::kF32;
};

std::ostream& operator<<(std::ostream& out, const Tensor& tensor);

}  // namespace colossal::core

#endif  // COLOSSAL_CORE_TENSOR_TENSOR_H_
