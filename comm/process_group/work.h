// colossal::comm — Work: the handle of an asynchronous collective.
//
// Every ProcessGroup call returns at once with a Work (or an error found while
// validating the arguments). The collective runs in the background: on the
// builtin backend's worker thread, or on the GPU's communication stream
// (NCCL). The buffers must stay valid, and unchanged for inputs, until the
// Work has completed.
//
//   COLOSSAL_ASSIGN_OR_RETURN(WorkPtr w, pg.all_reduce(grads, ReduceOp::kSum));
//   ... compute that does not touch `grads` ...
//   COLOSSAL_RETURN_IF_ERROR(w->wait());                 // host blocks until done
//   // or, on the GPU, without blocking the host:
//   w->wait_stream(ctx.compute_stream());                // later kernels run after it
//
// Statuses: the collective's own failure (a timeout naming the op, its
// sequence number and the peer; a peer that went away; ranks that disagree on
// the collective) comes back from wait() and status(). wait(timeout) that
// runs out first is DeadlineExceededError saying the Work is still running;
// the collective itself goes on and may still complete.
#ifndef COLOSSAL_COMM_PROCESS_GROUP_WORK_H_
#define COLOSSAL_COMM_PROCESS_GROUP_WORK_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/device/stream.h"

namespace colossal::comm {

class Work {
 public:
  // `description` names the collective: "all_reduce #12 (sum, float32 x 1000)".
  explicit Work(std::string description) : description_(std::move(description)) {}
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  const std::string& description() const { return description_; }

  // Whether the collective has finished (successfully or not).
  virtual bool is_completed();
  // Blocks the calling thread until the collective has finished or `timeout`
  // passed. Returns the collective's status, or DeadlineExceededError when
  // the wait ran out first (the collective continues).
  virtual absl::Status wait(absl::Duration timeout = absl::InfiniteDuration());
  // Makes `stream` wait for the collective without blocking the host (CUDA
  // backends). Where the collective completes on the host (the builtin
  // backend), this is wait() and `stream` is not used. Errors surface in
  // status() / wait().
  virtual void wait_stream(const core::Stream& stream);
  // Waits the way `stream` runs: a CUDA stream waits on the device
  // (wait_stream; OK now, errors surface in status() / wait()), the CPU
  // stream on the host (wait(), whose status it returns).
  absl::Status wait_on(const core::Stream& stream);
  // The final status once completed; while running, UnavailableError("... is
  // still running").
  virtual absl::Status status();

  // For backends: records the result and wakes waiters. The first call wins.
  void complete(absl::Status status);

 protected:
  // The status if complete() was called.
  std::optional<absl::Status> completed_status();

 private:
  const std::string description_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<absl::Status> status_;
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace colossal::comm

#endif  // COLOSSAL_COMM_PROCESS_GROUP_WORK_H_
