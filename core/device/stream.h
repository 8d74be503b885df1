// colossal::core — streams and events: the order of work on a device.
//
// A Stream is a cheap, copyable handle naming an ordered queue of work on one
// device. On the CPU there is one implicit stream, Stream::cpu(): work on it
// runs synchronously in the calling thread. On a CUDA device a Stream wraps a
// cudaStream_t; OwnedStream creates and destroys one (non-blocking, so it never
// synchronises with the legacy default stream). An Event marks a point in a
// stream; another stream can wait for it on the device without blocking the host.
//
//   COLOSSAL_ASSIGN_OR_RETURN(OwnedStream compute, OwnedStream::create(Device::cuda(0)));
//   COLOSSAL_ASSIGN_OR_RETURN(OwnedStream comm, OwnedStream::create(Device::cuda(0),
//                                                                    StreamPriority::kHigh));
//   COLOSSAL_ASSIGN_OR_RETURN(Event ready, Event::create(Device::cuda(0)));
//   // ... enqueue backward on compute.get() ...
//   wait_stream(comm.get(), compute.get(), ready);  // comm waits for work so far
//   // ... enqueue the all-reduce on comm.get() ...
//
// The header does not include CUDA's: handles are the runtime's own opaque
// pointer types (cudaStream_t is CUstream_st*, cudaEvent_t is CUevent_st*).
#ifndef COLOSSAL_CORE_DEVICE_STREAM_H_
#define COLOSSAL_CORE_DEVICE_STREAM_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/device/device.h"

struct CUstream_st;
struct CUevent_st;

namespace colossal::core {

// A non-owning handle to a queue of work on one device.
class Stream {
 public:
  // The CPU stream.
  constexpr Stream() = default;
  static constexpr Stream cpu() { return Stream(); }
  // Wraps `handle`, a cudaStream_t of CUDA device `device` (nullptr is that
  // device's legacy default stream). Not owned: the caller keeps it alive.
  static Stream cuda(Device device, CUstream_st* handle);

  Device device() const { return device_; }
  bool is_cuda() const { return device_.is_cuda(); }
  // The cudaStream_t (nullptr for the CPU stream and for a legacy default stream).
  CUstream_st* handle() const { return handle_; }

  // Blocks the calling thread until all work enqueued so far has finished.
  // Returns at once on the CPU stream. A CUDA error aborts (CUDA_CHECK).
  void synchronize() const;

  // "cpu" or "cuda:0/0x7f..." (the handle), for messages.
  std::string to_string() const;

  friend bool operator==(const Stream& a, const Stream& b) {
    return a.device_ == b.device_ && a.handle_ == b.handle_;
  }
  friend bool operator!=(const Stream& a, const Stream& b) { return !(a == b); }

 private:
  Stream(Device device, CUstream_st* handle) : device_(device), handle_(handle) {}
  Device device_;
  CUstream_st* handle_ = nullptr;
};

enum class StreamPriority { kNormal, kHigh };

// Owns a stream: a new non-blocking CUDA stream, or the CPU stream for the CPU.
// Movable, not copyable; destroying it releases the CUDA stream once the work
// enqueued on it has finished (the host does not wait). A moved-from
// OwnedStream holds the CPU stream.
class OwnedStream {
 public:
  // A new stream on `device`. kHigh asks CUDA for its greatest stream priority
  // (communication streams use it so collectives are not starved by compute).
  // Errors: the device is not available (check_device_available).
  static absl::StatusOr<OwnedStream> create(Device device,
                                            StreamPriority priority = StreamPriority::kNormal);

  OwnedStream(OwnedStream&& other) noexcept;
  OwnedStream& operator=(OwnedStream&& other) noexcept;
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  ~OwnedStream();

  const Stream& get() const { return stream_; }

 private:
  explicit OwnedStream(Stream stream) : stream_(stream) {}
  void reset();
  Stream stream_;
};

// A marker recorded on a stream. On the CPU every operation is a no-op and the
// event is always complete (CPU streams are synchronous). CUDA events are
// created without timing, for ordering only. A moved-from Event holds no CUDA
// event and behaves like a CPU one.
class Event {
 public:
  // Errors: the device is not available.
  static absl::StatusOr<Event> create(Device device);

  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  Device device() const { return device_; }

  // Marks the work enqueued on `stream` so far. `stream` must be on the event's
  // device (a mismatch is a bug and aborts).
  void record(const Stream& stream);
  // Makes `waiter` (any device) wait, on the device, for the work marked by the
  // latest record() before this call. Later records do not affect it. Waiting on
  // a never-recorded event does nothing. A CPU waiter runs synchronously, so for
  // it this blocks the host until the marked work is done (synchronize()).
  void wait(const Stream& waiter) const;
  // Blocks the host until the marked work has finished.
  void synchronize() const;
  // Whether the marked work has finished (true if never recorded).
  bool query() const;

 private:
  Event(Device device, CUevent_st* handle) : device_(device), handle_(handle) {}
  void reset();
  Device device_;
  CUevent_st* handle_ = nullptr;
};

// Makes `waiter` wait, on the device, for all work enqueued on `producer` so
// far, by recording `event` on `producer` (event.device() == producer.device()).
// Does nothing when both are the same stream or both are CPU streams.
void wait_stream(const Stream& waiter, const Stream& producer, Event& event);

}  // namespace colossal::core

#endif  // COLOSSAL_CORE_DEVICE_STREAM_H_
