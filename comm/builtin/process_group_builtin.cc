#include "comm/builtin/process_group_builtin.h"

#include <numeric>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/status/check.h"
#include "core/status/status.h"

namespace colossal::comm {

using builtin::OpContext;
using builtin::Transfer;

const char* transport_kind_name(TransportKind kind) {
  switch (kind) {
    case TransportKind::kShm: return "shm";
    case TransportKind::kTcp: return "tcp";
    case TransportKind::kInproc: return "inproc";
    case TransportKind::kCudaIpc: return "cuda_ipc";
  }
  return "unknown";
}

absl::StatusOr<TransportKind> parse_transport_kind(absl::string_view text) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (t == "shm") return TransportKind::kShm;
  if (t == "tcp") return TransportKind::kTcp;
  if (t == "inproc") return TransportKind::kInproc;
  if (t == "cuda_ipc" || t == "cuda-ipc") return TransportKind::kCudaIpc;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown transport '", text, "' (accepted: shm, tcp, inproc, cuda_ipc)"));
}

namespace {

absl::StatusOr<std::unique_ptr<builtin::Transport>> make_transport(Store& store, int rank,
                                                                   int size,
                                                                   const BuiltinOptions& o) {
  switch (o.transport) {
    case TransportKind::kShm: {
      COLOSSAL_ASSIGN_OR_RETURN(auto t, builtin::ShmTransport::create(store, rank, size, o.shm));
      return std::unique_ptr<builtin::Transport>(std::move(t));
    }
    case TransportKind::kTcp: {
      COLOSSAL_ASSIGN_OR_RETURN(auto t, builtin::TcpTransport::create(store, rank, size, o.tcp));
      return std::unique_ptr<builtin::Transport>(std::move(t));
    }
    case TransportKind::kCudaIpc: {
      COLOSSAL_ASSIGN_OR_RETURN(
          auto t, builtin::CudaIpcTransport::create(store, rank, size, o.cuda_ipc));
      return std::unique_ptr<builtin::Transport>(std::move(t));
    }
    case TransportKind::kInproc: {
      // Ranks meet in the process-wide registry under a name agreed in the store.
      std::random_device rd;
      const std::string mine = absl::StrCat("inproc-", rd(), "-", rd());
      COLOSSAL_ASSIGN_OR_RETURN(std::string name, store.compare_set("inproc/name", "", mine));
      COLOSSAL_ASSIGN_OR_RETURN(auto t,
                                builtin::InprocTransport::create(name, rank, size, o.inproc));
      // Nobody may use the queues before everyone has joined the registry entry.
      COLOSSAL_RETURN_IF_ERROR(barrier(store, "inproc/joined", size, store.timeout()));
      return std::unique_ptr<builtin::Transport>(std::move(t));
    }
  }
  return absl::InvalidArgumentError("unknown transport kind");
}

}  // namespace

absl::StatusOr<std::shared_ptr<ProcessGroupBuiltin>> ProcessGroupBuiltin::create(
    std::shared_ptr<Store> store, int rank, int size, const BuiltinOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "builtin process group: rank ", rank, " is not in [0, ", size, ") (check RANK and WORLD_SIZE)"));
  }
  std::vector<int> world(size);
  std::iota(world.begin(), world.end(), 0);
  return create_group(std::move(store), rank, size, std::move(world), options);
}

absl::StatusOr<std::shared_ptr<ProcessGroupBuiltin>> ProcessGroupBuiltin::create_group(
    std::shared_ptr<Store> store, int rank, int size, std::vector<int> world_ranks,
    const BuiltinOptions& options) {
  if (store == nullptr) return absl::InvalidArgumentError("builtin process group: no store");
  PrefixStore keys(options.group_name, store);
  auto transport = make_transport(keys, rank, size, options);
  if (!transport.ok()) {
    return core::annotate(transport.status(),
                          absl::StrCat("builtin process group '", options.group_name, "' (",
                                       transport_kind_name(options.transport), ", rank ", rank,
                                       " of ", size, ")"));
  }
  return std::shared_ptr<ProcessGroupBuiltin>(new ProcessGroupBuiltin(
      std::move(store), rank, size, std::move(world_ranks), options, std::move(*transport)));
}

