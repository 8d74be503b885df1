// colossal::comm::builtin — the shared-memory transport: processes of one host.
//
// The default transport of the builtin backend for CPU tensors. Each rank
// creates one POSIX shared-memory segment holding, for every peer, a
// single-producer single-consumer ring buffer of `capacity` bytes (the peer
// writes, this rank reads) and a 32-bit doorbell. Rings are lock-free: the
// writer publishes a byte count (`head`) with release order after copying, the
// reader frees space by publishing its own count (`tail`). A rank that can make
// no progress sleeps on its doorbell with a futex; whoever moves bytes rings
// the other side's doorbell (a wake-up syscall only when someone sleeps).
//
// Setup goes through the store: each rank publishes its segment's name, host
// and pid, maps every peer's segment, and after a barrier unlinks its own
// name, so nothing is left in /dev/shm even if a process dies later. A peer
// that exits is noticed within ~100 ms of waiting on it (UnavailableError
// naming its rank and pid) instead of at the timeout.
//
//   COLOSSAL_ASSIGN_OR_RETURN(auto t, ShmTransport::create(store, rank, size, {}));
#ifndef COLOSSAL_COMM_BUILTIN_SHM_TRANSPORT_H_
#define COLOSSAL_COMM_BUILTIN_SHM_TRANSPORT_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/builtin/transport.h"
#include "comm/store/store.h"

namespace colossal::comm::builtin {

struct ShmTransportOptions {
  // Bytes of each ring; 0 picks 1 MiB, less for large groups (at most
  // 256 MiB of rings in all on the host).
  size_t capacity = 0;
};

class ShmTransport : public Transport {
 public:
  // Collective over the `size` ranks using `store` (keys "shm/..."): every
  // rank of the group calls it. Errors: a peer on another host (the message
  // says to use the TCP transport), shared memory unavailable or full, a peer
  // that never publishes its segment (the store's timeout).
  static absl::StatusOr<std::unique_ptr<ShmTransport>> create(Store& store, int rank, int size,
                                                             const ShmTransportOptions& options);
  ~ShmTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* kind() const override { return "shm"; }
  std::string describe_peer(int peer) const override;
  absl::StatusOr<size_t> try_send(int peer, const void* data, size_t bytes) override;
  absl::StatusOr<size_t> try_recv(int peer, void* data, size_t bytes) override;
  uint64_t progress_token() override;
  absl::Status wait(absl::Span<const Interest> interests, uint64_t token,
                    absl::Time until) override;
  void wake() override;

  size_t capacity() const { return capacity_; }

  struct Segment;  // the mapped layout (shm_transport.cc)

 private:
  ShmTransport(int rank, int size, size_t capacity);
  void ring_doorbell(int rank);

  const int rank_;
  const int size_;
  const size_t capacity_;
  size_t segment_bytes_ = 0;
  std::vector<void*> maps_;     // every rank's segment, mapped here
  std::vector<int> pids_;
};

}  // namespace colossal::comm::builtin

#endif  // COLOSSAL_COMM_BUILTIN_SHM_TRANSPORT_H_
