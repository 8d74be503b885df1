#include "comm/nccl/process_group_nccl.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/check.h"
#include "core/status/status.h"
#include "core/trace/trace.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/nccl/nccl_check.h"
#include "core/context/context.h"
#include "core/status/cuda_check.h"
#endif

namespace colossal::comm {

#if COLOSSAL_WITH_CUDA

namespace {

absl::StatusOr<ncclDataType_t> nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF64: return ncclFloat64;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kU8: return ncclUint8;
    case DType::kU16: break;
  }
  return absl::UnimplementedError(absl::StrCat("NCCL has no ", core::dtype_name(dtype),
                                               " type: convert to int32 or float32"));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kProd: return ncclProd;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  COLOSSAL_FATAL() << "unknown ReduceOp " << static_cast<int>(op);
  return ncclSum;  // not reached
}

// A collective on the communication stream; complete once its end event has
// passed (or the watchdog failed it).
class NcclWork : public Work {
 public:
  NcclWork(const OpInfo& info, core::Event end)
      : Work(info.description),
        end_(std::move(end)),
        deadline_(absl::Now() + info.timeout),
        timeout_(info.timeout),
        bytes_(info.bytes) {}

  bool is_completed() override {
    if (Work::is_completed()) return true;
    if (!end_.query()) return false;
    complete(absl::OkStatus());
    return true;
  }

  absl::Status wait(absl::Duration timeout) override {
    const absl::Time until =
        timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
    absl::Duration nap = absl::Microseconds(10);
    while (!is_completed()) {
      if (absl::Now() >= until) {
        return absl::DeadlineExceededError(absl::StrCat(description(), " is still running after ",
                                                        absl::FormatDuration(timeout)));
      }
      absl::SleepFor(nap);
      nap = std::min(nap * 2, absl::Milliseconds(1));
    }
    return Work::status();
  }

  void wait_stream(const core::Stream& stream) override { end_.wait(stream); }

  absl::Status status() override {
    (void)is_completed();
    return Work::status();
  }

  absl::Time deadline() const { return deadline_; }
  absl::Duration timeout() const { return timeout_; }
  size_t bytes() const { return bytes_; }

 private:
  core::Event end_;
  const absl::Time deadline_;
  const absl::Duration timeout_;
  const size_t bytes_;
};

std::string nccl_error(ncclComm_t comm, ncclResult_t r) {
  const char* last = comm != nullptr ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
  return absl::StrCat(ncclGetErrorString(r), last != nullptr && *last ? absl::StrCat(" (", last, ")") : "");
}

}  // namespace

