// colossal::core — host memory allocator: 64-byte aligned blocks.
//
// The CPU path's allocator (the process-wide one is cpu_allocator() in
// core/alloc/default_allocator.h). Blocks are aligned to 64 bytes (a cache line,
// and enough for AVX-512 loads) and their sizes rounded up to 64, which is what
// reserved_bytes counts; allocated_bytes counts the bytes asked for. Blocks of
// kHugeBlockBytes or more are aligned and rounded to 2 MiB instead and advised
// as transparent huge pages (madvise), and when freed they are kept (up to
// kMaxCachedBytes in all) and handed out again for the same rounded size: a
// training step frees and allocates the same large buffers (logits,
// activations) every step, and a fresh block costs the kernel a fault and a
// zeroed page per 2 MiB (about a tenth of a CPU training step, measured).
// Cached blocks count in reserved_bytes, not in allocated_bytes;
// release_cached_memory() returns them, and an allocation that fails returns
// them and tries once more.
//
//   auto alloc = std::make_shared<CpuAllocator>();
//   COLOSSAL_ASSIGN_OR_RETURN(void* p, alloc->allocate(1000, Stream::cpu()));
//   alloc->stats().reserved_bytes;   // 1024
//   alloc->deallocate(p, 1000, Stream::cpu());
#ifndef COLOSSAL_CORE_ALLOC_CPU_ALLOCATOR_H_
#define COLOSSAL_CORE_ALLOC_CPU_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "core/alloc/allocator.h"

namespace colossal::core {

class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kHugePageBytes = size_t{2} << 20;
  static constexpr size_t kHugeBlockBytes = size_t{8} << 20;
  static constexpr size_t kMaxCachedBytes = size_t{1} << 30;

  CpuAllocator() = default;
  ~CpuAllocator() override;

  Device device() const override { return Device::cpu(); }
  MemoryKind kind() const override { return MemoryKind::kHost; }
  std::string name() const override { return "cpu"; }
  // Any stream is accepted and ignored: host memory is usable at once.
  absl::StatusOr<void*> allocate(size_t bytes, const Stream& stream) override;
  void deallocate(void* ptr, size_t bytes, const Stream& stream) override;
  AllocatorStats stats() const override { return counters_.snapshot(); }
  void reset_peak_stats() override { counters_.reset_peaks(); }
  // Frees the cached large blocks.
  void release_cached_memory() override;

 private:
  // A cached block of the given rounded size, or nullptr.
  void* take_cached(size_t rounded);
  // Keeps a freed large block if the cache has room; false if it was not kept.
  bool keep_cached(void* ptr, size_t rounded);

  AllocationCounters counters_;
  std::mutex mu_;
  std::multimap<size_t, void*> cached_;  // rounded size -> block
  size_t cached_bytes_ = 0;
};

// Host memory the kernel reports as available (MemAvailable in /proc/meminfo,
// else free physical pages), for out-of-memory messages.
uint64_t host_memory_available();
// The host's physical memory in bytes (0 when the system does not say).
uint64_t host_memory_total();

// The ResourceExhaustedError for a failed host allocation of `bytes` by
// `allocator_name`, naming the bytes asked for and the bytes available.
absl::Status host_out_of_memory(const std::string& allocator_name, size_t bytes);

}  // namespace colossal::core

#endif  // COLOSSAL_CORE_ALLOC_CPU_ALLOCATOR_H_
