// The CUDA pool and pinned host allocators. Without CUDA (or without a device)
// the factories must say why; with a device, statistics follow alloc/free
// sequences and out-of-memory is a status.
#include "core/alloc/cuda_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/alloc/default_allocator.h"
#include "core/status/check.h"
#include "tests/util/gpu_test.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace colossal::core {
namespace {

bool contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

TEST(CudaAllocatorTest, FactoriesExplainWhyThereIsNoCuda) {
  EXPECT_EQ(create_cuda_pool_allocator(Device::cpu()).status().code(),
            absl::StatusCode::kInvalidArgument);
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  const absl::Status pool = create_cuda_pool_allocator(Device::cuda(0)).status();
  EXPECT_EQ(pool.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(pool.message(), "cuda:0 is not available")) << pool;
  const absl::Status pinned = create_pinned_host_allocator().status();
  EXPECT_EQ(pinned.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(pinned.message(), "pinned host memory needs CUDA: ")) << pinned;
  EXPECT_EQ(device_allocator(Device::cuda(0)).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pinned_host_allocator().status().code(), absl::StatusCode::kFailedPrecondition);
  if (!built_with_cuda()) {
    EXPECT_TRUE(contains(pool.message(), "built without CUDA")) << pool;
  }
}

#if COLOSSAL_WITH_CUDA
struct CudaFixture {
  std::shared_ptr<Allocator> pool;
  OwnedStream stream;
};

CudaFixture make_pool() {
  absl::StatusOr<std::shared_ptr<Allocator>> pool = create_cuda_pool_allocator(Device::cuda(0));
  absl::StatusOr<OwnedStream> stream = OwnedStream::create(Device::cuda(0));
  COLOSSAL_CHECK_OK(pool.status());
  COLOSSAL_CHECK_OK(stream.status());
  return CudaFixture{*pool, std::move(*stream)};
}
#endif

TEST(CudaPoolAllocatorTest, AllocatesUsableStreamOrderedMemory) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  CudaFixture f = make_pool();
  const Stream& s = f.stream.get();
  EXPECT_EQ(f.pool->device(), Device::cuda(0));
  EXPECT_EQ(f.pool->kind(), MemoryKind::kCudaDevice);
  EXPECT_EQ(f.pool->name(), "cuda_pool(cuda:0)");
  const size_t n = 3 << 20;
  absl::StatusOr<void*> p = f.pool->allocate(n, s);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % 256, 0u);
  std::vector<uint8_t> host(n), back(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<uint8_t>(i * 31 + 7);
  ASSERT_EQ(cudaMemcpyAsync(*p, host.data(), n, cudaMemcpyHostToDevice, s.handle()), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(back.data(), *p, n, cudaMemcpyDeviceToHost, s.handle()), cudaSuccess);
  s.synchronize();
  EXPECT_EQ(std::memcmp(host.data(), back.data(), n), 0);
  f.pool->deallocate(*p, n, s);
  s.synchronize();
  EXPECT_EQ(f.pool->allocate(0, s).value(), nullptr);
#endif
}

TEST(CudaPoolAllocatorTest, StatisticsFollowAnAllocFreeSequence) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  CudaFixture f = make_pool();
  const Stream& s = f.stream.get();
  const size_t mib = 1 << 20;
  AllocatorStats st = f.pool->stats();
  EXPECT_EQ(st.allocated_bytes, 0);
  EXPECT_EQ(st.reserved_bytes, 0);  // a fresh pool of our own holds nothing

  void* a = f.pool->allocate(8 * mib, s).value();
  void* b = f.pool->allocate(24 * mib, s).value();
  st = f.pool->stats();
  EXPECT_EQ(st.allocated_bytes, static_cast<int64_t>(32 * mib));
  EXPECT_GE(st.reserved_bytes, static_cast<int64_t>(32 * mib));
  EXPECT_EQ(st.live_allocations, 2);
  f.pool->deallocate(a, 8 * mib, s);
  void* c = f.pool->allocate(1 * mib, s).value();
  st = f.pool->stats();
  EXPECT_EQ(st.allocated_bytes, static_cast<int64_t>(25 * mib));
  EXPECT_EQ(st.peak_allocated_bytes, static_cast<int64_t>(32 * mib));
  EXPECT_EQ(st.total_allocations, 3);
  const int64_t reserved_before_free = st.reserved_bytes;

  f.pool->deallocate(b, 24 * mib, s);
  f.pool->deallocate(c, 1 * mib, s);
  s.synchronize();
  st = f.pool->stats();
  EXPECT_EQ(st.allocated_bytes, 0);
  EXPECT_EQ(st.live_allocations, 0);
  // The release threshold keeps freed memory in the pool...
  EXPECT_EQ(st.reserved_bytes, reserved_before_free);
  EXPECT_GE(st.peak_reserved_bytes, static_cast<int64_t>(32 * mib));
  // ...and a new allocation reuses it without growing the pool.
  void* d = f.pool->allocate(16 * mib, s).value();
  EXPECT_EQ(f.pool->stats().reserved_bytes, reserved_before_free);
  f.pool->deallocate(d, 16 * mib, s);
  s.synchronize();

  f.pool->reset_peak_stats();
  st = f.pool->stats();
  EXPECT_EQ(st.peak_allocated_bytes, 0);
  EXPECT_EQ(st.peak_reserved_bytes, st.reserved_bytes);

  f.pool->release_cached_memory();
  st = f.pool->stats();
  EXPECT_EQ(st.reserved_bytes, 0);
  EXPECT_EQ(st.peak_reserved_bytes, reserved_before_free);  // peaks survive a trim
