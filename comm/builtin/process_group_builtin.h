// colossal::comm — the builtin backend: ring collectives over a Transport.
//
// colossal's own ProcessGroup for CPU tensors (DESIGN.md principle 3): the
// algorithms of comm/builtin/ring.h over shared memory between processes of
// one host (the default), TCP between hosts, or in-process queues when ranks
// are threads. One worker thread per group runs the operations in the order
// they were issued; each returns a Work that completes on the host.
//
//   TcpStoreOptions so;  so.host = master_addr;  so.port = master_port;  so.is_master = rank == 0;
//   COLOSSAL_ASSIGN_OR_RETURN(std::shared_ptr<Store> store, TcpStore::create(so));
//   BuiltinOptions o;                      // shared memory, 30 min timeout
//   COLOSSAL_ASSIGN_OR_RETURN(auto pg, ProcessGroupBuiltin::create(store, rank, world_size, o));
//   COLOSSAL_ASSIGN_OR_RETURN(WorkPtr w, pg->all_reduce(Buffer::cpu(g.data(), g.size()),
//                                                       ReduceOp::kSum));
//   COLOSSAL_RETURN_IF_ERROR(w->wait());
//
// Contracts (beyond ProcessGroup's):
//   * Buffers must be host memory (CUDA memory: use comm/nccl), except on the
//     cuda_ipc transport, which takes memory of its device (transport
//     cuda_ipc_transport.h) as well as host memory; a CUDA collective runs
//     after the work enqueued so far on OpInfo::stream (default: the device's
//     legacy default stream) and its Work completes once the result is on the
//     device. batch_send_recv of CUDA buffers is not supported.
//   * A collective's timeout counts from when it starts running on the worker.
//   * Destroying the group cancels operations not yet finished (their Work
//     gets CancelledError): wait for them first.
//   * Keys in the store live under `group_name` (subgroups under
//     "<group_name>/subgroup/..."): give every world group made from one
//     store its own name.
#ifndef COLOSSAL_COMM_BUILTIN_PROCESS_GROUP_BUILTIN_H_
#define COLOSSAL_COMM_BUILTIN_PROCESS_GROUP_BUILTIN_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/builtin/cuda_ipc_transport.h"
#include "comm/builtin/exchange.h"
#include "comm/builtin/inproc_transport.h"
#include "comm/builtin/ring.h"
#include "comm/builtin/shm_transport.h"
#include "comm/builtin/tcp_transport.h"
#include "comm/builtin/transport.h"
#include "comm/process_group/process_group.h"
#include "comm/store/store.h"
#include "core/device/stream.h"

namespace colossal::comm {

enum class TransportKind { kShm, kTcp, kInproc, kCudaIpc };

// "shm", "tcp", "inproc", "cuda_ipc".
const char* transport_kind_name(TransportKind kind);
// Parses those names (as users write them in a recipe or COLOSSAL_TRANSPORT).
absl::StatusOr<TransportKind> parse_transport_kind(absl::string_view text);

struct BuiltinOptions {
  TransportKind transport = TransportKind::kShm;
  // Default timeout of each collective (torch's default is 30 minutes).
  absl::Duration timeout = absl::Minutes(30);
  // Namespace of this group's keys in the store.
  std::string group_name = "builtin";
  builtin::ShmTransportOptions shm;
  builtin::TcpTransportOptions tcp;
  builtin::InprocTransportOptions inproc;
  // kCudaIpc: CUDA tensors on this rank's GPU (cuda_ipc.device), GPUs of one host.
  builtin::CudaIpcTransportOptions cuda_ipc;
};

class ProcessGroupBuiltin : public ProcessGroup {
 public:
  // Collective: every rank of the group calls it with the same size and
  // options (it connects the transport through `store`). Errors: invalid
  // rank/size; the transport's setup errors (a peer that never arrives is a
  // DeadlineExceededError from the store naming the key and address).
  static absl::StatusOr<std::shared_ptr<ProcessGroupBuiltin>> create(
      std::shared_ptr<Store> store, int rank, int size, const BuiltinOptions& options);
  ~ProcessGroupBuiltin() override;

  std::string backend_name() const override;
  const builtin::Transport& transport() const { return *transport_; }

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
  absl::StatusOr<WorkPtr> do_batch_send_recv(const OpInfo& info,
                                             std::vector<P2POp> ops) override;
  absl::StatusOr<WorkPtr> do_barrier(const OpInfo& info) override;
  absl::StatusOr<std::shared_ptr<ProcessGroup>> do_new_group(const std::string& name,
                                                             std::vector<int> world_ranks,
                                                             int group_rank) override;

 private:
  using Run = std::function<absl::Status(const builtin::OpContext&)>;
  struct Task {
    WorkPtr work;
    OpInfo info;
    Run run;
  };

  ProcessGroupBuiltin(std::shared_ptr<Store> store, int rank, int size,
                      std::vector<int> world_ranks, const BuiltinOptions& options,
                      std::unique_ptr<builtin::Transport> transport);
  static absl::StatusOr<std::shared_ptr<ProcessGroupBuiltin>> create_group(
      std::shared_ptr<Store> store, int rank, int size, std::vector<int> world_ranks,
      const BuiltinOptions& options);
  WorkPtr enqueue(const OpInfo& info, Run run);
  // CUDA buffers (cuda_ipc): an event marking the input stream's work so far.
  static absl::StatusOr<std::shared_ptr<core::Event>> device_ready(const OpInfo& info,
                                                                   const core::Device& device);
  static absl::Status same_memory(const OpInfo& info, const Buffer& output, const Buffer& input);
  void worker_loop();

  const std::shared_ptr<Store> store_;
  const BuiltinOptions options_;
  std::unique_ptr<builtin::Transport> transport_;
  builtin::CudaIpcTransport* cuda_ipc_ = nullptr;  // transport_ when kCudaIpc

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::atomic<bool> abort_{false};

  // Worker thread only.
  absl::Status broken_;
  builtin::Scratch scratch_;
  std::vector<uint64_t> send_seq_;
  std::vector<uint64_t> recv_seq_;

  std::thread worker_;
};

}  // namespace colossal::comm

#endif  // COLOSSAL_COMM_BUILTIN_PROCESS_GROUP_BUILTIN_H_