// Enqueues an NCCL call of the operation `info` (see Impl::enqueue_failed).
#define COLOSSAL_NCCL_ENQUEUE(expr)                                                       \
  do {                                                                                    \
    const ncclResult_t colossal_nccl_result_ = (expr);                                    \
    if (colossal_nccl_result_ != ncclSuccess) {                                           \
      return impl_->enqueue_failed(info, #expr, colossal_nccl_result_, __FILE__, __LINE__); \
    }                                                                                     \
  } while (0)

class ProcessGroupNccl::Impl {
 public:
  Impl(core::Device device, int rank, int size, ncclComm_t comm, core::OwnedStream stream,
       core::Event order, core::Stream default_input, void* barrier_buffer,
       absl::Duration interval)
      : device_(device),
        rank_(rank),
        size_(size),
        comm_(comm),
        stream_(std::move(stream)),
        order_(std::move(order)),
        default_input_(default_input),
        barrier_buffer_(barrier_buffer),
        interval_(interval) {
    watchdog_ = std::thread([this] { watchdog_loop(); });
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
    // Let enqueued collectives finish (bounded), then release the communicator.
    const absl::Time until = absl::Now() + absl::Seconds(30);
    bool drained = true;
    for (auto& w : pending_) {
      while (!w->is_completed()) {
        if (absl::Now() >= until) {
          drained = false;
          break;
        }
        absl::SleepFor(absl::Milliseconds(1));
      }
    }
    {
      core::DeviceGuard guard(device_);
      if (!drained) {
        for (auto& w : pending_) {
          w->complete(absl::AbortedError(absl::StrCat(
              w->description(), ": the NCCL group was destroyed before it finished")));
        }
      }
      // ncclCommAbort frees the communicator without waiting for other ranks
      // (which may have exited already); ncclCommDestroy may wait for them.
      if (comm_ != nullptr) NCCL_CHECK(ncclCommAbort(comm_));
      CUDA_CHECK_RELEASE(cudaFree(barrier_buffer_));
    }
  }

  const core::Stream& stream() const { return stream_.get(); }
  const core::Device& device() const { return device_; }
  void* barrier_buffer() const { return barrier_buffer_; }

  // An operation being enqueued: the communicator, locked against the
  // watchdog aborting it midway (unless enqueueing itself hangs).
  struct Enqueue {
    ncclComm_t comm;
    std::unique_lock<std::timed_mutex> lock;
    // The operation on the communication stream, when a trace runs (ended
    // before the lock is released, so no other operation falls inside it).
    std::unique_ptr<core::trace::Span> span;
  };

  // Starts an operation: the group must be healthy; the communication stream
  // waits for the input stream.
  absl::StatusOr<Enqueue> begin(const OpInfo& info) {
    const core::Stream input = info.stream.value_or(default_input_);
    if (input.device() != device_) {
      return absl::InvalidArgumentError(absl::StrCat(info.description, ": input stream on ",
                                                     input.device().to_string(),
                                                     ", the group is on ", device_.to_string()));
    }
    std::unique_lock<std::timed_mutex> enqueue(enqueue_mu_);
    ncclComm_t comm;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!broken_.ok()) return unusable(info);
      comm = comm_;
    }
    core::wait_stream(stream_.get(), input, order_);
    std::unique_ptr<core::trace::Span> span;
    if (core::trace::enabled()) {
      span = std::make_unique<core::trace::Span>("comm", info.description, &stream_.get());
    }
    return Enqueue{comm, std::move(enqueue), std::move(span)};
  }

  // An NCCL call of `info` returned `result`: after an abort that is the
  // group's failure; otherwise a broken invariant, and the process aborts
  // with NCCL's message.
  absl::Status enqueue_failed(const OpInfo& info, const char* expr, ncclResult_t result,
                              const char* file, int line) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!broken_.ok()) return unusable(info);
    }
    core::internal::library_call_failed("NCCL", expr, static_cast<long long>(result), nullptr,
                                        ncclGetErrorString(result), file, line);
  }

  // Ends an operation: records its end event and hands it to the watchdog.
  absl::StatusOr<WorkPtr> finish(const OpInfo& info) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Event end, core::Event::create(device_));
    end.record(stream_.get());
    auto work = std::make_shared<NcclWork>(info, std::move(end));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!broken_.ok()) {
        work->complete(broken_);
      } else {
        pending_.push_back(work);
      }
    }
    return WorkPtr(work);
  }

 private:
  void watchdog_loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, absl::ToChronoNanoseconds(interval_));
      if (stop_ || !broken_.ok()) continue;
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
          async != ncclInProgress) {
        abort_locked(absl::InternalError(absl::StrCat(
            "NCCL watchdog: asynchronous NCCL error on rank ", rank_, " of ", size_, ": ",
            nccl_error(comm_, async), "; communicator aborted")));
        continue;
      }
      const absl::Time now = absl::Now();
      for (auto it = pending_.begin(); it != pending_.end();) {
        NcclWork& w = **it;
        if (w.is_completed()) {
          it = pending_.erase(it);
          continue;
        }
        if (now >= w.deadline()) {
          abort_locked(absl::DeadlineExceededError(absl::StrCat(
              "NCCL watchdog: ", w.description(), ", ", w.bytes(), " bytes, did not finish within ",
              absl::FormatDuration(w.timeout()), " on rank ", rank_, " of ", size_, " (",
              device_.to_string(), "); communicator aborted")));
          break;
        }
        ++it;
      }
    }
  }

  void abort_locked(absl::Status reason) {
    broken_ = reason;
    std::fprintf(stderr, "%s\n", std::string(reason.message()).c_str());
    // Fail the pending collectives first: once aborted, their kernels exit and
    // their end events pass, which must not read as success.
    for (auto& w : pending_) w->complete(reason);
    pending_.clear();
    // Wait briefly for a call being enqueued; one that hangs in NCCL (a peer
    // that never connects) is exactly what the abort releases.
    std::unique_lock<std::timed_mutex> enqueue(enqueue_mu_, std::defer_lock);
    (void)enqueue.try_lock_for(std::chrono::seconds(1));
    {
      core::DeviceGuard guard(device_);
      NCCL_CHECK(ncclCommAbort(comm_));
    }
    comm_ = nullptr;
  }

  absl::Status unusable(const OpInfo& info) const {
    return absl::FailedPreconditionError(absl::StrCat(
        info.description, ": the NCCL group is unusable after an earlier failure: ",
        broken_.message()));
  }

  const core::Device device_;
  const int rank_;
  const int size_;
  std::timed_mutex enqueue_mu_;  // held while NCCL calls are being made
  ncclComm_t comm_;
  core::OwnedStream stream_;
  core::Event order_;  // input stream -> communication stream
  const core::Stream default_input_;
  void* barrier_buffer_;
  const absl::Duration interval_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  absl::Status broken_;
  std::vector<std::shared_ptr<NcclWork>> pending_;
  std::thread watchdog_;
};