#endif
}

TEST(CudaPoolAllocatorTest, OutOfMemoryIsAStatusNamingTheBytes) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  CudaFixture f = make_pool();
  const size_t huge = size_t{1} << 50;  // 1 PiB
  absl::StatusOr<void*> p = f.pool->allocate(huge, f.stream.get());
  ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted) << p.status();
  EXPECT_TRUE(contains(p.status().message(),
                       "out of memory on cuda:0: asked for 1125899906842624 bytes (1.00 PiB) with "))
      << p.status();
  EXPECT_TRUE(contains(p.status().message(), " free of ")) << p.status();
  EXPECT_EQ(f.pool->stats().failed_allocations, 1);
  // The allocator and the device are still fine afterwards.
  absl::StatusOr<void*> small = f.pool->allocate(1024, f.stream.get());
  ASSERT_TRUE(small.ok()) << small.status();
  f.pool->deallocate(*small, 1024, f.stream.get());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
#endif
}

TEST(CudaPoolAllocatorTest, StreamOfAnotherDeviceIsAnError) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  CudaFixture f = make_pool();
  const absl::Status s = f.pool->allocate(64, Stream::cpu()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "ordered on a stream of cpu")) << s;
#endif
}

TEST(PinnedHostAllocatorTest, PinnedMemoryAndStatistics) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  absl::StatusOr<std::shared_ptr<Allocator>> pinned = create_pinned_host_allocator();
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ((*pinned)->device(), Device::cpu());
  EXPECT_EQ((*pinned)->kind(), MemoryKind::kPinnedHost);
  CudaFixture f = make_pool();
  const Stream& s = f.stream.get();
  void* a = (*pinned)->allocate(1000, s).value();
  void* b = (*pinned)->allocate(5000, s).value();
  cudaPointerAttributes attr;
  ASSERT_EQ(cudaPointerGetAttributes(&attr, a), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);  // page-locked, known to CUDA
  AllocatorStats st = (*pinned)->stats();
  EXPECT_EQ(st.allocated_bytes, 6000);
  EXPECT_EQ(st.reserved_bytes, 6000);
  // An async copy out of pinned memory, then a free ordered after it.
  std::memset(b, 0x3c, 5000);
  void* dev = f.pool->allocate(5000, s).value();
  ASSERT_EQ(cudaMemcpyAsync(dev, b, 5000, cudaMemcpyHostToDevice, s.handle()), cudaSuccess);
  (*pinned)->deallocate(b, 5000, s);  // synchronises s first
  std::vector<uint8_t> back(5000);
  ASSERT_EQ(cudaMemcpyAsync(back.data(), dev, 5000, cudaMemcpyDeviceToHost, s.handle()), cudaSuccess);
  s.synchronize();
  EXPECT_EQ(back[0], 0x3c);
  EXPECT_EQ(back[4999], 0x3c);
  f.pool->deallocate(dev, 5000, s);
  (*pinned)->deallocate(a, 1000, Stream::cpu());
  st = (*pinned)->stats();
  EXPECT_EQ(st.allocated_bytes, 0);
  EXPECT_EQ(st.peak_allocated_bytes, 6000);
  s.synchronize();
#endif
}

TEST(DefaultAllocatorCudaTest, OnePoolPerDeviceAndOnePinnedAllocator) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  absl::StatusOr<std::shared_ptr<Allocator>> a = device_allocator(Device::cuda(0));
  absl::StatusOr<std::shared_ptr<Allocator>> b = device_allocator(Device::cuda(0));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status();
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ((*a)->device(), Device::cuda(0));
  absl::StatusOr<std::shared_ptr<Allocator>> p = pinned_host_allocator();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->get(), pinned_host_allocator()->get());
  EXPECT_EQ(device_allocator(Device::cuda(cuda_device_count())).status().code(),
            absl::StatusCode::kOutOfRange);
#endif
}

}  // namespace
}  // namespace colossal::core
