#include "core/alloc/allocator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/status/check.h"

namespace colossal::core {

const char* memory_kind_name(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost: return "host";
    case MemoryKind::kPinnedHost: return "pinned_host";
    case MemoryKind::kCudaDevice: return "cuda_device";
  }
  return "unknown";
}

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrFormat("%d B", bytes);
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  return absl::StrFormat("%.2f %s", value, kUnits[unit]);
}

void AllocationCounters::on_allocate(size_t requested, size_t reserved) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.allocated_bytes += static_cast<int64_t>(requested);
  stats_.reserved_bytes += static_cast<int64_t>(reserved);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  ++stats_.live_allocations;
  ++stats_.total_allocations;
}

void AllocationCounters::on_free(size_t requested, size_t reserved) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.allocated_bytes -= static_cast<int64_t>(requested);
  stats_.reserved_bytes -= static_cast<int64_t>(reserved);
  --stats_.live_allocations;
  COLOSSAL_CHECK(stats_.allocated_bytes >= 0 && stats_.live_allocations >= 0)
      << "more memory freed than allocated";
}

void AllocationCounters::on_release(size_t reserved) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.reserved_bytes -= static_cast<int64_t>(reserved);
  COLOSSAL_CHECK(stats_.reserved_bytes >= stats_.allocated_bytes) << "more memory released than reserved";
}

void AllocationCounters::on_failure() {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.failed_allocations;
}

AllocatorStats AllocationCounters::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void AllocationCounters::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

absl::StatusOr<std::shared_ptr<Storage>> Storage::allocate(std::shared_ptr<Allocator> allocator,
                                                           size_t bytes, const Stream& stream) {
  COLOSSAL_CHECK(allocator != nullptr) << "Storage::allocate with a null allocator";
  absl::StatusOr<void*> data = allocator->allocate(bytes, stream);
  if (!data.ok()) return data.status();
  return std::shared_ptr<Storage>(new Storage(std::move(allocator), *data, bytes, stream));
}

Storage::~Storage() { allocator_->deallocate(data_, bytes_, stream_); }

}  // namespace colossal::core
