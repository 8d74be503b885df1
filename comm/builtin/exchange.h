// colossal::comm::builtin — transfers: whole messages over a Transport.
//
// run_transfers() moves a set of messages concurrently (some sends, some
// receives, to and from any peers) until all are complete, the operation's
// deadline passes, or it is aborted. Every message starts with a 48-byte
// header naming the operation, its sequence number, tag and byte counts; the
// receiver checks it against what it expects, so ranks that disagree (a
// different collective, size or tag) get an error naming both sides instead
// of corrupt data or a hang:
//   all_reduce #5 (sum, float32 x 1000 on cpu) on rank 0 of 3 [builtin/shm]:
//   rank 2 (pid 4242) sent all_reduce #5 tag 0 (a 400-byte buffer; 136 bytes
//   in this message) where all_reduce #5 tag 0 (a 4000-byte buffer; 1336
//   bytes in this message) was expected: ranks issued different collectives,
//   sizes or tags
//
// Receives can be consumed while they arrive: `on_data` is called for each
// completed run of `segment` bytes (and the tail), so a ring step reduces
// chunk k while chunk k+1 is still in flight. A send may be limited to the
// bytes another transfer has received so far (`send_limit`), which makes
// pipelined forwarding (ring broadcast) one call.
//
//   OpContext ctx = ...;  // op, seq, tag, deadline, description
//   Transfer t[2] = {Transfer::send(next, chunk, n), Transfer::recv(prev, tmp, n)};
//   t[1].segment = 256 << 10;
//   t[1].on_data = [&](size_t begin, size_t end) { return reduce(dst + begin, tmp + begin, end - begin); };
//   COLOSSAL_RETURN_IF_ERROR(run_transfers(transport, ctx, absl::MakeSpan(t)));
//
// Messages to one peer in one direction complete in list order.
#ifndef COLOSSAL_COMM_BUILTIN_EXCHANGE_H_
#define COLOSSAL_COMM_BUILTIN_EXCHANGE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "comm/builtin/transport.h"

namespace colossal::comm::builtin {

// The operation a set of transfers belongs to.
struct OpContext {
  // Identifies the operation kind on the wire (the process group's OpType;
  // kWireP2P for point-to-point messages, matched by per-peer sequence).
  uint16_t wire_op = 0;
  uint64_t seq = 0;
  uint32_t tag = 0;
  // Bytes of the operation's buffer, carried for error messages (0: none).
  uint64_t op_bytes = 0;
  absl::Time deadline = absl::InfiniteFuture();
  absl::Duration timeout = absl::InfiniteDuration();
  // "all_reduce #5 (sum, float32 x 1000 on cpu)": the start of every error.
  std::string description;
  // When set and true, transfers stop with CancelledError (the group is
  // shutting down); whoever sets it calls Transport::wake().
  const std::atomic<bool>* abort = nullptr;
};

inline constexpr uint16_t kWireP2P = 0xfffe;

struct Transfer {
  static Transfer send(int peer, const void* data, size_t bytes) {
    Transfer t;
    t.peer = peer;
    t.is_send = true;
    t.data = static_cast<char*>(const_cast<void*>(data));
    t.bytes = bytes;
    return t;
  }
  static Transfer recv(int peer, void* data, size_t bytes) {
    Transfer t;
    t.peer = peer;
    t.is_send = false;
    t.data = static_cast<char*>(data);
    t.bytes = bytes;
    return t;
  }

  int peer = -1;
  bool is_send = true;
  char* data = nullptr;
  size_t bytes = 0;
  // The sequence number in the header; kOpSeq uses OpContext::seq.
  static constexpr uint64_t kOpSeq = ~uint64_t{0};
  uint64_t seq = kOpSeq;
  // Send only: send no further than *send_limit bytes (it may grow while
  // run_transfers runs, e.g. another transfer's `done`).
  const size_t* send_limit = nullptr;
  // Receive only: called with [begin, end) byte ranges as they complete, in
  // order, in multiples of `segment` bytes (0: once, at the end) and the tail.
  std::function<absl::Status(size_t begin, size_t end)> on_data;
  size_t segment = 0;

  // Progress (read by callers, e.g. as another transfer's send_limit).
  size_t done = 0;

  // Internal state.
  size_t header_done = 0;
  size_t delivered = 0;
  alignas(8) unsigned char header[48] = {};
  bool header_checked = false;

  bool finished() const { return header_checked && done == bytes && delivered == bytes; }
};

// Runs `transfers` to completion. Errors: DeadlineExceededError when
// ctx.deadline passes first (naming every unfinished transfer, its peer and
// progress); FailedPreconditionError when a received header does not match;
// UnavailableError when a peer went away; CancelledError on abort; or the
// first error of an on_data callback.
absl::Status run_transfers(Transport& transport, const OpContext& ctx,
                           absl::Span<Transfer> transfers);

}  // namespace colossal::comm::builtin

#endif  // COLOSSAL_COMM_BUILTIN_EXCHANGE_H_
