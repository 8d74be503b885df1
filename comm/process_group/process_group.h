// colossal::comm — ProcessGroup: collectives among a fixed set of ranks.
//
// A ProcessGroup is `size()` processes (ranks 0..size-1) that call the same
// collectives in the same order. Backends implement it: comm/builtin (ring
// algorithms over shared memory, TCP or in-process transports; the CPU
// default) and comm/nccl (CUDA). Every call is asynchronous and returns a
// Work (comm/process_group/work.h); arguments are validated first, on the
// calling thread, and a bad call returns InvalidArgumentError naming the
// collective and the offending sizes without communicating.
//
//   // All ranks: the same calls, in the same order.
//   COLOSSAL_ASSIGN_OR_RETURN(WorkPtr w, pg->all_reduce(Buffer::cpu(g.data(), g.size()),
//                                                       ReduceOp::kAvg));
//   COLOSSAL_RETURN_IF_ERROR(w->wait());
//   // ZeRO: each rank keeps 1/size of the reduced gradients, then gathers parameters.
//   pg->reduce_scatter(Buffer::cpu(shard, n), Buffer::cpu(full, n * pg->size()), ReduceOp::kSum);
//   pg->all_gather(Buffer::cpu(full, n * pg->size()), Buffer::cpu(shard, n));
//   // Subgroups: only members need to call; non-members get nullptr.
//   COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> tp, pg->new_group({0, 1}));
//
// Contracts:
//   * Buffers: contiguous; `count` elements of `dtype`; in one call all on one
//     device and (except all_to_all counts) of one dtype. They must stay valid
//     until the Work completes; inputs must not change meanwhile.
//   * all_reduce(buf, op): in place on every rank. A group of one rank
//     launches nothing (every op is the identity there), so ddp and ZeRO on
//     one GPU pay no collectives: host buffers get a completed Work; device
//     buffers with options.stream a Work that waits (stream or host) for
//     that stream's work issued before the call, as the collective would;
//     device buffers without one still go to the backend.
//   * reduce_scatter(out, in, op): in.count == out.count * size(); rank r gets
//     the reduction of every rank's in[r*n, (r+1)*n). In place when
//     out.data == in.data + r * out.nbytes(); other overlaps are errors.
//   * all_gather(out, in): out.count == in.count * size(); rank r's input
//     lands at out[r*n, (r+1)*n) everywhere. In place when in.data is that
//     slice of out.
//   * all_to_all(out, in): equal splits: count divisible by size(); block j
//     of rank r's input becomes block r of rank j's output. The variable-split
//     form takes per-rank element counts for both sides (every rank's send
//     count to j must equal j's receive count from it). No overlap.
//   * broadcast(buf, root): root's buffer to every rank.
//   * send/recv(buf, peer): point to point. As with NCCL, separate send and
//     recv calls are ordered like collectives: if two ranks exchange, one must
//     post its recv first, or both use batch_send_recv, which runs all its
//     sends and receives concurrently.
//   * Reductions: kSum, kProd, kMax, kMin on every dtype (integers wrap; max/min
//     propagate NaN); kAvg only on float dtypes. float16/bfloat16 round to
//     their type after each partial reduction. (NCCL has no uint16: that
//     backend returns UnimplementedError for it.)
//   * Timeouts: a collective that does not finish within its timeout fails
//     with DeadlineExceededError naming the op, its sequence number, bytes and
//     the peer it waited for. After any failed collective the group is broken:
//     later calls fail with that first error (peers may be out of step).
//   * Thread safety: calls may come from any thread, but the order in which
//     they are issued is the order they run; ranks must agree on it.
//   * Checking that ranks agree (a debugging aid for hangs): with
//     COLOSSAL_CHECK_COLLECTIVES=1 in the environment, a group whose backend
//     gave it the job's store checks every collective before issuing it (not
//     sends and receives, which only a pair takes part in): each rank posts
//     what it is about to issue, the group's n-th collective, in the store
//     and reads the others'. Ranks that differ (another operation, count,
//     dtype, reduce op or root) all get FailedPrecondition listing every
//     rank's; ranks that do not come within the operation's timeout are
//     named (DeadlineExceeded), instead of a hang or a mismatched pair. It
//     costs a few store round trips a collective.
#ifndef COLOSSAL_COMM_PROCESS_GROUP_PROCESS_GROUP_H_
#define COLOSSAL_COMM_PROCESS_GROUP_PROCESS_GROUP_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "comm/process_group/types.h"
#include "comm/process_group/work.h"
#include "comm/store/store.h"

namespace colossal::core {
class Tensor;
}

