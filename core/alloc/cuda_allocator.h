// colossal::core — CUDA allocators: a stream-ordered device pool and pinned host memory.
//
// Device memory comes from CUDA's stream-ordered allocator (cudaMallocFromPoolAsync
// / cudaFreeAsync) on a memory pool of our own per allocator, whose release
// threshold is raised to UINT64_MAX: freed memory stays reserved in the pool and
// is reused by later allocations without going back to the driver (the pool's
// counterpart of PyTorch's caching allocator). Because the pool is ours, its
// reserved-memory attributes count exactly this allocator's memory.
//
// Pinned host memory (cudaHostAlloc, portable to every device) lets host<->device
// copies run truly asynchronously; it is released with cudaFreeHost after the
// release stream has finished its work.
//
//   COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<Allocator> pool,
//                             create_cuda_pool_allocator(Device::cuda(0)));
//   COLOSSAL_ASSIGN_OR_RETURN(void* p, pool->allocate(1 << 20, ctx.compute_stream()));
//   ... kernels on ctx.compute_stream() use p ...
//   pool->deallocate(p, 1 << 20, ctx.compute_stream());  // reusable by later work
//
// Both factories exist in every build; in a CPU-only build (or with no usable
// device) they return FailedPreconditionError saying why. Processes normally use
// the shared instances of core/alloc/default_allocator.h.
#ifndef COLOSSAL_CORE_ALLOC_CUDA_ALLOCATOR_H_
#define COLOSSAL_CORE_ALLOC_CUDA_ALLOCATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/alloc/allocator.h"

namespace colossal::core {

// A new stream-ordered allocator with its own memory pool on CUDA device `device`.
// allocate(bytes, stream) needs a stream of that device; memory is 256-byte
// aligned. When an allocation does not fit, the allocator waits for the device,
// returns the pool's unused memory to the driver and tries once more; if that
// fails too it returns ResourceExhaustedError naming the bytes asked for and
// the device's free and total bytes (cudaMemGetInfo). Stats: allocated bytes
// from its own counters; reserved bytes and their peak from the pool
// (cudaMemPoolAttrReservedMemCurrent / High). release_cached_memory() trims the
// pool to what is allocated (cudaMemPoolTrimTo).
// Errors: the device is not available; the device does not support memory pools.
absl::StatusOr<std::shared_ptr<Allocator>> create_cuda_pool_allocator(Device device);

// A new pinned host allocator (device() is the CPU, kind() kPinnedHost).
// deallocate(ptr, bytes, stream) synchronises `stream` when it is a CUDA stream
// before cudaFreeHost, so an async copy still reading or writing the memory
// finishes first. Reserved bytes equal allocated bytes (nothing is cached).
// Errors: no CUDA in this build, or no usable CUDA device.
absl::StatusOr<std::shared_ptr<Allocator>> create_pinned_host_allocator();

// The global memory of CUDA device `device` in bytes (cudaMemGetInfo's total).
// Errors: the device is not available (or no CUDA in this build).
absl::StatusOr<uint64_t> cuda_memory_total(Device device);

}  // namespace colossal::core

#endif  // COLOSSAL_CORE_ALLOC_CUDA_ALLOCATOR_H_
