#include "core/alloc/allocator.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "core/alloc/cpu_allocator.h"

namespace colossal::core {
namespace {

TEST(FormatBytesTest, BinaryUnits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(uint64_t{32} << 20), "32.00 MiB");
  EXPECT_EQ(format_bytes(uint64_t{80} << 30), "80.00 GiB");
  EXPECT_EQ(format_bytes(uint64_t{1} << 50), "1.00 PiB");
  EXPECT_EQ(memory_kind_name(MemoryKind::kPinnedHost), std::string("pinned_host"));
}

TEST(AllocationCountersTest, TracksLiveBytesAndPeaks) {
  AllocationCounters c;
  c.on_allocate(100, 128);
  c.on_allocate(50, 64);
  c.on_free(100, 128);
  c.on_allocate(10, 64);
  c.on_failure();
  AllocatorStats s = c.snapshot();
  EXPECT_EQ(s.allocated_bytes, 60);
  EXPECT_EQ(s.peak_allocated_bytes, 150);
  EXPECT_EQ(s.reserved_bytes, 128);
  EXPECT_EQ(s.peak_reserved_bytes, 192);
  EXPECT_EQ(s.live_allocations, 2);
  EXPECT_EQ(s.total_allocations, 3);
  EXPECT_EQ(s.failed_allocations, 1);
  c.reset_peaks();
  s = c.snapshot();
  EXPECT_EQ(s.peak_allocated_bytes, 60);
  EXPECT_EQ(s.peak_reserved_bytes, 128);
}

TEST(AllocationCountersTest, ThreadSafe) {
  AllocationCounters c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&c] {
      for (int i = 0; i < 10000; ++i) {
        c.on_allocate(8, 64);
        c.on_free(8, 64);
      }
    });
  }
  for (auto& t : threads) t.join();
  const AllocatorStats s = c.snapshot();
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.live_allocations, 0);
  EXPECT_EQ(s.total_allocations, 40000);
  EXPECT_LE(s.peak_allocated_bytes, 32);
}

TEST(AllocationCountersDeathTest, FreeingMoreThanAllocatedAborts) {
  AllocationCounters c;
  EXPECT_DEATH(c.on_free(8, 64), "more memory freed than allocated");
}

TEST(StorageTest, ReturnsMemoryWhenTheLastOwnerGoes) {
  auto allocator = std::make_shared<CpuAllocator>();
  absl::StatusOr<std::shared_ptr<Storage>> storage = Storage::allocate(allocator, 1000, Stream::cpu());
  ASSERT_TRUE(storage.ok()) << storage.status();
  std::shared_ptr<Storage> s = *storage;
  EXPECT_NE(s->data(), nullptr);
  EXPECT_EQ(s->nbytes(), 1000u);
  EXPECT_EQ(s->device(), Device::cpu());
  EXPECT_EQ(s->kind(), MemoryKind::kHost);
  EXPECT_EQ(s->stream(), Stream::cpu());
  EXPECT_EQ(&s->allocator(), allocator.get());
  EXPECT_EQ(allocator->stats().allocated_bytes, 1000);

  std::shared_ptr<Storage> view = s;  // a second owner
  storage = absl::StatusOr<std::shared_ptr<Storage>>();
  s.reset();
  EXPECT_EQ(allocator->stats().allocated_bytes, 1000);
  view.reset();
  EXPECT_EQ(allocator->stats().allocated_bytes, 0);
  EXPECT_EQ(allocator->stats().live_allocations, 0);
}

TEST(StorageTest, KeepsItsAllocatorAlive) {
  auto allocator = std::make_shared<CpuAllocator>();
  std::weak_ptr<Allocator> weak = allocator;
  absl::StatusOr<std::shared_ptr<Storage>> s = Storage::allocate(allocator, 64, Stream::cpu());
  ASSERT_TRUE(s.ok());
  allocator.reset();
  EXPECT_FALSE(weak.expired());
  *s = nullptr;
  EXPECT_TRUE(weak.expired());
}

TEST(StorageTest, EmptyStorageAndOutOfMemory) {
  auto allocator = std::make_shared<CpuAllocator>();
  absl::StatusOr<std::shared_ptr<Storage>> empty = Storage::allocate(allocator, 0, Stream::cpu());
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->data(), nullptr);
  EXPECT_EQ((*empty)->nbytes(), 0u);
  absl::StatusOr<std::shared_ptr<Storage>> huge =
      Storage::allocate(allocator, size_t{1} << 62, Stream::cpu());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace colossal::core
