// colossal::core — the process-wide allocators.
//
// One allocator per kind of memory per process, created on first use and
// never destroyed (so memory freed during process exit still has somewhere to
// go). Tensors use them unless given another allocator, and the memory manager
// reads their statistics.
//
//   std::shared_ptr<Allocator> host = cpu_allocator();
//   COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<Allocator> gpu, device_allocator(Device::cuda(0)));
//   gpu->stats().peak_allocated_bytes;
//   COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<Allocator> pinned, pinned_host_allocator());
#ifndef COLOSSAL_CORE_ALLOC_DEFAULT_ALLOCATOR_H_
#define COLOSSAL_CORE_ALLOC_DEFAULT_ALLOCATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/alloc/allocator.h"

namespace colossal::core {

// The process's CpuAllocator.
std::shared_ptr<Allocator> cpu_allocator();

// The process's allocator for `device`: cpu_allocator() for the CPU, the CUDA
// pool allocator of that device (core/alloc/cuda_allocator.h) for a GPU.
// Errors: the device is not available.
absl::StatusOr<std::shared_ptr<Allocator>> device_allocator(Device device);

// The process's pinned host allocator. Errors: no CUDA build or device.
absl::StatusOr<std::shared_ptr<Allocator>> pinned_host_allocator();

// All the memory `device` has, in bytes: the host's physical memory for the
// CPU, the device's global memory for a CUDA device. For refusing, before
// allocating, what cannot fit at all. Errors: the device is not available;
// Unavailable when the host does not report its memory.
absl::StatusOr<uint64_t> memory_capacity(Device device);

}  // namespace colossal::core

#endif  // COLOSSAL_CORE_ALLOC_DEFAULT_ALLOCATOR_H_