absl::StatusOr<std::shared_ptr<ProcessGroupNccl>> ProcessGroupNccl::create_group(
    std::shared_ptr<Store> store, int rank, int size, std::vector<int> world_ranks,
    const NcclOptions& options) {
  if (store == nullptr) return absl::InvalidArgumentError("NCCL process group: no store");
  const core::Device device = options.device;
  if (!device.is_cuda()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NCCL process group: device ", device.to_string(),
        " is not a CUDA device (use the builtin backend on the CPU)"));
  }
  COLOSSAL_RETURN_IF_ERROR(core::check_device_available(device));
  const std::string where = absl::StrCat("NCCL group '", options.group_name, "' (rank ", rank,
                                         " of ", size, " on ", device.to_string(), ")");
  PrefixStore keys(options.group_name, store);
  // Everyone present first: a missing rank is a clear timeout here, not a hang in NCCL.
  COLOSSAL_RETURN_IF_ERROR(
      core::annotate(comm::barrier(keys, "nccl/arrived", size, options.timeout), where));
  ncclUniqueId id;
  if (rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    COLOSSAL_RETURN_IF_ERROR(
        keys.set("nccl/unique_id", std::string(reinterpret_cast<const char*>(&id), sizeof(id))));
  } else {
    auto value = keys.get("nccl/unique_id");
    if (!value.ok()) return core::annotate(value.status(), where);
    if (value->size() != sizeof(id)) {
      return absl::DataLossError(absl::StrCat(where, ": malformed NCCL unique id in the store"));
    }
    std::memcpy(&id, value->data(), sizeof(id));
  }
  core::DeviceGuard guard(device);
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (r != ncclSuccess) {
    return absl::UnavailableError(
        absl::StrCat(where, ": creating the NCCL communicator failed: ", nccl_error(comm, r)));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::OwnedStream stream,
                            core::OwnedStream::create(device, core::StreamPriority::kHigh));
  COLOSSAL_ASSIGN_OR_RETURN(core::Event order, core::Event::create(device));
  core::Stream input = core::Stream::cuda(device, nullptr);
  if (options.compute_stream) {
    input = *options.compute_stream;
  } else if (core::Context::initialized() && core::Context::get().device() == device) {
    input = core::Context::get().compute_stream();
  }
  void* barrier_buffer = nullptr;
  CUDA_CHECK(cudaMalloc(&barrier_buffer, sizeof(int32_t)));
  CUDA_CHECK(cudaMemset(barrier_buffer, 0, sizeof(int32_t)));
  auto impl = std::make_unique<Impl>(device, rank, size, comm, std::move(stream), std::move(order),
                                     input, barrier_buffer, options.watchdog_interval);
  return std::shared_ptr<ProcessGroupNccl>(new ProcessGroupNccl(
      std::move(store), rank, size, std::move(world_ranks), options, std::move(impl)));
}

const core::Stream& ProcessGroupNccl::comm_stream() const { return impl_->stream(); }

