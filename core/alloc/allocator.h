// colossal::core — the allocator interface, its statistics, and Storage.
//
// Every byte a Tensor holds comes from an Allocator:
//   * cpu_allocator()           64-byte aligned host memory (core/alloc/cpu_allocator.h)
//   * CUDA pool allocators      stream-ordered device memory (core/alloc/cuda_allocator.h)
//   * pinned host allocators    page-locked host memory for truly async copies
// and core/alloc/default_allocator.h hands out the process-wide ones.
//
// Storage is one allocation with shared ownership: Tensors (and views of them)
// hold a std::shared_ptr<Storage>, and the last owner returns the memory to its
// allocator. On CUDA the return is stream-ordered: the memory is freed on the
// stream it was allocated on, after the work already enqueued there.
//
//   COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<Storage> s,
//                             Storage::allocate(cpu_allocator(), 4096, Stream::cpu()));
//   float* p = static_cast<float*>(s->data());
//   cpu_allocator()->stats().allocated_bytes;  // includes these 4096 bytes
//
// Out of memory is never fatal: allocate() returns ResourceExhaustedError naming
// the bytes asked for and the bytes free.
#ifndef COLOSSAL_CORE_ALLOC_ALLOCATOR_H_
#define COLOSSAL_CORE_ALLOC_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/device/stream.h"

namespace colossal::core {

// What an allocator's memory is.
enum class MemoryKind {
  kHost,        // pageable host memory
  kPinnedHost,  // page-locked host memory (cudaHostAlloc): DMA-able, async copies
  kCudaDevice,  // memory of a CUDA device
};

const char* memory_kind_name(MemoryKind kind);  // "host", "pinned_host", "cuda_device"

// A snapshot of an allocator's counters. "Allocated" counts the bytes callers
// asked for, in live allocations; "reserved" counts what the allocator holds
// from the system (rounded-up blocks on the host; the CUDA pool's reserved
// memory, which includes freed memory it keeps for reuse). Peaks are maxima
// since creation or the last reset_peak_stats(). Frees count when they are
// enqueued (stream order), not when the device reaches them.
struct AllocatorStats {
  int64_t allocated_bytes = 0;
  int64_t peak_allocated_bytes = 0;
  int64_t reserved_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t live_allocations = 0;     // allocations not yet freed
  int64_t total_allocations = 0;    // successful non-empty allocations ever
  int64_t failed_allocations = 0;   // allocations that returned ResourceExhausted
};

// The allocator interface. Implementations are thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;

  // Where the memory is: the CPU for host and pinned host memory.
  virtual Device device() const = 0;
  virtual MemoryKind kind() const = 0;
  // For messages, e.g. "cpu", "cuda_pool(cuda:0)", "pinned_host".
  virtual std::string name() const = 0;

  // `bytes` bytes (nullptr for 0), usable by work enqueued on `stream` after
  // this call. CUDA allocators require stream.device() == device(); host
  // allocators accept any stream. The address is aligned to at least 64 bytes
  // (CUDA pools: 256). Errors: ResourceExhaustedError when the memory is not
  // there (the message names the bytes asked for and the bytes free);
  // InvalidArgumentError for a stream of another device.
  virtual absl::StatusOr<void*> allocate(size_t bytes, const Stream& stream) = 0;

  // Returns `ptr` (from allocate(bytes, ...) of this allocator; nullptr is
  // ignored). On CUDA the memory is reused only by work ordered after what is
  // already enqueued on `stream`: pass the stream of the memory's last use.
  virtual void deallocate(void* ptr, size_t bytes, const Stream& stream) = 0;

  virtual AllocatorStats stats() const = 0;
  // Sets each peak to the current value.
  virtual void reset_peak_stats() = 0;
  // Gives memory that is reserved but not allocated back to the system (the
  // CUDA pool keeps freed memory otherwise). Host allocators hold none.
  virtual void release_cached_memory() = 0;
};

// "1.50 GiB", "512 B": binary units, for messages.
std::string format_bytes(uint64_t bytes);

// Shared bookkeeping for allocator implementations: thread-safe counters
// behind AllocatorStats.
class AllocationCounters {
 public:
  void on_allocate(size_t requested, size_t reserved);
  void on_free(size_t requested, size_t reserved);
  // Reserved memory given back that no allocation held (a cache emptied).
  void on_release(size_t reserved);
  void on_failure();
  AllocatorStats snapshot() const;
  void reset_peaks();

 private:
  mutable std::mutex mu_;
  AllocatorStats stats_;
};

// One allocation, shared by every Tensor that views it; the destructor returns
// the memory to its allocator on stream() (stream-ordered on CUDA).
//
// Streams: a storage used on a stream other than the one it was allocated on
// must have that stream ordered before the allocation stream (e.g.
// Context::wait(alloc_stream, other)) before the last owner drops it;
// otherwise the memory could be reused while the other stream still reads it.
class Storage {
 public:
  // Allocates `bytes` from `allocator`, ordered on `stream`. Errors as
  // Allocator::allocate.
  static absl::StatusOr<std::shared_ptr<Storage>> allocate(std::shared_ptr<Allocator> allocator,
                                                           size_t bytes, const Stream& stream);

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return bytes_; }
  Device device() const { return allocator_->device(); }
  MemoryKind kind() const { return allocator_->kind(); }
  // The stream the memory was allocated on and is returned on.
  const Stream& stream() const { return stream_; }
  Allocator& allocator() const { return *allocator_; }

 private:
  Storage(std::shared_ptr<Allocator> allocator, void* data, size_t bytes, const Stream& stream)
      : allocator_(std::move(allocator)), data_(data), bytes_(bytes), stream_(stream) {}

  std::shared_ptr<Allocator> allocator_;  // keeps the allocator alive as long as its memory
  void* data_;
  size_t bytes_;
  Stream stream_;
};

}  // namespace colossal::core

#endif  // COLOSSAL_CORE_ALLOC_ALLOCATOR_H_
