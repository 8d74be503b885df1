#include "core/alloc/default_allocator.h"

#include <map>
#include <mutex>

#include "core/alloc/cpu_allocator.h"
#include "core/alloc/cuda_allocator.h"

namespace colossal::core {
namespace {

// Leaked on purpose: see the header.
struct Registry {
  std::mutex mu;
  std::map<int, std::shared_ptr<Allocator>> cuda;  // by device index
  std::shared_ptr<Allocator> pinned;
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

std::shared_ptr<Allocator> cpu_allocator() {
  static auto* allocator = new std::shared_ptr<Allocator>(std::make_shared<CpuAllocator>());
  return *allocator;
}

absl::StatusOr<std::shared_ptr<Allocator>> device_allocator(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.cuda.find(device.index());
  if (it != r.cuda.end()) return it->second;
  absl::StatusOr<std::shared_ptr<Allocator>> created = create_cuda_pool_allocator(device);
  if (!created.ok()) return created.status();
  r.cuda.emplace(device.index(), *created);
  return *created;
}

absl::StatusOr<std::shared_ptr<Allocator>> pinned_host_allocator() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.pinned) return r.pinned;
  absl::StatusOr<std::shared_ptr<Allocator>> created = create_pinned_host_allocator();
  if (!created.ok()) return created.status();
  r.pinned = *created;
  return r.pinned;
}

absl::StatusOr<uint64_t> memory_capacity(Device device) {
  if (device.is_cuda()) return cuda_memory_total(device);
  const uint64_t total = host_memory_total();
  if (total == 0) return absl::UnavailableError("the host does not report its physical memory");
  return total;
}

}  // namespace colossal::core
