#include "core/tensor/tensor.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/alloc/default_allocator.h"
#include "core/status/cuda_check.h"
#include "core/status/status.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace colossal::core {
namespace {

absl::Status undefined_error(absl::string_view op) {
  return absl::FailedPreconditionError(absl::StrCat(op, " of an undefined tensor"));
}

}  // namespace

absl::StatusOr<Tensor> Tensor::empty(const Shape& shape, DType dtype, const Stream& stream) {
  absl::StatusOr<std::shared_ptr<Allocator>> allocator = device_allocator(stream.device());
  if (!allocator.ok()) {
    return annotate(allocator.status(), absl::StrCat("Tensor::empty(", dtype_name(dtype), " ",
                                                     shape.to_string(), ")"));
  }
  return empty(shape, dtype, stream, *std::move(allocator));
}

absl::StatusOr<Tensor> Tensor::empty(const Shape& shape, DType dtype, const Stream& stream,
                                     std::shared_ptr<Allocator> allocator) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  absl::StatusOr<std::shared_ptr<Storage>> storage =
      Storage::allocate(std::move(allocator), bytes, stream);
  if (!storage.ok()) {
    return annotate(storage.status(), absl::StrCat("Tensor::empty(", dtype_name(dtype), " ",
                                                   shape.to_string(), ")"));
  }
  return Tensor(*std::move(storage), 0, shape, dtype);
}

absl::StatusOr<Tensor> Tensor::from_storage(std::shared_ptr<Storage> storage, size_t byte_offset,
                                            const Shape& shape, DType dtype) {
  if (storage == nullptr) {
    return absl::InvalidArgumentError("Tensor::from_storage: null storage");
  }
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  if (byte_offset % dtype_size(dtype) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Tensor::from_storage(", dtype_name(dtype), " ", shape.to_string(), "): byte offset ",
        byte_offset, " is not a multiple of the element size ", dtype_size(dtype)));
  }
  if (byte_offset > storage->nbytes() || bytes > storage->nbytes() - byte_offset) {
    return absl::OutOfRangeError(absl::StrCat(
        "Tensor::from_storage(", dtype_name(dtype), " ", shape.to_string(), "): bytes [",
        byte_offset, ", ", byte_offset + bytes, ") run past the storage's ", storage->nbytes(),
        " bytes"));
  }
  return Tensor(std::move(storage), byte_offset, shape, dtype);
}

Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }

bool Tensor::is_pinned() const {
  return storage_ != nullptr && storage_->kind() == MemoryKind::kPinnedHost;
}

void* Tensor::raw_data() const {
  if (storage_ == nullptr || numel() == 0) return nullptr;
  return static_cast<char*>(storage_->data()) + byte_offset_;
}

absl::StatusOr<Tensor> Tensor::reshape(absl::Span<const int64_t> dims) const {
  if (!defined()) return undefined_error("reshape");
  const int64_t n = numel();
  auto error = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("reshape of ", dtype_name(dtype_), " ",
                                                   shape_.to_string(), " (", n, " elements) to ",
                                                   dims_to_string(dims), ": ", why));
  };
  std::vector<int64_t> resolved(dims.begin(), dims.end());
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      if (inferred >= 0) return error("only one dimension may be -1");
      inferred = static_cast<int>(i);
    } else if (dims[i] < 0) {
      return error(absl::StrCat("dimension ", i, " is negative"));
    } else if (dims[i] != 0 && known > Shape::kMaxNumel / dims[i]) {
      return error("too many elements");
    } else {
      known *= dims[i];
    }
  }
  if (inferred >= 0) {
    if (known == 0) return error("-1 is ambiguous when another dimension is 0");
    if (n % known != 0) {
      return error(absl::StrCat(n, " elements do not divide into parts of ", known));
    }
    resolved[inferred] = n / known;
  }
  absl::StatusOr<Shape> shape = Shape::make(resolved);
  if (!shape.ok()) return error(shape.status().message());
  if (shape->numel() != n) {
    return error(absl::StrCat("that shape has ", shape->numel(), " elements"));
  }
  return Tensor(storage_, byte_offset_, *shape, dtype_);
}

absl::StatusOr<Tensor> Tensor::narrow(int dim, int64_t start, int64_t length) const {
  if (!defined()) return undefined_error("narrow");
  auto what = [&] {
    return absl::StrCat("narrow(dim=", dim, ", start=", start, ", length=", length, ") of ",
                        dtype_name(dtype_), " ", shape_.to_string());
  };
  const int r = rank();
  if (dim < -r || dim >= r) {
    return absl::InvalidArgumentError(
        absl::StrCat(what(), ": dim must be in [", -r, ", ", r, ")"));
  }
  const int d = dim < 0 ? dim + r : dim;
  const int64_t size = shape_[d];
  if (start < 0 || length < 0 || start > size || length > size - start) {
    return absl::OutOfRangeError(absl::StrCat(what(), ": elements [", start, ", ", start + length,
                                              ") are outside [0, ", size, ") of dim ", d));
  }
  for (int i = 0; i < d; ++i) {
    if (shape_[i] != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          what(), ": the result would not be contiguous (dims before ", d, " are ",
          dims_to_string(shape_.dims().subspan(0, d)),
          ", not all 1); tensors are contiguous, so narrow dim 0, or reshape first"));
    }
  }
  int64_t inner = 1;
  for (int i = d + 1; i < r; ++i) inner *= shape_[i];
  std::vector<int64_t> dims(shape_.dims().begin(), shape_.dims().end());
  dims[d] = length;
  absl::StatusOr<Shape> shape = Shape::make(dims);
  COLOSSAL_CHECK_OK(shape.status());  // smaller than a valid shape
  const size_t offset = byte_offset_ + static_cast<size_t>(start * inner) * dtype_size(dtype_);
  return Tensor(storage_, offset, *shape, dtype_);
}

