// colossal::comm::builtin — the in-process transport: ranks as threads.
//
// For unit tests of the algorithms (gloo's habit: every collective runs with
// ranks as threads over every transport) and for several ranks sharing one
// process. Each ordered pair of ranks has a bounded byte queue guarded by a
// mutex; each rank has a condition variable its peers signal. The small
// default capacity makes every collective exercise partial sends and waits.
//
// Ranks rendezvous by name in a process-wide registry: every rank of a group
// calls create() with the same `name` (the process group derives it from the
// store) and gets its own endpoint of the shared queues.
//
//   // in each of 4 threads, rank = 0..3:
//   COLOSSAL_ASSIGN_OR_RETURN(auto t, InprocTransport::create("g0", rank, 4, {}));
#ifndef COLOSSAL_COMM_BUILTIN_INPROC_TRANSPORT_H_
#define COLOSSAL_COMM_BUILTIN_INPROC_TRANSPORT_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/builtin/transport.h"

namespace colossal::comm::builtin {

struct InprocTransportOptions {
  // Bytes each (sender, receiver) queue holds.
  size_t capacity = size_t{64} << 10;
};

class InprocTransport : public Transport {
 public:
  // Joins the group `name` as `rank` of `size`. Every rank must pass the same
  // size and options. Errors: a rank joined twice, or sizes disagree.
  static absl::StatusOr<std::unique_ptr<InprocTransport>> create(
      const std::string& name, int rank, int size, const InprocTransportOptions& options);
  ~InprocTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* kind() const override { return "inproc"; }
  std::string describe_peer(int peer) const override;
  absl::StatusOr<size_t> try_send(int peer, const void* data, size_t bytes) override;
  absl::StatusOr<size_t> try_recv(int peer, void* data, size_t bytes) override;
  uint64_t progress_token() override;
  absl::Status wait(absl::Span<const Interest> interests, uint64_t token,
                    absl::Time until) override;
  void wake() override;

  struct Group;  // shared by the ranks of one group

 private:
  InprocTransport(std::shared_ptr<Group> group, std::string name, int rank, int size);
  std::shared_ptr<Group> group_;
  const std::string name_;
  const int rank_;
  const int size_;
};

}  // namespace colossal::comm::builtin

#endif  // COLOSSAL_COMM_BUILTIN_INPROC_TRANSPORT_H_
