// colossal::comm::builtin — Transport: moving bytes between the ranks of a group.
//
// The builtin backend's algorithms (comm/builtin/ring.h) are written once,
// against this interface, and never know whether bytes travel through shared
// memory, TCP or memory of the same process (the NCCL/gloo split: algorithms
// apart from transports). A Transport connects one rank to every other rank
// of its group with an ordered byte stream per direction, and offers
// non-blocking primitives plus a way to sleep until progress is possible:
//
//   uint64_t token = t.progress_token();
//   COLOSSAL_ASSIGN_OR_RETURN(size_t n, t.try_send(peer, p, bytes));  // 0..bytes accepted
//   COLOSSAL_ASSIGN_OR_RETURN(size_t m, t.try_recv(peer, q, bytes));  // 0..bytes delivered
//   if (n == 0 && m == 0) COLOSSAL_RETURN_IF_ERROR(t.wait(interests, token, deadline));
//
// comm/builtin/exchange.h builds whole transfers (with headers, deadlines and
// pipelined callbacks) on these. Implementations: inproc_transport.h (ranks
// as threads), shm_transport.h (processes of one host), tcp_transport.h.
//
// Contracts:
//   * Bytes sent to a peer arrive in order, exactly once; nothing is lost
//     while both sides live. A rank never sends to itself.
//   * try_send/try_recv never block. They fail (UnavailableError naming the
//     peer) when the peer is gone.
//   * One thread at a time uses a transport, except wake(), which any thread
//     may call to make a concurrent wait() return.
#ifndef COLOSSAL_COMM_BUILTIN_TRANSPORT_H_
#define COLOSSAL_COMM_BUILTIN_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace colossal::comm::builtin {

// What a waiter is blocked on: sending to `peer` (needs space) or receiving
// from it (needs data).
struct Interest {
  int peer;
  bool send;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "shm", "tcp", "inproc".
  virtual const char* kind() const = 0;
  // For messages: "rank 2 (pid 4242)", "rank 2 at 10.0.0.3:41234".
  virtual std::string describe_peer(int peer) const = 0;

  // Accepts up to `bytes` bytes for `peer`; returns how many (possibly 0).
  virtual absl::StatusOr<size_t> try_send(int peer, const void* data, size_t bytes) = 0;
  // Delivers up to `bytes` bytes from `peer`; returns how many (possibly 0).
  virtual absl::StatusOr<size_t> try_recv(int peer, void* data, size_t bytes) = 0;

  // A value that changes whenever progress may have become possible for this
  // rank. Read it before trying, pass it to wait(): no wake-up is then lost.
  virtual uint64_t progress_token() = 0;
  // Sleeps until progress may be possible for one of `interests`, the token
  // moved on from `token`, wake() was called, or `until` passed. May return
  // early. Errors: a peer in `interests` is known to be gone.
  virtual absl::Status wait(absl::Span<const Interest> interests, uint64_t token,
                            absl::Time until) = 0;
  // Makes a concurrent or the next wait() return promptly.
  virtual void wake() = 0;
};

}  // namespace colossal::comm::builtin

#endif  // COLOSSAL_COMM_BUILTIN_TRANSPORT_H_