absl::Status ProcessGroupNccl::check_device(const core::Device& device) const {
  if (device == options_.device) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the NCCL group works on ", options_.device.to_string(), " memory, not ", device.to_string(),
      device.is_cpu() ? " (use the builtin backend for host tensors)" : ""));
}

absl::StatusOr<WorkPtr> ProcessGroupNccl::do_all_reduce(const OpInfo& info, const Buffer& buffer,
                                                        ReduceOp op) {
  COLOSSAL_ASSIGN_OR_RETURN(ncclDataType_t dt, nccl_dtype(buffer.dtype));
  COLOSSAL_ASSIGN_OR_RETURN(Impl::Enqueue e, impl_->begin(info));
  ncclComm_t comm = e.comm;
  core::DeviceGuard guard(impl_->device());
  COLOSSAL_NCCL_ENQUEUE(ncclAllReduce(buffer.data, buffer.data, buffer.count, dt, nccl_op(op), comm,
                           impl_->stream().handle()));
  e.span.reset();
  e.lock.unlock();
  return impl_->finish(info);
}

absl::StatusOr<WorkPtr> ProcessGroupNccl::do_reduce_scatter(const OpInfo& info,
                                                            const Buffer& output,
                                                            const Buffer& input, ReduceOp op) {
  COLOSSAL_ASSIGN_OR_RETURN(ncclDataType_t dt, nccl_dtype(input.dtype));
  COLOSSAL_ASSIGN_OR_RETURN(Impl::Enqueue e, impl_->begin(info));
  ncclComm_t comm = e.comm;
  core::DeviceGuard guard(impl_->device());
  COLOSSAL_NCCL_ENQUEUE(ncclReduceScatter(input.data, output.data, output.count, dt, nccl_op(op), comm,
                               impl_->stream().handle()));
  e.span.reset();
  e.lock.unlock();
  return impl_->finish(info);
}

absl::StatusOr<WorkPtr> ProcessGroupNccl::do_all_gather(const OpInfo& info, const Buffer& output,
                                                        const Buffer& input) {
  COLOSSAL_ASSIGN_OR_RETURN(ncclDataType_t dt, nccl_dtype(input.dtype));
  COLOSSAL_ASSIGN_OR_RETURN(Impl::Enqueue e, impl_->begin(info));
  ncclComm_t comm = e.comm;
  core::DeviceGuard guard(impl_->device());
  COLOSSAL_NCCL_ENQUEUE(ncclAllGather(input.data, output.data, input.count, dt, comm,
                           impl_->stream().handle()));
  e.span.reset();
  e.lock.unlock();
  return impl_->finish(info);
}

absl::StatusOr<WorkPtr> ProcessGroupNccl::do_all_to_all(const OpInfo& info, const Buffer& output,
                                                        std::vector<int64_t> output_counts,
                                                        const Buffer& input,
                                                        std::vector<int64_t> input_counts) {
  COLOSSAL_ASSIGN_OR_RETURN(ncclDataType_t dt, nccl_dtype(input.dtype));
  const int me = rank();
  if (input_counts[me] != output_counts[me]) {
    return absl::InvalidArgumentError(absl::StrCat(info.description, ": this rank sends itself ",
                                                   input_counts[me], " elements but expects ",
                                                   output_counts[me]));
  }
  COLOSSAL_ASSIGN_OR_RETURN(Impl::Enqueue e, impl_->begin(info));
  ncclComm_t comm = e.comm;
  core::DeviceGuard guard(impl_->device());
  const size_t esz = core::dtype_size(input.dtype);
  char* out = static_cast<char*>(output.data);
  const char* in = static_cast<const char*>(input.data);
  cudaStream_t stream = impl_->stream().handle();
  size_t in_off = 0, out_off = 0;
  COLOSSAL_NCCL_ENQUEUE(ncclGroupStart());
  for (int p = 0; p < size(); ++p) {
    if (p == me) {
      if (input_counts[p] > 0) {
        CUDA_CHECK(cudaMemcpyAsync(out + out_off, in + in_off, input_counts[p] * esz,
                                   cudaMemcpyDeviceToDevice, stream));
      }
    } else {
      COLOSSAL_NCCL_ENQUEUE(ncclSend(in + in_off, input_counts[p], dt, p, comm, stream));
      COLOSSAL_NCCL_ENQUEUE(ncclRecv(out + out_off, output_counts[p], dt, p, comm, stream));
    }
    in_off += input_counts[p] * esz;
    out_off += output_counts[p] * esz;
  }
  COLOSSAL_NCCL_ENQUEUE(ncclGroupEnd());
  e.span.reset();
  e.lock.unlock();
  return impl_->finish(info);
}