namespace colossal::comm {

enum class OpType : int {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kAllToAll,
  kBroadcast,
  kSend,
  kRecv,
  kBatchSendRecv,
  kBarrier,
  kReduce,
};

// "all_reduce", "reduce_scatter", ...
const char* op_type_name(OpType type);

// COLOSSAL_CHECK_COLLECTIVES: unset or "0" false, "1" true (see the file
// comment). Errors: another value, naming it.
absl::StatusOr<bool> collective_check_from_env();

// COLOSSAL_TIMEOUT: seconds (a positive number, at most a week) that a
// collective, and a wait in the job's store (the rendezvous, a save's
// every-rank check, COLOSSAL_CHECK_COLLECTIVES' exchanges), may take before
// the job fails naming what did not come; unset or empty: nullopt (each
// backend's and the store's own defaults). Errors: another value, naming it.
absl::StatusOr<std::optional<absl::Duration>> timeout_from_env();

// One operation of batch_send_recv.
struct P2POp {
  enum class Kind { kSend, kRecv };
  Kind kind;
  Buffer buffer;
  int peer;
};

// What a backend is handed for one validated operation.
struct OpInfo {
  OpType type;
  // The group-wide sequence number: the n-th operation issued on this group
  // (0-based). Ranks that issue collectives in the same order agree on it.
  uint64_t seq = 0;
  uint32_t tag = 0;
  absl::Duration timeout;  // resolved: never zero
  std::optional<core::Stream> stream;
  // "all_reduce #12 (sum, float32 x 1000 on cpu)".
  std::string description;
  // Bytes of the operation's main buffer (for watchdog messages).
  size_t bytes = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The members as ranks of the outermost group this one was split from:
  // group rank i is world_ranks()[i]. {0, ..., size-1} for a world group.
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  // "builtin/shm", "builtin/tcp", "builtin/inproc", "nccl".
  virtual std::string backend_name() const = 0;
  // The default timeout of every collective.
  absl::Duration timeout() const { return timeout_; }

  absl::StatusOr<WorkPtr> all_reduce(const Buffer& buffer, ReduceOp op,
                                     const CollectiveOptions& options = {});
  absl::StatusOr<WorkPtr> reduce_scatter(const Buffer& output, const Buffer& input, ReduceOp op,
                                         const CollectiveOptions& options = {});
  absl::StatusOr<WorkPtr> all_gather(const Buffer& output, const Buffer& input,
                                     const CollectiveOptions& options = {});
  absl::StatusOr<WorkPtr> all_to_all(const Buffer& output, const Buffer& input,
                                     const CollectiveOptions& options = {});
  // Variable splits: counts in elements, one per rank.
  absl::StatusOr<WorkPtr> all_to_all(const Buffer& output, absl::Span<const int64_t> output_counts,
                                     const Buffer& input, absl::Span<const int64_t> input_counts,
                                     const CollectiveOptions& options = {});
  absl::StatusOr<WorkPtr> broadcast(const Buffer& buffer, int root,
                                    const CollectiveOptions& options = {});
  // In place: root's buffer receives the reduction of every rank's buffer.
  // The other ranks' buffers are unspecified afterwards (the NCCL backend
  // leaves them as they were; a backend without a reduce of its own runs an
  // all-reduce, which leaves the result there too).
  absl::StatusOr<WorkPtr> reduce(const Buffer& buffer, ReduceOp op, int root,
                                 const CollectiveOptions& options = {});
  absl::StatusOr<WorkPtr> send(const Buffer& buffer, int peer,
                               const CollectiveOptions& options = {});
  absl::StatusOr<WorkPtr> recv(const Buffer& buffer, int peer,
                               const CollectiveOptions& options = {});
  absl::StatusOr<WorkPtr> batch_send_recv(absl::Span<const P2POp> ops,
                                          const CollectiveOptions& options = {});
  absl::StatusOr<WorkPtr> barrier(const CollectiveOptions& options = {});

  // The same on core::Tensor (contiguous by construction; numel elements).
  absl::StatusOr<WorkPtr> all_reduce(const core::Tensor& tensor, ReduceOp op,
                                     const CollectiveOptions& options = {});
  absl::StatusOr<WorkPtr> reduce_scatter(const core::Tensor& output, const core::Tensor& input,
                                         ReduceOp op, const CollectiveOptions& options = {});
  absl::StatusOr<WorkPtr> all_gather(const core::Tensor& output, const core::Tensor& input,
                                     const CollectiveOptions& options = {});
  absl::StatusOr<WorkPtr> all_to_all(const core::Tensor& output, const core::Tensor& input,
                                     const CollectiveOptions& options = {});
  absl::StatusOr<WorkPtr> broadcast(const core::Tensor& tensor, int root,
                                    const CollectiveOptions& options = {});
  absl::StatusOr<WorkPtr> reduce(const core::Tensor& tensor, ReduceOp op, int root,
                                 const CollectiveOptions& options = {});
  absl::StatusOr<WorkPtr> send(const core::Tensor& tensor, int peer,
                               const CollectiveOptions& options = {});
  absl::StatusOr<WorkPtr> recv(const core::Tensor& tensor, int peer,
                               const CollectiveOptions& options = {});