ProcessGroupBuiltin::ProcessGroupBuiltin(std::shared_ptr<Store> store, int rank, int size,
                                         std::vector<int> world_ranks,
                                         const BuiltinOptions& options,
                                         std::unique_ptr<builtin::Transport> transport)
    : ProcessGroup(rank, size, std::move(world_ranks), options.timeout),
      store_(std::move(store)),
      options_(options),
      transport_(std::move(transport)),
      send_seq_(size, 0),
      recv_seq_(size, 0) {
  if (options.transport == TransportKind::kCudaIpc) {
    cuda_ipc_ = static_cast<builtin::CudaIpcTransport*>(transport_.get());
  }
  check_collectives_through(store_, options.group_name);
  worker_ = std::thread([this] { worker_loop(); });
}

ProcessGroupBuiltin::~ProcessGroupBuiltin() {
  std::deque<Task> cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cancelled.swap(queue_);
  }
  for (Task& t : cancelled) {
    t.work->complete(absl::CancelledError(
        absl::StrCat(t.info.description, ": cancelled (the process group was destroyed)")));
  }
  abort_.store(true, std::memory_order_release);
  transport_->wake();
  cv_.notify_all();
  worker_.join();
}

std::string ProcessGroupBuiltin::backend_name() const {
  return absl::StrCat("builtin/", transport_->kind());
}

absl::Status ProcessGroupBuiltin::check_device(const core::Device& device) const {
  if (device.is_cpu()) return absl::OkStatus();
  if (cuda_ipc_ != nullptr && device.is_cuda()) {
    if (device.index() == cuda_ipc_->device()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "the builtin backend's cuda_ipc transport of this rank works on cuda:",
        cuda_ipc_->device(), " memory, not ", device.to_string(),
        " memory: move the tensor to the rank's GPU"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "the builtin backend works on host memory, not ", device.to_string(),
      " memory: use the cuda_ipc transport (GPUs of one host) or the nccl backend for CUDA "
      "tensors, or copy them to the host first"));
}

absl::StatusOr<std::shared_ptr<core::Event>> ProcessGroupBuiltin::device_ready(
    const OpInfo& info, const core::Device& device) {
  const core::Stream input = info.stream.value_or(core::Stream::cuda(device, nullptr));
  if (input.device() != device) {
    return absl::InvalidArgumentError(absl::StrCat(info.description, ": input stream on ",
                                                   input.device().to_string(), ", the buffer on ",
                                                   device.to_string()));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Event event, core::Event::create(device));
  event.record(input);
  return std::make_shared<core::Event>(std::move(event));
}

absl::Status ProcessGroupBuiltin::same_memory(const OpInfo& info, const Buffer& output,
                                              const Buffer& input) {
  if (output.device.is_cuda() == input.device.is_cuda()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(info.description, ": output on ",
                                                 output.device.to_string(), ", input on ",
                                                 input.device.to_string(),
                                                 ": both must be host or both CUDA memory"));
}

WorkPtr ProcessGroupBuiltin::enqueue(const OpInfo& info, Run run) {
  auto work = std::make_shared<Work>(info.description);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Task{work, info, std::move(run)});
  }
  cv_.notify_one();
  return work;
}