absl::StatusOr<Tensor> Tensor::slice(int64_t start, int64_t end) const {
  if (!defined()) return undefined_error("slice");
  if (end < start) {
    return absl::OutOfRangeError(absl::StrCat("slice(", start, ", ", end, ") of ",
                                              dtype_name(dtype_), " ", shape_.to_string(),
                                              ": end is before start"));
  }
  return narrow(0, start, end - start);
}

absl::Status Tensor::copy_from(const Tensor& src, const Stream& stream) {
  if (!defined() || !src.defined()) {
    return absl::FailedPreconditionError(absl::StrCat("copy_from(", src.to_string(), ") into ",
                                                      to_string(), ": undefined tensor"));
  }
  auto what = [&] { return absl::StrCat("copy_from(", src.to_string(), ") into ", to_string()); };
  if (src.dtype_ != dtype_) {
    return absl::InvalidArgumentError(absl::StrCat(what(), ": dtypes differ (", dtype_name(dtype_),
                                                   " vs ", dtype_name(src.dtype_), ")"));
  }
  if (src.shape_ != shape_) {
    return absl::InvalidArgumentError(absl::StrCat(what(), ": shapes differ (",
                                                   shape_.to_string(), " vs ",
                                                   src.shape_.to_string(), ")"));
  }
  const size_t bytes = nbytes();
  const Device dst_device = device(), src_device = src.device();
  const bool any_cuda = dst_device.is_cuda() || src_device.is_cuda();
  if (!stream.is_cuda()) {
    if (any_cuda) {
      return absl::InvalidArgumentError(absl::StrCat(
          what(), ": a copy involving a CUDA device needs a CUDA stream, not the CPU stream"));
    }
    if (bytes > 0) std::memmove(raw_data(), src.raw_data(), bytes);
    return absl::OkStatus();
  }
  if (any_cuda && stream.device() != dst_device && stream.device() != src_device) {
    return absl::InvalidArgumentError(absl::StrCat(what(), ": stream of ",
                                                   stream.device().to_string(),
                                                   " belongs to neither device"));
  }
  COLOSSAL_RETURN_IF_ERROR(annotate(check_device_available(stream.device()), what()));
#if COLOSSAL_WITH_CUDA
  if (bytes == 0) return absl::OkStatus();
  DeviceGuard guard(stream.device());
  CUDA_CHECK(
      cudaMemcpyAsync(raw_data(), src.raw_data(), bytes, cudaMemcpyDefault, stream.handle()));
  return absl::OkStatus();
#else
  COLOSSAL_FATAL() << stream.device() << " is available in a build without CUDA";
#endif
}

absl::StatusOr<Tensor> Tensor::to(Device device, const Stream& stream) const {
  if (!defined()) return undefined_error("to");
  if (device == this->device()) return *this;
  absl::StatusOr<std::shared_ptr<Allocator>> allocator = device_allocator(device);
  if (!allocator.ok()) {
    return annotate(allocator.status(), absl::StrCat(to_string(), ".to(", device.to_string(), ")"));
  }
  return to(stream, *std::move(allocator));
}

absl::StatusOr<Tensor> Tensor::to(const Stream& stream, std::shared_ptr<Allocator> allocator) const {
  if (!defined()) return undefined_error("to");
  COLOSSAL_ASSIGN_OR_RETURN(Tensor out, empty(shape_, dtype_, stream, std::move(allocator)));
  COLOSSAL_RETURN_IF_ERROR(out.copy_from(*this, stream));
  return out;
}

absl::Status Tensor::set_zero(const Stream& stream) {
  if (!defined()) return undefined_error("set_zero");
  const size_t bytes = nbytes();
  if (device().is_cpu()) {
    stream.synchronize();  // earlier work on a CUDA stream may still use the memory
    if (bytes > 0) std::memset(raw_data(), 0, bytes);
    return absl::OkStatus();
  }
  if (stream.device() != device()) {
    return absl::InvalidArgumentError(absl::StrCat("set_zero of ", to_string(), " on a stream of ",
                                                   stream.device().to_string()));
  }
#if COLOSSAL_WITH_CUDA
  if (bytes == 0) return absl::OkStatus();
  DeviceGuard guard(stream.device());
  CUDA_CHECK(cudaMemsetAsync(raw_data(), 0, bytes, stream.handle()));
  return absl::OkStatus();
#else
  COLOSSAL_FATAL() << "a CUDA tensor in a build without CUDA: " << to_string();
#endif
}

std::string Tensor::to_string() const {
  if (!defined()) return "Tensor(undefined)";
  return absl::StrCat("Tensor(", dtype_name(dtype_), " ", shape_.to_string(), " on ",
                      device().to_string(), is_pinned() ? ", pinned" : "", ")");
}

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) {
  return out << tensor.to_string();
}

}  // namespace colossal::core