  // A subgroup of this group's ranks `ranks` (distinct, in range; group rank i
  // is ranks[i]), with the same backend and options. Every member must call it
  // with the same list; non-members may skip the call, or make it and get
  // nullptr. Creating the same rank list again makes a new, independent group.
  // Blocks until every member has joined (up to the group's timeout).
  absl::StatusOr<std::shared_ptr<ProcessGroup>> new_group(absl::Span<const int> ranks);

 protected:
  ProcessGroup(int rank, int size, std::vector<int> world_ranks, absl::Duration timeout);

  // Backends call it from their constructor with the job's store and the
  // group's name (unique among its groups): COLOSSAL_CHECK_COLLECTIVES then
  // checks every collective through the store (see the file comment).
  void check_collectives_through(std::shared_ptr<Store> store, const std::string& group_name);

  // OK when the backend can run collectives on memory of `device`; otherwise
  // an error saying which devices it supports.
  virtual absl::Status check_device(const core::Device& device) const = 0;

  virtual absl::StatusOr<WorkPtr> do_all_reduce(const OpInfo& info, const Buffer& buffer,
                                                ReduceOp op) = 0;
  virtual absl::StatusOr<WorkPtr> do_reduce_scatter(const OpInfo& info, const Buffer& output,
                                                    const Buffer& input, ReduceOp op) = 0;
  virtual absl::StatusOr<WorkPtr> do_all_gather(const OpInfo& info, const Buffer& output,
                                                const Buffer& input) = 0;
  // Counts are validated: size() entries each, sums equal the buffer counts.
  virtual absl::StatusOr<WorkPtr> do_all_to_all(const OpInfo& info, const Buffer& output,
                                                std::vector<int64_t> output_counts,
                                                const Buffer& input,
                                                std::vector<int64_t> input_counts) = 0;
  virtual absl::StatusOr<WorkPtr> do_broadcast(const OpInfo& info, const Buffer& buffer,
                                               int root) = 0;
  // Default: an all-reduce (the reduce's contract allows the result on every
  // rank).
  virtual absl::StatusOr<WorkPtr> do_reduce(const OpInfo& info, const Buffer& buffer, ReduceOp op,
                                            int root) {
    return do_all_reduce(info, buffer, op);
  }
  // send/recv arrive here as a batch of one.
  virtual absl::StatusOr<WorkPtr> do_batch_send_recv(const OpInfo& info,
                                                     std::vector<P2POp> ops) = 0;
  virtual absl::StatusOr<WorkPtr> do_barrier(const OpInfo& info) = 0;
  // Creates the subgroup; `name` is unique to this rank list and creation
  // (the same on every member), for store keys. `world_ranks` are the members'
  // world ranks, `group_rank` this rank's place in it.
  virtual absl::StatusOr<std::shared_ptr<ProcessGroup>> do_new_group(
      const std::string& name, std::vector<int> world_ranks, int group_rank) = 0;

 private:
  // Resolves options into an OpInfo with the next sequence number.
  // Collectives are first checked against the other ranks' (when enabled).
  absl::StatusOr<OpInfo> next_op(OpType type, const CollectiveOptions& options, std::string detail,
                                 size_t bytes);
  // The check: `what` is the collective without its sequence number or devices.
  absl::Status check_same_collective(const OpInfo& info, const std::string& what);
  // A group of one rank: the identity of a reduction (avg divides by one
  // exactly), done at once; nullptr when the backend must run it.
  absl::StatusOr<WorkPtr> alone(const OpInfo& info, const Buffer& buffer) const;
  // all_reduce's and reduce's checks of the buffer and the operation.
  absl::Status check_reduction(const char* op_name, const Buffer& buffer, ReduceOp op) const;
  absl::Status check_buffer(const char* what, const Buffer& buffer, const char* op) const;

  const int rank_;
  const int size_;
  const std::vector<int> world_ranks_;
  const absl::Duration timeout_;
  // Serialises validate-and-enqueue so sequence numbers follow issue order.
  std::mutex issue_mu_;
  uint64_t next_seq_ = 0;
  std::map<std::vector<int>, int> subgroups_created_;
  // COLOSSAL_CHECK_COLLECTIVES: the store, the group's key prefix, and how
  // many collectives (sends and receives aside) were checked.
  std::shared_ptr<Store> check_store_;
  std::string check_prefix_;
  uint64_t checked_ = 0;
};

}  // namespace colossal::comm

#endif  // COLOSSAL_COMM_PROCESS_GROUP_PROCESS_GROUP_H_