void ProcessGroupBuiltin::worker_loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;  // the destructor cancels what is left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    absl::Status status;
    if (!broken_.ok()) {
      status = absl::FailedPreconditionError(absl::StrCat(
          task.info.description, ": the process group is unusable after an earlier failure: ",
          broken_.message()));
    } else {
      OpContext ctx;
      ctx.wire_op = static_cast<uint16_t>(task.info.type);
      ctx.seq = task.info.seq;
      ctx.tag = task.info.tag;
      ctx.op_bytes = task.info.bytes;
      ctx.timeout = task.info.timeout;
      ctx.deadline = absl::Now() + task.info.timeout;
      ctx.description = absl::StrCat(task.info.description, " on rank ", rank(), " of ", size(),
                                     " [", backend_name(), "]");
      ctx.abort = &abort_;
      status = task.run(ctx);
      // Anything past argument checks may leave peers out of step.
      if (!status.ok() && !absl::IsInvalidArgument(status)) broken_ = status;
    }
    task.work->complete(std::move(status));
  }
}

absl::StatusOr<WorkPtr> ProcessGroupBuiltin::do_all_reduce(const OpInfo& info,
                                                           const Buffer& buffer, ReduceOp op) {
  if (buffer.device.is_cuda()) {
    COLOSSAL_ASSIGN_OR_RETURN(auto ready, device_ready(info, buffer.device));
    return enqueue(info, [this, buffer, op, ready](const OpContext& ctx) {
      ready->wait(cuda_ipc_->stream());
      return cuda_ipc_->all_reduce(ctx, buffer.data, buffer.count, buffer.dtype, op);
    });
  }
  return enqueue(info, [this, buffer, op](const OpContext& ctx) {
    return builtin::ring_all_reduce(*transport_, ctx, scratch_, buffer.data, buffer.count,
                                    buffer.dtype, op);
  });
}

absl::StatusOr<WorkPtr> ProcessGroupBuiltin::do_reduce_scatter(const OpInfo& info,
                                                               const Buffer& output,
                                                               const Buffer& input, ReduceOp op) {
  COLOSSAL_RETURN_IF_ERROR(same_memory(info, output, input));
  if (input.device.is_cuda()) {
    COLOSSAL_ASSIGN_OR_RETURN(auto ready, device_ready(info, input.device));
    return enqueue(info, [this, output, input, op, ready](const OpContext& ctx) {
      ready->wait(cuda_ipc_->stream());
      return cuda_ipc_->reduce_scatter(ctx, output.data, input.data, output.count,
                                       output.dtype, op);
    });
  }
  return enqueue(info, [this, output, input, op](const OpContext& ctx) {
    return builtin::ring_reduce_scatter(*transport_, ctx, scratch_, output.data, input.data,
                                        output.count, output.dtype, op);
  });
}

absl::StatusOr<WorkPtr> ProcessGroupBuiltin::do_all_gather(const OpInfo& info,
                                                           const Buffer& output,
                                                           const Buffer& input) {
  COLOSSAL_RETURN_IF_ERROR(same_memory(info, output, input));
  if (input.device.is_cuda()) {
    COLOSSAL_ASSIGN_OR_RETURN(auto ready, device_ready(info, input.device));
    return enqueue(info, [this, output, input, ready](const OpContext& ctx) {
      ready->wait(cuda_ipc_->stream());
      return cuda_ipc_->all_gather(ctx, output.data, input.data, input.nbytes());
    });
  }
  return enqueue(info, [this, output, input](const OpContext& ctx) {
    return builtin::ring_all_gather(*transport_, ctx, output.data, input.data, input.nbytes());
  });
}

absl::StatusOr<WorkPtr> ProcessGroupBuiltin::do_all_to_all(const OpInfo& info,
                                                           const Buffer& output,
                                                           std::vector<int64_t> output_counts,
                                                           const Buffer& input,
                                                           std::vector<int64_t> input_counts) {
  const size_t esz = core::dtype_size(input.dtype);
  std::vector<size_t> out_bytes, in_bytes;
  for (int64_t c : output_counts) out_bytes.push_back(static_cast<size_t>(c) * esz);
  for (int64_t c : input_counts) in_bytes.push_back(static_cast<size_t>(c) * esz);
  COLOSSAL_RETURN_IF_ERROR(same_memory(info, output, input));
  if (input.device.is_cuda()) {
    COLOSSAL_ASSIGN_OR_RETURN(auto ready, device_ready(info, input.device));
    return enqueue(info, [this, output, input, ready, out_bytes = std::move(out_bytes),
                          in_bytes = std::move(in_bytes)](const OpContext& ctx) {
      ready->wait(cuda_ipc_->stream());
      return cuda_ipc_->all_to_all(ctx, output.data, out_bytes, input.data, in_bytes);
    });
  }
  return enqueue(info, [this, output, input, out_bytes = std::move(out_bytes),
                        in_bytes = std::move(in_bytes)](const OpContext& ctx) {
    return builtin::pairwise_all_to_all(*transport_, ctx, output.data, out_bytes, input.data,
                                        in_bytes);
  });
}

