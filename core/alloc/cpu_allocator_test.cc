#include "core/alloc/cpu_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/alloc/default_allocator.h"

namespace colossal::core {
namespace {

bool contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

TEST(CpuAllocatorTest, AlignedWritableBlocks) {
  CpuAllocator allocator;
  EXPECT_EQ(allocator.device(), Device::cpu());
  EXPECT_EQ(allocator.kind(), MemoryKind::kHost);
  std::vector<std::pair<void*, size_t>> blocks;
  for (size_t bytes : {1, 3, 63, 64, 65, 1000, 4096, 1 << 20}) {
    absl::StatusOr<void*> p = allocator.allocate(bytes, Stream::cpu());
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % CpuAllocator::kAlignment, 0u) << bytes;
    std::memset(*p, 0x5a, bytes);  // the whole block is ours
    blocks.emplace_back(*p, bytes);
  }
  for (auto [p, bytes] : blocks) allocator.deallocate(p, bytes, Stream::cpu());
  EXPECT_EQ(allocator.stats().allocated_bytes, 0);
}

TEST(CpuAllocatorTest, ZeroBytesIsNullAndUncounted) {
  CpuAllocator allocator;
  absl::StatusOr<void*> p = allocator.allocate(0, Stream::cpu());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, nullptr);
  allocator.deallocate(nullptr, 0, Stream::cpu());
  EXPECT_EQ(allocator.stats().total_allocations, 0);
}

// A fixed alloc/free sequence against hand-computed statistics: allocated is
// what was asked for, reserved the 64-byte-rounded blocks.
TEST(CpuAllocatorTest, StatisticsFollowAnAllocFreeSequence) {
  CpuAllocator allocator;
  auto alloc = [&](size_t n) {
    absl::StatusOr<void*> p = allocator.allocate(n, Stream::cpu());
    EXPECT_TRUE(p.ok());
    return *p;
  };
  void* a = alloc(100);   // reserved 128
  void* b = alloc(1000);  // reserved 1024
  AllocatorStats s = allocator.stats();
  EXPECT_EQ(s.allocated_bytes, 1100);
  EXPECT_EQ(s.reserved_bytes, 1152);
  EXPECT_EQ(s.live_allocations, 2);
  allocator.deallocate(a, 100, Stream::cpu());
  void* c = alloc(10);  // reserved 64
  s = allocator.stats();
  EXPECT_EQ(s.allocated_bytes, 1010);
  EXPECT_EQ(s.peak_allocated_bytes, 1100);
  EXPECT_EQ(s.reserved_bytes, 1088);
  EXPECT_EQ(s.peak_reserved_bytes, 1152);
  EXPECT_EQ(s.total_allocations, 3);

  allocator.reset_peak_stats();
  EXPECT_EQ(allocator.stats().peak_allocated_bytes, 1010);
  void* d = alloc(4000);  // reserved 4032
  allocator.deallocate(d, 4000, Stream::cpu());
  s = allocator.stats();
  EXPECT_EQ(s.peak_allocated_bytes, 5010);
  EXPECT_EQ(s.peak_reserved_bytes, 1088 + 4032);
  allocator.deallocate(b, 1000, Stream::cpu());
  allocator.deallocate(c, 10, Stream::cpu());
  s = allocator.stats();
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.reserved_bytes, 0);
  EXPECT_EQ(s.live_allocations, 0);
  EXPECT_EQ(s.total_allocations, 4);
  allocator.release_cached_memory();  // nothing cached on the host
}

// Random sizes and frees: the counters always equal the live set's sums, and
// the peak equals the running maximum.
TEST(CpuAllocatorTest, StatisticsMatchARandomSequence) {
  CpuAllocator allocator;
  std::mt19937 rng(5);
  std::vector<std::pair<void*, size_t>> live;
  int64_t allocated = 0, reserved = 0, peak = 0;
  for (int step = 0; step < 2000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const size_t n = 1 + rng() % 5000;
      absl::StatusOr<void*> p = allocator.allocate(n, Stream::cpu());
      ASSERT_TRUE(p.ok());
      live.emplace_back(*p, n);
      allocated += n;
      reserved += (n + 63) / 64 * 64;
    } else {
      const size_t i = rng() % live.size();
      allocator.deallocate(live[i].first, live[i].second, Stream::cpu());
      allocated -= live[i].second;
      reserved -= (live[i].second + 63) / 64 * 64;
      live.erase(live.begin() + i);
    }
    peak = std::max(peak, allocated);
    const AllocatorStats s = allocator.stats();
    ASSERT_EQ(s.allocated_bytes, allocated) << step;
    ASSERT_EQ(s.reserved_bytes, reserved) << step;
    ASSERT_EQ(s.peak_allocated_bytes, peak) << step;
    ASSERT_EQ(s.live_allocations, static_cast<int64_t>(live.size())) << step;
  }
  for (auto [p, n] : live) allocator.deallocate(p, n, Stream::cpu());
}

