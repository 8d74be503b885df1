// colossal::comm — the NCCL backend: collectives on CUDA memory.
//
// The production backend on GPUs (DESIGN.md principle 4). One NCCL
// communicator per group, its unique id handed from group rank 0 to the
// others through the store; one high-priority communication stream per group.
// Every collective is ordered after the work already enqueued on its input
// stream (an event, no host wait) and records an end event the Work watches:
//
//   COLOSSAL_RETURN_IF_ERROR(core::Context::initialize(core::Device::cuda(local_rank)));
//   NcclOptions o;  o.device = core::Device::cuda(local_rank);
//   COLOSSAL_ASSIGN_OR_RETURN(auto pg, ProcessGroupNccl::create(store, rank, world_size, o));
//   COLOSSAL_ASSIGN_OR_RETURN(WorkPtr w, pg->all_reduce(grads_tensor, ReduceOp::kAvg));
//   w->wait_stream(ctx.compute_stream());   // the optimizer step runs after it; host free
//
// Streams: the input stream is CollectiveOptions::stream when given, else
// NcclOptions::compute_stream, else the process Context's compute stream when
// the Context is on this device, else the device's legacy default stream.
// Buffers must stay allocated until the Work completes or a stream that will
// free them has waited for it (wait_stream) — the caching allocator frees in
// stream order.
//
// Watchdog: a thread polls every pending collective. One that has not finished
// within its timeout, or an asynchronous NCCL error, aborts the communicator
// (ncclCommAbort, which releases the hung kernels) and fails every pending
// Work with a message naming the collective, its sequence number and bytes:
//   NCCL watchdog: all_reduce #12 (sum, bfloat16 x 4194304 on cuda:0), 8388608 bytes,
//   did not finish within 10m on rank 3 of 8; communicator aborted
// The message is also printed to stderr. The group is unusable afterwards.
//
// Destruction waits (up to 30 s) for enqueued collectives, fails the rest
// with AbortedError, and releases the communicator with ncclCommAbort, which
// never waits for other ranks.
//
// Without CUDA (a CPU-only build) create() returns FailedPreconditionError.
#ifndef COLOSSAL_COMM_NCCL_PROCESS_GROUP_NCCL_H_
#define COLOSSAL_COMM_NCCL_PROCESS_GROUP_NCCL_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/process_group/process_group.h"
#include "comm/store/store.h"
#include "core/device/device.h"
#include "core/device/stream.h"

namespace colossal::comm {

struct NcclOptions {
  // The CUDA device of this rank (usually cuda:LOCAL_RANK).
  core::Device device = core::Device::cuda(0);
  // Default timeout of each collective, counted from when it is issued.
  absl::Duration timeout = absl::Minutes(10);
  // Namespace of this group's keys in the store.
  std::string group_name = "nccl";
  // The stream whose work inputs are ordered after, unless a call says
  // otherwise (see the file comment for the default).
  std::optional<core::Stream> compute_stream;
  // How often the watchdog looks at pending collectives.
  absl::Duration watchdog_interval = absl::Milliseconds(100);
};

class ProcessGroupNccl : public ProcessGroup {
 public:
  // Collective over the group: every rank calls it. Waits (up to `timeout`)
  // at a store barrier until all ranks are there, then creates the
  // communicator. Errors: no such CUDA device / a CPU-only build; a rank that
  // never arrives (DeadlineExceededError naming how many did); NCCL failing to
  // set up (UnavailableError with NCCL's message).
  static absl::StatusOr<std::shared_ptr<ProcessGroupNccl>> create(std::shared_ptr<Store> store,
                                                                  int rank, int size,
                                                                  const NcclOptions& options);
  ~ProcessGroupNccl() override;

  std::string backend_name() const override { return "nccl"; }
  // The stream the collectives run on.
  const core::Stream& comm_stream() const;

  class Impl;  // CUDA/NCCL state (process_group_nccl.cc)

 protected:
  absl::Status check_device(const core::Device& device) const override;
  absl::StatusOr<WorkPtr> do_all_reduce(const OpInfo& info, const Buffer& buffer,
                                        ReduceOp op) override;
  absl::StatusOr<WorkPtr> do_reduce_scatter(const OpInfo& info, const Buffer& output,
                                            const Buffer& input, ReduceOp op) override;
  absl::StatusOr<WorkPtr> do_all_gather(const OpInfo& info, const Buffer& output,
                                        const Buffer& input) override;
  absl::StatusOr<WorkPtr> do_all_to_all(const OpInfo& info, const Buffer& output,
                                        std::vector<int64_t> output_counts, const Buffer& input,
                                        std::vector<int64_t> input_counts) override;
  absl::StatusOr<WorkPtr> do_broadcast(const OpInfo& info, const Buffer& buffer,
                                       int root) override;
  absl::StatusOr<WorkPtr> do_reduce(const OpInfo& info, const Buffer& buffer, ReduceOp op,
                                    int root) override;
  absl::StatusOr<WorkPtr> do_batch_send_recv(const OpInfo& info,
                                             std::vector<P2POp> ops) override;
  absl::StatusOr<WorkPtr> do_barrier(const OpInfo& info) override;
  absl::StatusOr<std::shared_ptr<ProcessGroup>> do_new_group(const std::string& name,
                                                             std::vector<int> world_ranks,
                                                             int group_rank) override;

 private:
  ProcessGroupNccl(std::shared_ptr<Store> store, int rank, int size, std::vector<int> world_ranks,
                   const NcclOptions& options, std::unique_ptr<Impl> impl);
  static absl::StatusOr<std::shared_ptr<ProcessGroupNccl>> create_group(
      std::shared_ptr<Store> store, int rank, int size, std::vector<int> world_ranks,
      const NcclOptions& options);

  const std::shared_ptr<Store> store_;
  const NcclOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace colossal::comm

#endif  // COLOSSAL_COMM_NCCL_PROCESS_GROUP_NCCL_H_
