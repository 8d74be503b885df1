#include "core/alloc/cpu_allocator.h"

#include <sys/mman.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace colossal::core {
namespace {

// Large blocks are 2 MiB aligned and sized, and advised as transparent huge
// pages: training frees and re-allocates the same large buffers every step
// (logits, activations), and each fresh block otherwise page-faults in 4 KiB
// pieces (about a tenth of a CPU training step, measured).
size_t alignment_for(size_t bytes) {
  return bytes >= CpuAllocator::kHugeBlockBytes ? CpuAllocator::kHugePageBytes
                                                : CpuAllocator::kAlignment;
}

size_t round_up(size_t bytes) {
  const size_t a = alignment_for(bytes);
  return (bytes + a - 1) / a * a;
}

}  // namespace

uint64_t host_memory_available() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    uint64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages < 0 || page_size < 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

uint64_t host_memory_total() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages < 0 || page_size < 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

absl::Status host_out_of_memory(const std::string& allocator_name, size_t bytes) {
  const uint64_t available = host_memory_available();
  return absl::ResourceExhaustedError(
      absl::StrCat("out of host memory (", allocator_name, "): asked for ", bytes, " bytes (",
                   format_bytes(bytes), ") with ", available, " bytes (", format_bytes(available),
                   ") available"));
}

CpuAllocator::~CpuAllocator() { release_cached_memory(); }

void* CpuAllocator::take_cached(size_t rounded) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cached_.find(rounded);
  if (it == cached_.end()) return nullptr;
  void* p = it->second;
  cached_.erase(it);
  cached_bytes_ -= rounded;
  return p;
}

bool CpuAllocator::keep_cached(void* ptr, size_t rounded) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cached_bytes_ + rounded > kMaxCachedBytes) return false;
  cached_.emplace(rounded, ptr);
  cached_bytes_ += rounded;
  return true;
}

void CpuAllocator::release_cached_memory() {
  std::multimap<size_t, void*> blocks;
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks.swap(cached_);
    bytes = cached_bytes_;
    cached_bytes_ = 0;
  }
  for (const auto& [size, p] : blocks) std::free(p);
  if (bytes > 0) counters_.on_release(bytes);
}

absl::StatusOr<void*> CpuAllocator::allocate(size_t bytes, const Stream& stream) {
  if (bytes == 0) return nullptr;
  if (bytes > std::numeric_limits<size_t>::max() - kHugePageBytes) {
    counters_.on_failure();
    return host_out_of_memory(name(), bytes);
  }
  const size_t rounded = round_up(bytes);
  const bool large = bytes >= kHugeBlockBytes;
  if (large) {
    if (void* p = take_cached(rounded)) {
      counters_.on_allocate(bytes, 0);  // already counted as reserved
      return p;
    }
  }
  void* p = std::aligned_alloc(alignment_for(bytes), rounded);
  if (p == nullptr && large) {  // the cache may hold what is missing
    release_cached_memory();
    p = std::aligned_alloc(alignment_for(bytes), rounded);
  }
  if (p == nullptr) {
    counters_.on_failure();
    return host_out_of_memory(name(), bytes);
  }
  // Advice only: without transparent huge pages this changes nothing.
  if (large) madvise(p, rounded, MADV_HUGEPAGE);
  counters_.on_allocate(bytes, rounded);
  return p;
}

void CpuAllocator::deallocate(void* ptr, size_t bytes, const Stream& stream) {
  if (ptr == nullptr) return;
  const size_t rounded = round_up(bytes);
  if (bytes >= kHugeBlockBytes && keep_cached(ptr, rounded)) {
    counters_.on_free(bytes, 0);  // stays reserved while cached
    return;
  }
  std::free(ptr);
  counters_.on_free(bytes, rounded);
}

}  // namespace colossal::core