absl::StatusOr<WorkPtr> ProcessGroupNccl::do_broadcast(const OpInfo& info, const Buffer& buffer,
                                                       int root) {
  COLOSSAL_ASSIGN_OR_RETURN(ncclDataType_t dt, nccl_dtype(buffer.dtype));
  COLOSSAL_ASSIGN_OR_RETURN(Impl::Enqueue e, impl_->begin(info));
  ncclComm_t comm = e.comm;
  core::DeviceGuard guard(impl_->device());
  COLOSSAL_NCCL_ENQUEUE(ncclBroadcast(buffer.data, buffer.data, buffer.count, dt, root, comm,
                           impl_->stream().handle()));
  e.span.reset();
  e.lock.unlock();
  return impl_->finish(info);
}

absl::StatusOr<WorkPtr> ProcessGroupNccl::do_reduce(const OpInfo& info, const Buffer& buffer,
                                                    ReduceOp op, int root) {
  COLOSSAL_ASSIGN_OR_RETURN(ncclDataType_t dt, nccl_dtype(buffer.dtype));
  COLOSSAL_ASSIGN_OR_RETURN(Impl::Enqueue e, impl_->begin(info));
  ncclComm_t comm = e.comm;
  core::DeviceGuard guard(impl_->device());
  // In place: the other ranks' buffers are only read.
  COLOSSAL_NCCL_ENQUEUE(ncclReduce(buffer.data, buffer.data, buffer.count, dt, nccl_op(op), root,
                                   comm, impl_->stream().handle()));
  e.span.reset();
  e.lock.unlock();
  return impl_->finish(info);
}

absl::StatusOr<WorkPtr> ProcessGroupNccl::do_batch_send_recv(const OpInfo& info,
                                                             std::vector<P2POp> ops) {
  std::vector<ncclDataType_t> types;
  for (const P2POp& op : ops) {
    COLOSSAL_ASSIGN_OR_RETURN(ncclDataType_t dt, nccl_dtype(op.buffer.dtype));
    types.push_back(dt);
  }
  COLOSSAL_ASSIGN_OR_RETURN(Impl::Enqueue e, impl_->begin(info));
  ncclComm_t comm = e.comm;
  core::DeviceGuard guard(impl_->device());
  cudaStream_t stream = impl_->stream().handle();
  COLOSSAL_NCCL_ENQUEUE(ncclGroupStart());
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    if (op.kind == P2POp::Kind::kSend) {
      COLOSSAL_NCCL_ENQUEUE(ncclSend(op.buffer.data, op.buffer.count, types[i], op.peer, comm, stream));
    } else {
      COLOSSAL_NCCL_ENQUEUE(ncclRecv(op.buffer.data, op.buffer.count, types[i], op.peer, comm, stream));
    }
  }
  COLOSSAL_NCCL_ENQUEUE(ncclGroupEnd());
  e.span.reset();
  e.lock.unlock();
  return impl_->finish(info);
}

absl::StatusOr<WorkPtr> ProcessGroupNccl::do_barrier(const OpInfo& info) {
  COLOSSAL_ASSIGN_OR_RETURN(Impl::Enqueue e, impl_->begin(info));
  ncclComm_t comm = e.comm;
  core::DeviceGuard guard(impl_->device());
  COLOSSAL_NCCL_ENQUEUE(ncclAllReduce(impl_->barrier_buffer(), impl_->barrier_buffer(), 1, ncclInt32, ncclSum,
                           comm, impl_->stream().handle()));
  e.span.reset();
  e.lock.unlock();
  return impl_->finish(info);
}

#else  // !COLOSSAL_WITH_CUDA