TEST(CpuAllocatorTest, OutOfMemoryIsAStatusNamingTheBytes) {
  CpuAllocator allocator;
  const size_t huge = size_t{1} << 62;  // past any address space
  absl::StatusOr<void*> p = allocator.allocate(huge, Stream::cpu());
  ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(p.status().message(), "out of host memory (cpu): asked for 4611686018427387904 "
                                             "bytes (4.00 EiB) with "))
      << p.status();
  EXPECT_TRUE(contains(p.status().message(), " available")) << p.status();
  EXPECT_EQ(allocator.stats().failed_allocations, 1);
  EXPECT_EQ(allocator.stats().allocated_bytes, 0);
  // The largest size_t must not overflow the rounding.
  EXPECT_EQ(allocator.allocate(SIZE_MAX, Stream::cpu()).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_GT(host_memory_available(), 0u);
}

TEST(DefaultAllocatorTest, CpuAllocatorIsSharedByTheProcess) {
  EXPECT_EQ(cpu_allocator().get(), cpu_allocator().get());
  absl::StatusOr<std::shared_ptr<Allocator>> a = device_allocator(Device::cpu());
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->get(), cpu_allocator().get());
  EXPECT_EQ(cpu_allocator()->name(), "cpu");
}

// Large blocks: 2 MiB aligned and rounded, counted as such in reserved_bytes.
TEST(CpuAllocatorTest, LargeBlocksAreHugePageAligned) {
  CpuAllocator alloc;
  const size_t bytes = CpuAllocator::kHugeBlockBytes + 100;
  void* p = alloc.allocate(bytes, Stream::cpu()).value();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % CpuAllocator::kHugePageBytes, 0u);
  EXPECT_EQ(alloc.stats().allocated_bytes, static_cast<int64_t>(bytes));
  EXPECT_EQ(alloc.stats().reserved_bytes,
            static_cast<int64_t>(CpuAllocator::kHugeBlockBytes + CpuAllocator::kHugePageBytes));
  static_cast<char*>(p)[bytes - 1] = 1;  // usable to the last byte
  alloc.deallocate(p, bytes, Stream::cpu());
  EXPECT_EQ(alloc.stats().allocated_bytes, 0);
  alloc.release_cached_memory();
  EXPECT_EQ(alloc.stats().reserved_bytes, 0);
}

// A freed large block is handed out again for the same rounded size (no fresh
// pages to fault in), stays reserved while cached, and goes back to the
// system on release_cached_memory; small blocks and other sizes are not reused.
TEST(CpuAllocatorTest, LargeBlocksAreReusedUntilReleased) {
  CpuAllocator alloc;
  const size_t bytes = CpuAllocator::kHugeBlockBytes * 2;
  const int64_t rounded = static_cast<int64_t>(bytes);  // already a multiple of 2 MiB
  void* p = alloc.allocate(bytes, Stream::cpu()).value();
  alloc.deallocate(p, bytes, Stream::cpu());
  EXPECT_EQ(alloc.stats().allocated_bytes, 0);
  EXPECT_EQ(alloc.stats().reserved_bytes, rounded);
  // Another request rounding to the same size gets the same block back.
  void* q = alloc.allocate(bytes - 1000, Stream::cpu()).value();
  EXPECT_EQ(q, p);
  EXPECT_EQ(alloc.stats().allocated_bytes, static_cast<int64_t>(bytes - 1000));
  EXPECT_EQ(alloc.stats().reserved_bytes, rounded);
  // A different size is a new block while q is live.
  void* r = alloc.allocate(bytes + CpuAllocator::kHugePageBytes, Stream::cpu()).value();
  EXPECT_NE(r, q);
  alloc.deallocate(q, bytes - 1000, Stream::cpu());
  alloc.deallocate(r, bytes + CpuAllocator::kHugePageBytes, Stream::cpu());
  EXPECT_EQ(alloc.stats().reserved_bytes, 2 * rounded + static_cast<int64_t>(CpuAllocator::kHugePageBytes));
  alloc.release_cached_memory();
  EXPECT_EQ(alloc.stats().reserved_bytes, 0);
  EXPECT_EQ(alloc.stats().live_allocations, 0);
}

// The cache holds at most kMaxCachedBytes: a block that does not fit is freed.
TEST(CpuAllocatorTest, CacheIsBounded) {
  CpuAllocator alloc;
  const size_t big = CpuAllocator::kMaxCachedBytes / 2 + CpuAllocator::kHugePageBytes;
  void* a = alloc.allocate(big, Stream::cpu()).value();
  void* b = alloc.allocate(big, Stream::cpu()).value();
  alloc.deallocate(a, big, Stream::cpu());  // cached
  alloc.deallocate(b, big, Stream::cpu());  // would pass the bound: freed
  EXPECT_EQ(alloc.stats().reserved_bytes, static_cast<int64_t>(big));
  alloc.release_cached_memory();
  EXPECT_EQ(alloc.stats().reserved_bytes, 0);
}

}  // namespace
}  // namespace colossal::core
