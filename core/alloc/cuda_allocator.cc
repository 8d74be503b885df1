#include "core/alloc/cuda_allocator.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/alloc/cpu_allocator.h"
#include "core/status/check.h"
#include "core/status/cuda_check.h"
#include "core/status/status.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace colossal::core {

#if COLOSSAL_WITH_CUDA
namespace {

class CudaPoolAllocator final : public Allocator {
 public:
  CudaPoolAllocator(Device device, cudaMemPool_t pool) : device_(device), pool_(pool) {}
  ~CudaPoolAllocator() override {
    // Storages hold the allocator, so every free has been enqueued by now; the
    // pool itself is released once those frees complete.
    CUDA_CHECK_RELEASE(cudaMemPoolDestroy(pool_));
  }

  Device device() const override { return device_; }
  MemoryKind kind() const override { return MemoryKind::kCudaDevice; }
  std::string name() const override { return absl::StrCat("cuda_pool(", device_.to_string(), ")"); }

  absl::StatusOr<void*> allocate(size_t bytes, const Stream& stream) override {
    if (bytes == 0) return nullptr;
    if (stream.device() != device_) {
      return absl::InvalidArgumentError(absl::StrCat(name(), ": allocation of ", bytes,
                                                     " bytes ordered on a stream of ",
                                                     stream.device().to_string()));
    }
    DeviceGuard guard(device_);
    void* p = nullptr;
    cudaError_t err = cudaMallocFromPoolAsync(&p, bytes, pool_, stream.handle());
    if (err == cudaErrorMemoryAllocation) {
      // Frees still in flight and memory the pool keeps could satisfy it: wait
      // for the device, give unused memory back, and try once more.
      (void)cudaGetLastError();
      CUDA_CHECK(cudaDeviceSynchronize());
      CUDA_CHECK(cudaMemPoolTrimTo(pool_, 0));
      err = cudaMallocFromPoolAsync(&p, bytes, pool_, stream.handle());
    }
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      counters_.on_failure();
      size_t free_bytes = 0, total_bytes = 0;
      CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
      const AllocatorStats s = stats();
      return absl::ResourceExhaustedError(absl::StrCat(
          "out of memory on ", device_.to_string(), ": asked for ", bytes, " bytes (",
          format_bytes(bytes), ") with ", free_bytes, " bytes (", format_bytes(free_bytes),
          ") free of ", format_bytes(total_bytes), "; ", name(), " has ",
          format_bytes(s.allocated_bytes), " allocated and ", format_bytes(s.reserved_bytes),
          " reserved"));
    }
    CUDA_CHECK(err);
    counters_.on_allocate(bytes, 0);
    return p;
  }

  void deallocate(void* ptr, size_t bytes, const Stream& stream) override {
    if (ptr == nullptr) return;
    COLOSSAL_CHECK_EQ(stream.device(), device_) << name() << ": free ordered on another device";
    DeviceGuard guard(device_);
    CUDA_CHECK_RELEASE(cudaFreeAsync(ptr, stream.handle()));
    counters_.on_free(bytes, 0);
  }

  AllocatorStats stats() const override {
    AllocatorStats s = counters_.snapshot();
    s.reserved_bytes = static_cast<int64_t>(pool_attribute(cudaMemPoolAttrReservedMemCurrent));
    s.peak_reserved_bytes = static_cast<int64_t>(pool_attribute(cudaMemPoolAttrReservedMemHigh));
    return s;
  }

  void reset_peak_stats() override {
    counters_.reset_peaks();
    uint64_t zero = 0;  // the only value these attributes accept: reset to current
    CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &zero));
    CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero));
  }

  void release_cached_memory() override {
    DeviceGuard guard(device_);
    CUDA_CHECK(cudaMemPoolTrimTo(pool_, 0));
  }

 private:
  uint64_t pool_attribute(cudaMemPoolAttr attr) const {
    uint64_t value = 0;
    CUDA_CHECK(cudaMemPoolGetAttribute(pool_, attr, &value));
    return value;
  }

  const Device device_;
  const cudaMemPool_t pool_;
  AllocationCounters counters_;  // reserved_bytes unused: the pool reports it
};

class PinnedHostAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }
  MemoryKind kind() const override { return MemoryKind::kPinnedHost; }
  std::string name() const override { return "pinned_host"; }

  absl::StatusOr<void*> allocate(size_t bytes, const Stream& stream) override {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      counters_.on_failure();
      return host_out_of_memory(name(), bytes);
    }
    CUDA_CHECK(err);
    counters_.on_allocate(bytes, bytes);
    return p;
  }

  void deallocate(void* ptr, size_t bytes, const Stream& stream) override {
    if (ptr == nullptr) return;
    if (stream.is_cuda()) {
      DeviceGuard guard(stream.device());
      CUDA_CHECK_RELEASE(cudaStreamSynchronize(stream.handle()));
    }
    CUDA_CHECK_RELEASE(cudaFreeHost(ptr));
    counters_.on_free(bytes, bytes);
  }

  AllocatorStats stats() const override { return counters_.snapshot(); }
  void reset_peak_stats() override { counters_.reset_peaks(); }
  void release_cached_memory() override {}

 private:
  AllocationCounters counters_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Allocator>> create_cuda_pool_allocator(Device device) {
  if (!device.is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a CUDA pool allocator needs a CUDA device, not ", device.to_string()));
  }
  COLOSSAL_RETURN_IF_ERROR(check_device_available(device));
  DeviceGuard guard(device);
  int supported = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device.index()));
  if (!supported) {
    return absl::FailedPreconditionError(absl::StrCat(
        device.to_string(), " does not support CUDA memory pools (cudaMallocAsync)"));
  }
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device.index();
  cudaMemPool_t pool = nullptr;
  CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
  uint64_t threshold = UINT64_MAX;  // keep freed memory in the pool for reuse
  CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  return std::make_shared<CudaPoolAllocator>(device, pool);
}

absl::StatusOr<std::shared_ptr<Allocator>> create_pinned_host_allocator() {
  COLOSSAL_RETURN_IF_ERROR(
      annotate(check_device_available(Device::cuda(0)), "pinned host memory needs CUDA"));
  return std::make_shared<PinnedHostAllocator>();
}

absl::StatusOr<uint64_t> cuda_memory_total(Device device) {
  COLOSSAL_RETURN_IF_ERROR(check_device_available(device));
  DeviceGuard guard(device);
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<uint64_t>(total_bytes);
}

#else  // !COLOSSAL_WITH_CUDA

absl::StatusOr<std::shared_ptr<Allocator>> create_cuda_pool_allocator(Device device) {
  if (!device.is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a CUDA pool allocator needs a CUDA device, not ", device.to_string()));
  }
  COLOSSAL_RETURN_IF_ERROR(check_device_available(device));  // "built without CUDA"
  COLOSSAL_FATAL() << device << " is available in a build without CUDA";
}

absl::StatusOr<std::shared_ptr<Allocator>> create_pinned_host_allocator() {
  COLOSSAL_RETURN_IF_ERROR(
      annotate(check_device_available(Device::cuda(0)), "pinned host memory needs CUDA"));
  COLOSSAL_FATAL() << "cuda:0 is available in a build without CUDA";
}

absl::StatusOr<uint64_t> cuda_memory_total(Device device) {
  COLOSSAL_RETURN_IF_ERROR(check_device_available(device));  // "built without CUDA"
  COLOSSAL_FATAL() << device << " is available in a build without CUDA";
}

#endif  // COLOSSAL_WITH_CUDA

}  // namespace colossal::core
