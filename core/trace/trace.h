// colossal::core — a trace of what one step did, on request, as a Chrome
// trace-event JSON file (chrome://tracing, https://ui.perfetto.dev).
//
// Host spans time a scope on the calling thread; device spans time the work
// enqueued on a CUDA stream between their start and their end (a pair of
// timing events, resolved when the trace is written), so a step's module
// forwards and backwards, collectives, copies and optimizer work appear on
// one timeline per thread and per stream, each process (rank) its own.
//
//   core::trace::start(rank);                 // e.g. before step 5
//   { core::trace::Span s("module", "forward h.3.attn", &stream); ... }
//   COLOSSAL_RETURN_IF_ERROR(core::trace::stop_and_write("trace_rank0.json"));
//
// Contract: spans are free when no trace runs (one relaxed atomic load).
// Spans may be opened on any thread; a span that outlives stop() is
// dropped. stop_and_write waits for every device span's end event (a stream
// may have been destroyed since) and writes the file under a temporary name,
// renamed into place. A CPU stream (or none) gives a host span only.
#ifndef COLOSSAL_CORE_TRACE_TRACE_H_
#define COLOSSAL_CORE_TRACE_TRACE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/device/stream.h"

namespace colossal::core::trace {

// Whether a trace is being recorded.
bool enabled();
// Starts a trace of this process (`process`: its rank, the trace's pid).
// Errors: a trace is running already (FailedPrecondition).
absl::Status start(int process);
// Ends the trace and writes it to `path`. Errors: no trace running
// (FailedPrecondition); the file cannot be written (with its path).
absl::Status stop_and_write(const std::string& path);
// Events recorded so far (host and device spans; tests).
int64_t events();

// A scope timed on the host, and, when `stream` is a CUDA stream, the work
// enqueued on that stream meanwhile (a span on the stream's own track).
class Span {
 public:
  Span(const char* category, std::string name, const Stream* stream = nullptr);
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  int64_t host_ = -1;    // index of the open host event, -1: not recording
  int64_t device_ = -1;  // index of the open device event
  uint64_t generation_ = 0;
};

}  // namespace colossal::core::trace

#endif  // COLOSSAL_CORE_TRACE_TRACE_H_