absl::StatusOr<WorkPtr> ProcessGroupBuiltin::do_broadcast(const OpInfo& info,
                                                          const Buffer& buffer, int root) {
  if (buffer.device.is_cuda()) {
    COLOSSAL_ASSIGN_OR_RETURN(auto ready, device_ready(info, buffer.device));
    return enqueue(info, [this, buffer, root, ready](const OpContext& ctx) {
      ready->wait(cuda_ipc_->stream());
      return cuda_ipc_->broadcast(ctx, buffer.data, buffer.nbytes(), root);
    });
  }
  return enqueue(info, [this, buffer, root](const OpContext& ctx) {
    return builtin::ring_broadcast(*transport_, ctx, buffer.data, buffer.nbytes(), root);
  });
}

absl::StatusOr<WorkPtr> ProcessGroupBuiltin::do_batch_send_recv(const OpInfo& info,
                                                                std::vector<P2POp> ops) {
  for (const P2POp& op : ops) {
    if (op.buffer.device.is_cuda()) {
      return absl::UnimplementedError(absl::StrCat(
          info.description, ": send/recv of CUDA buffers is not supported by the builtin "
                            "backend's cuda_ipc transport: use the nccl backend"));
    }
  }
  return enqueue(info, [this, ops = std::move(ops)](const OpContext& op_ctx) {
    // Point-to-point messages are matched per peer and direction, not by the
    // group-wide sequence (ranks not involved do not count them).
    OpContext ctx = op_ctx;
    ctx.wire_op = builtin::kWireP2P;
    ctx.op_bytes = 0;
    std::vector<Transfer> transfers;
    transfers.reserve(ops.size());
    for (const P2POp& op : ops) {
      if (op.kind == P2POp::Kind::kSend) {
        transfers.push_back(Transfer::send(op.peer, op.buffer.data, op.buffer.nbytes()));
        transfers.back().seq = send_seq_[op.peer]++;
      } else {
        transfers.push_back(Transfer::recv(op.peer, op.buffer.data, op.buffer.nbytes()));
        transfers.back().seq = recv_seq_[op.peer]++;
      }
    }
    return builtin::run_transfers(*transport_, ctx, absl::MakeSpan(transfers));
  });
}

absl::StatusOr<WorkPtr> ProcessGroupBuiltin::do_barrier(const OpInfo& info) {
  return enqueue(info, [this](const OpContext& ctx) {
    return builtin::dissemination_barrier(*transport_, ctx);
  });
}

absl::StatusOr<std::shared_ptr<ProcessGroup>> ProcessGroupBuiltin::do_new_group(
    const std::string& name, std::vector<int> world_ranks, int group_rank) {
  BuiltinOptions o = options_;
  o.group_name = absl::StrCat(options_.group_name, "/", name);
  // Subgroups use this rank's GPU, whatever their rank numbers.
  if (cuda_ipc_ != nullptr) o.cuda_ipc.device = cuda_ipc_->device();
  const int size = static_cast<int>(world_ranks.size());
  COLOSSAL_ASSIGN_OR_RETURN(auto group,
                            create_group(store_, group_rank, size, std::move(world_ranks), o));
  return std::shared_ptr<ProcessGroup>(std::move(group));
}

}  // namespace colossal::comm