// A CPU-only build has no NCCL: creation fails with a clear reason, and no
// group object can exist, so the operations below are unreachable.
class ProcessGroupNccl::Impl {};

namespace {
[[noreturn]] void no_group_without_cuda() {
  COLOSSAL_FATAL() << "unreachable: no NCCL group exists in a CPU-only build";
  std::abort();
}
}  // namespace

absl::StatusOr<std::shared_ptr<ProcessGroupNccl>> ProcessGroupNccl::create_group(
    std::shared_ptr<Store>, int, int, std::vector<int>, const NcclOptions& options) {
  return absl::FailedPreconditionError(absl::StrCat(
      "the NCCL backend needs CUDA, but this build is CPU-only (built without CUDA); device ",
      options.device.to_string(), " is unavailable: use the builtin backend"));
}

const core::Stream& ProcessGroupNccl::comm_stream() const {
  no_group_without_cuda();
}
absl::Status ProcessGroupNccl::check_device(const core::Device&) const {
  no_group_without_cuda();
}
absl::StatusOr<WorkPtr> ProcessGroupNccl::do_all_reduce(const OpInfo&, const Buffer&, ReduceOp) {
  no_group_without_cuda();
}
absl::StatusOr<WorkPtr> ProcessGroupNccl::do_reduce_scatter(const OpInfo&, const Buffer&,
                                                            const Buffer&, ReduceOp) {
  no_group_without_cuda();
}
absl::StatusOr<WorkPtr> ProcessGroupNccl::do_all_gather(const OpInfo&, const Buffer&,
                                                        const Buffer&) {
  no_group_without_cuda();
}
absl::StatusOr<WorkPtr> ProcessGroupNccl::do_all_to_all(const OpInfo&, const Buffer&,
                                                        std::vector<int64_t>, const Buffer&,
                                                        std::vector<int64_t>) {
  no_group_without_cuda();
}
absl::StatusOr<WorkPtr> ProcessGroupNccl::do_broadcast(const OpInfo&, const Buffer&, int) {
  no_group_without_cuda();
}
absl::StatusOr<WorkPtr> ProcessGroupNccl::do_reduce(const OpInfo&, const Buffer&, ReduceOp, int) {
  no_group_without_cuda();
}
absl::StatusOr<WorkPtr> ProcessGroupNccl::do_batch_send_recv(const OpInfo&, std::vector<P2POp>) {
  no_group_without_cuda();
}
absl::StatusOr<WorkPtr> ProcessGroupNccl::do_barrier(const OpInfo&) {
  no_group_without_cuda();
}

#endif  // COLOSSAL_WITH_CUDA

absl::StatusOr<std::shared_ptr<ProcessGroupNccl>> ProcessGroupNccl::create(
    std::shared_ptr<Store> store, int rank, int size, const NcclOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NCCL process group: rank ", rank, " is not in [0, ", size, ") (check RANK and WORLD_SIZE)"));
  }
  std::vector<int> world(size);
  for (int i = 0; i < size; ++i) world[i] = i;
  return create_group(std::move(store), rank, size, std::move(world), options);
}

ProcessGroupNccl::ProcessGroupNccl(std::shared_ptr<Store> store, int rank, int size,
                                   std::vector<int> world_ranks, const NcclOptions& options,
                                   std::unique_ptr<Impl> impl)
    : ProcessGroup(rank, size, std::move(world_ranks), options.timeout),
      store_(std::move(store)),
      options_(options),
      impl_(std::move(impl)) {
  check_collectives_through(store_, options.group_name);
}

ProcessGroupNccl::~ProcessGroupNccl() = default;

absl::StatusOr<std::shared_ptr<ProcessGroup>> ProcessGroupNccl::do_new_group(
    const std::string& name, std::vector<int> world_ranks, int group_rank) {
  NcclOptions o = options_;
  o.group_name = absl::StrCat(options_.group_name, "/", name);
  const int size = static_cast<int>(world_ranks.size());
  COLOSSAL_ASSIGN_OR_RETURN(auto group,
                            create_group(store_, group_rank, size, std::move(world_ranks), o));
  return std::shared_ptr<ProcessGroup>(std::move(group));
}

}  // namespace colossal::comm
