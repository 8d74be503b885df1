#include "core/device/stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/util/gpu_test.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace colossal::core {
namespace {

TEST(StreamTest, CpuStreamAndEventAreSynchronousNoOps) {
  const Stream cpu = Stream::cpu();
  EXPECT_FALSE(cpu.is_cuda());
  EXPECT_EQ(cpu.device(), Device::cpu());
  EXPECT_EQ(cpu.handle(), nullptr);
  EXPECT_EQ(cpu.to_string(), "cpu");
  cpu.synchronize();

  absl::StatusOr<OwnedStream> owned = OwnedStream::create(Device::cpu());
  ASSERT_TRUE(owned.ok()) << owned.status();
  EXPECT_EQ(owned->get(), Stream::cpu());

  absl::StatusOr<Event> event = Event::create(Device::cpu());
  ASSERT_TRUE(event.ok()) << event.status();
  event->record(cpu);
  event->wait(cpu);
  event->synchronize();
  EXPECT_TRUE(event->query());
  wait_stream(cpu, cpu, *event);
}

TEST(StreamTest, UnavailableDevicesAreErrors) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  EXPECT_EQ(OwnedStream::create(Device::cuda(0)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Event::create(Device::cuda(0)).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(StreamDeathTest, RecordingOnAnotherDevicesStreamAborts) {
  absl::StatusOr<Event> event = Event::create(Device::cpu());
  ASSERT_TRUE(event.ok());
  EXPECT_DEATH(event->record(Stream::cuda(Device::cuda(0), nullptr)),
               "Event::record on a stream of another device");
}

#if COLOSSAL_WITH_CUDA
// Host callbacks make ordering observable without kernels: `slow` sleeps, then
// sets the flag; a callback on the other stream records what it saw.
struct Probe {
  std::atomic<int> flag{0};
  std::atomic<int> seen{-1};
};
void CUDART_CB slow_set(void* p) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  static_cast<Probe*>(p)->flag.store(1);
}
void CUDART_CB observe(void* p) {
  auto* probe = static_cast<Probe*>(p);
  probe->seen.store(probe->flag.load());
}
#endif

TEST(StreamCudaTest, WaitStreamOrdersTwoStreams) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const Device d = Device::cuda(0);
  absl::StatusOr<OwnedStream> a = OwnedStream::create(d);
  absl::StatusOr<OwnedStream> b = OwnedStream::create(d, StreamPriority::kHigh);
  absl::StatusOr<Event> event = Event::create(d);
  ASSERT_TRUE(a.ok() && b.ok() && event.ok());
  EXPECT_TRUE(a->get().is_cuda());
  EXPECT_NE(a->get().handle(), nullptr);
  EXPECT_NE(a->get(), b->get());

  Probe probe;
  ASSERT_EQ(cudaLaunchHostFunc(a->get().handle(), slow_set, &probe), cudaSuccess);
  wait_stream(b->get(), a->get(), *event);
  EXPECT_FALSE(event->query());  // the 200 ms callback is still sleeping
  ASSERT_EQ(cudaLaunchHostFunc(b->get().handle(), observe, &probe), cudaSuccess);
  b->get().synchronize();
  EXPECT_EQ(probe.seen.load(), 1);  // b ran its callback only after a's finished
  EXPECT_TRUE(event->query());
#endif
}

TEST(StreamCudaTest, CpuWaiterBlocksTheHost) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const Device d = Device::cuda(0);
  absl::StatusOr<OwnedStream> a = OwnedStream::create(d);
  absl::StatusOr<Event> event = Event::create(d);
  ASSERT_TRUE(a.ok() && event.ok());
  Probe probe;
  ASSERT_EQ(cudaLaunchHostFunc(a->get().handle(), slow_set, &probe), cudaSuccess);
  wait_stream(Stream::cpu(), a->get(), *event);
  EXPECT_EQ(probe.flag.load(), 1);
#endif
}

TEST(StreamCudaTest, MovesTransferOwnership) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  absl::StatusOr<OwnedStream> a = OwnedStream::create(Device::cuda(0));
  ASSERT_TRUE(a.ok());
  const Stream s = a->get();
  OwnedStream moved = std::move(*a);
  EXPECT_EQ(moved.get(), s);
  EXPECT_EQ(a->get(), Stream::cpu());  // NOLINT(bugprone-use-after-move): documented state
  absl::StatusOr<OwnedStream> c = OwnedStream::create(Device::cuda(0));
  ASSERT_TRUE(c.ok());
  moved = std::move(*c);  // destroys s
  EXPECT_NE(moved.get(), s);
  moved.get().synchronize();

  absl::StatusOr<Event> e1 = Event::create(Device::cuda(0));
  ASSERT_TRUE(e1.ok());
  Event e2 = std::move(*e1);
  e2.record(moved.get());
  e2.synchronize();
  EXPECT_TRUE(e2.query());
  EXPECT_TRUE(e1->query());  // moved-from: no event, always complete
#endif
}

}  // namespace
}  // namespace colossal::core
