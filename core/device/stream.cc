#include "core/device/stream.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/status/check.h"
#include "core/status/cuda_check.h"
#include "core/status/status.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace colossal::core {

Stream Stream::cuda(Device device, CUstream_st* handle) {
  COLOSSAL_CHECK(device.is_cuda()) << "Stream::cuda(" << device << ", ...)";
  return Stream(device, handle);
}

void Stream::synchronize() const {
#if COLOSSAL_WITH_CUDA
  if (!is_cuda()) return;
  DeviceGuard guard(device_);
  CUDA_CHECK(cudaStreamSynchronize(handle_));
#endif
}

std::string Stream::to_string() const {
  if (!is_cuda()) return "cpu";
  return absl::StrFormat("%s/%p", device_.to_string(), static_cast<const void*>(handle_));
}

absl::StatusOr<OwnedStream> OwnedStream::create(Device device, StreamPriority priority) {
  COLOSSAL_RETURN_IF_ERROR(check_device_available(device));
  if (device.is_cpu()) return OwnedStream(Stream::cpu());
#if COLOSSAL_WITH_CUDA
  DeviceGuard guard(device);
  int least = 0, greatest = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t handle = nullptr;
  CUDA_CHECK(cudaStreamCreateWithPriority(&handle, cudaStreamNonBlocking,
                                          priority == StreamPriority::kHigh ? greatest : least));
  return OwnedStream(Stream::cuda(device, handle));
#else
  COLOSSAL_FATAL() << "unreachable: " << device << " passed check_device_available";
#endif
}

OwnedStream::OwnedStream(OwnedStream&& other) noexcept : stream_(other.stream_) {
  other.stream_ = Stream::cpu();
}

OwnedStream& OwnedStream::operator=(OwnedStream&& other) noexcept {
  if (this != &other) {
    reset();
    stream_ = other.stream_;
    other.stream_ = Stream::cpu();
  }
  return *this;
}

OwnedStream::~OwnedStream() { reset(); }

void OwnedStream::reset() {
#if COLOSSAL_WITH_CUDA
  if (stream_.is_cuda() && stream_.handle() != nullptr) {
    CUDA_CHECK_RELEASE(cudaStreamDestroy(stream_.handle()));
  }
#endif
  stream_ = Stream::cpu();
}

absl::StatusOr<Event> Event::create(Device device) {
  COLOSSAL_RETURN_IF_ERROR(check_device_available(device));
  if (device.is_cpu()) return Event(device, nullptr);
#if COLOSSAL_WITH_CUDA
  DeviceGuard guard(device);
  cudaEvent_t handle = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&handle, cudaEventDisableTiming));
  return Event(device, handle);
#else
  COLOSSAL_FATAL() << "unreachable: " << device << " passed check_device_available";
#endif
}

Event::Event(Event&& other) noexcept : device_(other.device_), handle_(other.handle_) {
  other.handle_ = nullptr;
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    reset();
    device_ = other.device_;
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

Event::~Event() { reset(); }

void Event::reset() {
#if COLOSSAL_WITH_CUDA
  if (handle_ != nullptr) CUDA_CHECK_RELEASE(cudaEventDestroy(handle_));
#endif
  handle_ = nullptr;
}

void Event::record(const Stream& stream) {
  COLOSSAL_CHECK_EQ(stream.device(), device_) << "Event::record on a stream of another device";
#if COLOSSAL_WITH_CUDA
  if (handle_ == nullptr) return;
  DeviceGuard guard(device_);
  CUDA_CHECK(cudaEventRecord(handle_, stream.handle()));
#endif
}

void Event::wait(const Stream& waiter) const {
#if COLOSSAL_WITH_CUDA
  if (handle_ == nullptr) return;
  if (!waiter.is_cuda()) {
    synchronize();
    return;
  }
  DeviceGuard guard(waiter.device());
  CUDA_CHECK(cudaStreamWaitEvent(waiter.handle(), handle_, 0));
#endif
}

void Event::synchronize() const {
#if COLOSSAL_WITH_CUDA
  if (handle_ == nullptr) return;
  CUDA_CHECK(cudaEventSynchronize(handle_));
#endif
}

bool Event::query() const {
#if COLOSSAL_WITH_CUDA
  if (handle_ == nullptr) return true;
  const cudaError_t err = cudaEventQuery(handle_);
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not-ready is an answer, not an error
    return false;
  }
  CUDA_CHECK(err);
  return true;
#else
  return true;
#endif
}

void wait_stream(const Stream& waiter, const Stream& producer, Event& event) {
  if (waiter == producer || !producer.is_cuda()) return;
  event.record(producer);
  event.wait(waiter);
}

}  // namespace colossal::core
