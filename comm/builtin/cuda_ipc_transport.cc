#include "comm/builtin/cuda_ipc_transport.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bazel/cuda_config.h"
#include "comm/builtin/ring.h"
#include "core/status/check.h"
#include "core/status/status.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/status/cuda_check.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/reduce/reduce.h"
#endif

namespace colossal::comm::builtin {

#if COLOSSAL_WITH_CUDA

bool cuda_ipc_transport_available() { return true; }

namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

namespace kr = kernels::reduce;

absl::Status cuda_status(cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  (void)cudaGetLastError();
  return absl::InternalError(absl::StrCat("cuda_ipc transport: ", what, " failed: ",
                                          cudaGetErrorName(err), " (", cudaGetErrorString(err),
                                          ")"));
}

// Sets the calling thread's device for the duration of a call.
class DeviceGuard {
 public:
  // `teardown`: from a destructor, which may run while the process exits
  // (errors saying the runtime is gone are ignored).
  explicit DeviceGuard(int device, bool teardown = false) {
    device_ = device;
    if (teardown) {
      if (core::internal::ignore_teardown_errors(cudaGetDevice(&previous_)) != cudaSuccess ||
          core::internal::ignore_teardown_errors(cudaSetDevice(device)) != cudaSuccess) {
        previous_ = device;
      }
      return;
    }
    CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() {
    if (previous_ != device_) CUDA_CHECK_RELEASE(cudaSetDevice(previous_));
  }

 private:
  int previous_ = 0;
  int device_ = 0;
};

}  // namespace

struct CudaIpcTransport::Impl {
  // Staging slots per sending peer (see step()).
  static constexpr size_t kSlots = 3;

  int device = 0;
  int rank = 0;
  int size = 0;
  size_t slot = 0;
  // This rank's staging: kSlots slots for every source peer, peer p at p * kSlots * slot.
  char* staging = nullptr;
  // Every peer's staging, mapped here (nullptr for this rank).
  std::vector<char*> peer_staging;
  cudaStream_t copy_stream = nullptr;    // pieces into peers' slots
  cudaStream_t work_stream = nullptr;    // reductions/copies out of this rank's slots
  cudaEvent_t copy_done = nullptr;
  cudaEvent_t work_done = nullptr;
  // Device scratch (reduce_scatter partials); grows, never shrinks.
  char* scratch = nullptr;
  size_t scratch_bytes = 0;

  ~Impl() {
    for (char* p : peer_staging) {
      if (p != nullptr) CUDA_CHECK_RELEASE(cudaIpcCloseMemHandle(p));
    }
    if (copy_stream) CUDA_CHECK_RELEASE(cudaStreamSynchronize(copy_stream));
    if (work_stream) CUDA_CHECK_RELEASE(cudaStreamSynchronize(work_stream));
    if (scratch) CUDA_CHECK_RELEASE(cudaFree(scratch));
    if (staging) CUDA_CHECK_RELEASE(cudaFree(staging));
    if (copy_done) CUDA_CHECK_RELEASE(cudaEventDestroy(copy_done));
    if (work_done) CUDA_CHECK_RELEASE(cudaEventDestroy(work_done));
    if (copy_stream) CUDA_CHECK_RELEASE(cudaStreamDestroy(copy_stream));
    if (work_stream) CUDA_CHECK_RELEASE(cudaStreamDestroy(work_stream));
  }

  absl::StatusOr<char*> get_scratch(size_t bytes) {
    if (bytes > scratch_bytes) {
      if (scratch) CUDA_CHECK(cudaFree(scratch));
      scratch = nullptr;
      scratch_bytes = 0;
      void* p = nullptr;
      COLOSSAL_RETURN_IF_ERROR(cuda_status(cudaMalloc(&p, bytes), "cudaMalloc of scratch"));
      scratch = static_cast<char*>(p);
      scratch_bytes = bytes;
    }
    return scratch;
  }

  void sync_work() { CUDA_CHECK(cudaStreamSynchronize(work_stream)); }

  // Local device copy on the work stream (not synchronised).
  void local_copy(void* dst, const void* src, size_t bytes) {
    if (bytes == 0 || dst == src) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, work_stream));
  }

  absl::Status divide(void* data, int64_t count, DType dtype, int divisor) {
    if (count == 0) return absl::OkStatus();
    return core::from_kernel_status(
        kernels::elementwise::scale_cuda(data, data, 1.0 / divisor, count, dtype, work_stream),
        "avg");
  }

  enum class Land { kCopy, kReduce };

  // One exchange: `send_bytes` from `src` (this device) to peer `to`, and
  // `recv_bytes` from peer `from` landed in `dst` (copied, or reduced into it
  // with `op`). `to`/`from` < 0: no send / no receive. Returns with all
  // device work of the step complete and every slot free again.
  absl::Status step(Transport& control, const OpContext& ctx, int to, const char* src,
                    size_t send_bytes, int from, char* dst, size_t recv_bytes, Land land,
                    DType dtype, kr::ReduceOp op) {
    const size_t ks = to < 0 ? 0 : (send_bytes + slot - 1) / slot;
    const size_t kr_ = from < 0 ? 0 : (recv_bytes + slot - 1) / slot;
    const size_t k_all = std::max(ks, kr_);
    if (k_all == 0) return absl::OkStatus();
    const size_t esz = core::dtype_size(dtype);
    char* remote =
        ks > 0 ? peer_staging[to] + static_cast<size_t>(rank) * kSlots * slot : nullptr;
    char* local = kr_ > 0 ? staging + static_cast<size_t>(from) * kSlots * slot : nullptr;
    auto piece_bytes = [&](size_t total, size_t i) { return std::min(slot, total - i * slot); };
    // Piece i goes into the peer's slot i % kSlots; it is launched one
    // iteration ahead, so the copy engine works while the host exchanges the
    // previous piece's messages. That slot last held piece i - kSlots = i - 3,
    // whose ACK arrived in iteration i - 2.
    auto launch_copy = [&](size_t i) {
      CUDA_CHECK(cudaMemcpyAsync(remote + (i % kSlots) * slot, src + i * slot,
                                 piece_bytes(send_bytes, i), cudaMemcpyDefault, copy_stream));
      CUDA_CHECK(cudaEventRecord(copy_done, copy_stream));
    };
    if (ks > 0) launch_copy(0);
    std::vector<Transfer> t;
    t.reserve(4);
    for (size_t i = 0; i <= k_all; ++i) {
      uint64_t send_len = 0, recv_len = ~uint64_t{0};
      if (i < ks) {
        send_len = piece_bytes(send_bytes, i);
        CUDA_CHECK(cudaEventSynchronize(copy_done));  // piece i is in the peer's slot
        if (i + 1 < ks) launch_copy(i + 1);
      }
      // This rank's slot of piece i-1 is free once its reduction/copy is done.
      if (i >= 1 && i - 1 < kr_) CUDA_CHECK(cudaEventSynchronize(work_done));
      // List order matters when to == from (two ranks): DATA before ACK on
      // both sides.
      t.clear();
      if (i < ks) t.push_back(Transfer::send(to, &send_len, sizeof(send_len)));
      if (i >= 1 && i <= kr_) t.push_back(Transfer::send(from, nullptr, 0));
      if (i < kr_) t.push_back(Transfer::recv(from, &recv_len, sizeof(recv_len)));
      if (i >= 1 && i <= ks) t.push_back(Transfer::recv(to, nullptr, 0));
      absl::Status st = run_transfers(control, ctx, absl::MakeSpan(t));
      if (!st.ok()) {
        // Nothing of ours may still be writing into the peer after we return.
        CUDA_CHECK(cudaStreamSynchronize(copy_stream));
        CUDA_CHECK(cudaStreamSynchronize(work_stream));
        return st;
      }
      if (i < kr_) {
        const size_t want = piece_bytes(recv_bytes, i);
        if (recv_len != want) {
          CUDA_CHECK(cudaStreamSynchronize(copy_stream));
          return absl::FailedPreconditionError(absl::StrCat(
              ctx.description, ": ", control.describe_peer(from), " sent a piece of ", recv_len,
              " bytes where ", want,
              " were expected: ranks issued collectives of different sizes"));
        }
        const char* piece = local + (i % kSlots) * slot;
        if (land == Land::kCopy) {
          CUDA_CHECK(cudaMemcpyAsync(dst + i * slot, piece, want, cudaMemcpyDeviceToDevice,
                                     work_stream));
        } else {
          COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
              kr::reduce_into_cuda(dst + i * slot, piece, static_cast<int64_t>(want / esz),
                                   dtype, op, work_stream),
              "reduction"));
        }
        CUDA_CHECK(cudaEventRecord(work_done, work_stream));
      }
    }
    return absl::OkStatus();
  }
};

CudaIpcTransport::CudaIpcTransport(int rank, int size, int device,
                                   std::unique_ptr<ShmTransport> control,
                                   std::unique_ptr<Impl> impl)
    : rank_(rank),
      size_(size),
      device_(device),
      control_(std::move(control)),
      impl_(std::move(impl)) {}

CudaIpcTransport::~CudaIpcTransport() {
  if (impl_) {
    DeviceGuard guard(device_, /*teardown=*/true);
    impl_.reset();
  }
}

absl::StatusOr<std::unique_ptr<CudaIpcTransport>> CudaIpcTransport::create(
    Store& store, int rank, int size, const CudaIpcTransportOptions& options) {
  // Peers on another host cannot map this GPU's memory.
  const std::string world = env_or_empty("WORLD_SIZE");
  const std::string local = env_or_empty("LOCAL_WORLD_SIZE");
  int world_n = 0, local_n = 0;
  if (absl::SimpleAtoi(world, &world_n) && absl::SimpleAtoi(local, &local_n) &&
      world_n != local_n && size == world_n) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda_ipc transport: the group spans hosts (LOCAL_WORLD_SIZE=", local,
        " != WORLD_SIZE=", world,
        "): CUDA IPC connects only GPUs of one host; use the nccl backend"));
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  COLOSSAL_RETURN_IF_ERROR(store.set(absl::StrCat("cuda_ipc/host/", rank), host));
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    COLOSSAL_ASSIGN_OR_RETURN(std::string h, store.get(absl::StrCat("cuda_ipc/host/", p)));
    if (h != host) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cuda_ipc transport: rank ", p, " is on host '", h, "', this rank (", rank,
          ") on '", host, "': CUDA IPC connects only GPUs of one host; use the nccl backend"));
    }
  }

  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda_ipc transport: no CUDA device on this host",
        err != cudaSuccess ? absl::StrCat(" (", cudaGetErrorString(err), ")") : ""));
  }
  int device = options.device;
  if (device < 0) {
    int local_rank = -1;
    if (absl::SimpleAtoi(env_or_empty("LOCAL_RANK"), &local_rank) && local_rank >= 0 &&
        local_rank < count && size == world_n) {
      device = local_rank;
    } else {
      device = rank % count;
    }
  }
  if (device >= count) {
    return absl::FailedPreconditionError(absl::StrCat("cuda_ipc transport: rank ", rank,
                                                      " wants cuda:", device, " but only ",
                                                      count, " CUDA devices are visible"));
  }

  // The control channel first: it also checks every peer is alive and local.
  COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<ShmTransport> control,
                            ShmTransport::create(store, rank, size, options.shm));

  DeviceGuard guard(device);
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  impl->rank = rank;
  impl->size = size;
  size_t slot = options.slot_bytes == 0 ? (size_t{8} << 20) : options.slot_bytes;
  impl->slot = (slot + 255) / 256 * 256;
  impl->peer_staging.assign(size, nullptr);
  COLOSSAL_RETURN_IF_ERROR(cuda_status(
      cudaStreamCreateWithFlags(&impl->copy_stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  COLOSSAL_RETURN_IF_ERROR(cuda_status(
      cudaStreamCreateWithFlags(&impl->work_stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  COLOSSAL_RETURN_IF_ERROR(cuda_status(
      cudaEventCreateWithFlags(&impl->copy_done, cudaEventDisableTiming), "cudaEventCreate"));
  COLOSSAL_RETURN_IF_ERROR(cuda_status(
      cudaEventCreateWithFlags(&impl->work_done, cudaEventDisableTiming), "cudaEventCreate"));
  if (size > 1) {
    void* p = nullptr;
    const size_t bytes = static_cast<size_t>(size) * Impl::kSlots * impl->slot;
    COLOSSAL_RETURN_IF_ERROR(cuda_status(
        cudaMalloc(&p, bytes), absl::StrCat("cudaMalloc of ", bytes, " staging bytes on cuda:",
                                            device)));
    impl->staging = static_cast<char*>(p);
    cudaIpcMemHandle_t handle;
    COLOSSAL_RETURN_IF_ERROR(cuda_status(cudaIpcGetMemHandle(&handle, p), "cudaIpcGetMemHandle"));
    const std::string mine = absl::BytesToHexString(
        absl::string_view(reinterpret_cast<const char*>(&handle), sizeof(handle)));
    // The GPU's PCI bus id (ordinals differ between processes that see
    // different CUDA_VISIBLE_DEVICES), then the handle.
    char bus[64] = {};
    COLOSSAL_RETURN_IF_ERROR(
        cuda_status(cudaDeviceGetPCIBusId(bus, sizeof(bus) - 1, device), "cudaDeviceGetPCIBusId"));
    COLOSSAL_RETURN_IF_ERROR(store.set(absl::StrCat("cuda_ipc/handle/", rank),
                                       absl::StrCat(bus, "|", mine)));
    for (int q = 0; q < size; ++q) {
      if (q == rank) continue;
      COLOSSAL_ASSIGN_OR_RETURN(std::string v, store.get(absl::StrCat("cuda_ipc/handle/", q)));
      const size_t colon = v.find('|');
      const std::string hex = colon == std::string::npos ? v : v.substr(colon + 1);
      const std::string raw = absl::HexStringToBytes(hex);
      if (raw.size() != sizeof(cudaIpcMemHandle_t)) {
        return absl::DataLossError(absl::StrCat("cuda_ipc transport: rank ", q,
                                                " published a malformed IPC handle"));
      }
      if (colon != std::string::npos && v.substr(0, colon) == bus) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cuda_ipc transport: ranks ", rank, " and ", q, " both use the GPU at PCI ", bus,
            " (cuda:", device, " here): give every rank its own GPU (one process per GPU)"));
      }
      cudaIpcMemHandle_t peer;
      std::memcpy(&peer, raw.data(), sizeof(peer));
      void* mapped = nullptr;
      COLOSSAL_RETURN_IF_ERROR(cuda_status(
          cudaIpcOpenMemHandle(&mapped, peer, cudaIpcMemLazyEnablePeerAccess),
          absl::StrCat("cudaIpcOpenMemHandle of rank ", q, "'s staging buffer")));
      impl->peer_staging[q] = static_cast<char*>(mapped);
    }
    // Nobody writes into a peer before the peer has mapped everything (a
    // failure above is then seen by all as the barrier's timeout at worst).
    COLOSSAL_RETURN_IF_ERROR(barrier(store, "cuda_ipc/mapped", size, store.timeout()));
  }
  return std::unique_ptr<CudaIpcTransport>(
      new CudaIpcTransport(rank, size, device, std::move(control), std::move(impl)));
}

core::Stream CudaIpcTransport::stream() const {
  return core::Stream::cuda(core::Device::cuda(device_), impl_->work_stream);
}

absl::Status CudaIpcTransport::all_reduce(const OpContext& ctx, void* data, int64_t count,
                                          DType dtype, ReduceOp op) {
  DeviceGuard guard(device_);
  Impl& d = *impl_;
  const int P = size_, r = rank_;
  if (P == 1 || count == 0) {
    d.sync_work();
    return absl::OkStatus();
  }
  const size_t esz = core::dtype_size(dtype);
  const kr::ReduceOp kop = kernel_op(op);
  char* base = static_cast<char*>(data);
  const int next = ring_mod(r + 1, P), prev = ring_mod(r - 1, P);
  auto offset = [&](int c) {
    return static_cast<size_t>(chunk_begin(count, P, ring_mod(c, P))) * esz;
  };
  auto length = [&](int c) {
    const int cc = ring_mod(c, P);
    return static_cast<size_t>(chunk_begin(count, P, cc + 1) - chunk_begin(count, P, cc)) * esz;
  };
  d.sync_work();  // the caller's inputs (the work stream waited for them)
  for (int s = 0; s < P - 1; ++s) {
    const int send_c = r - s, recv_c = r - s - 1;
    COLOSSAL_RETURN_IF_ERROR(d.step(*control_, ctx, next, base + offset(send_c), length(send_c),
                                    prev, base + offset(recv_c), length(recv_c),
                                    Impl::Land::kReduce, dtype, kop));
  }
  const int own = r + 1;
  if (op == ReduceOp::kAvg) {
    COLOSSAL_RETURN_IF_ERROR(
        d.divide(base + offset(own), static_cast<int64_t>(length(own) / esz), dtype, P));
    d.sync_work();
  }
  for (int s = 0; s < P - 1; ++s) {
    const int send_c = r + 1 - s, recv_c = r - s;
    COLOSSAL_RETURN_IF_ERROR(d.step(*control_, ctx, next, base + offset(send_c), length(send_c),
                                    prev, base + offset(recv_c), length(recv_c),
                                    Impl::Land::kCopy, dtype, kop));
  }
  d.sync_work();
  return absl::OkStatus();
}

absl::Status CudaIpcTransport::reduce_scatter(const OpContext& ctx, void* output,
                                              const void* input, int64_t count, DType dtype,
                                              ReduceOp op) {
  DeviceGuard guard(device_);
  Impl& d = *impl_;
  const int P = size_, r = rank_;
  const size_t esz = core::dtype_size(dtype);
  const size_t bytes = static_cast<size_t>(count) * esz;
  const char* in = static_cast<const char*>(input);
  if (P == 1 || bytes == 0) {
    if (P == 1) d.local_copy(output, input, bytes);
    d.sync_work();
    return absl::OkStatus();
  }
  const kr::ReduceOp kop = kernel_op(op);
  const int next = ring_mod(r + 1, P), prev = ring_mod(r - 1, P);
  COLOSSAL_ASSIGN_OR_RETURN(char* scratch, d.get_scratch(2 * bytes));
  char* partial[2] = {scratch, scratch + bytes};
  d.sync_work();
  for (int s = 0; s < P - 1; ++s) {
    const int send_c = ring_mod(r - s - 1, P), recv_c = ring_mod(r - s - 2, P);
    const char* src = s == 0 ? in + send_c * bytes : partial[(s - 1) % 2];
    char* acc = partial[s % 2];
    // acc = this rank's chunk, then the arriving partial is reduced into it
    // (the work stream orders the copy before the reductions).
    d.local_copy(acc, in + recv_c * bytes, bytes);
    COLOSSAL_RETURN_IF_ERROR(d.step(*control_, ctx, next, src, bytes, prev, acc, bytes,
                                    Impl::Land::kReduce, dtype, kop));
  }
  d.local_copy(output, partial[(P - 2) % 2], bytes);
  if (op == ReduceOp::kAvg) COLOSSAL_RETURN_IF_ERROR(d.divide(output, count, dtype, P));
  d.sync_work();
  return absl::OkStatus();
}

absl::Status CudaIpcTransport::all_gather(const OpContext& ctx, void* output, const void* input,
                                          size_t bytes) {
  DeviceGuard guard(device_);
  Impl& d = *impl_;
  const int P = size_, r = rank_;
  char* out = static_cast<char*>(output);
  d.local_copy(out + r * bytes, input, bytes);
  d.sync_work();
  if (P == 1 || bytes == 0) return absl::OkStatus();
  const int next = ring_mod(r + 1, P), prev = ring_mod(r - 1, P);
  for (int s = 0; s < P - 1; ++s) {
    const int send_c = ring_mod(r - s, P), recv_c = ring_mod(r - s - 1, P);
    COLOSSAL_RETURN_IF_ERROR(d.step(*control_, ctx, next, out + send_c * bytes, bytes, prev,
                                    out + recv_c * bytes, bytes, Impl::Land::kCopy, DType::kU8,
                                    kr::ReduceOp::kSum));
  }
  d.sync_work();
  return absl::OkStatus();
}

absl::Status CudaIpcTransport::broadcast(const OpContext& ctx, void* data, size_t bytes,
                                         int root) {
  DeviceGuard guard(device_);
  Impl& d = *impl_;
  const int P = size_, r = rank_;
  d.sync_work();
  if (P == 1 || bytes == 0) return absl::OkStatus();
  const int pos = ring_mod(r - root, P);
  const int next = ring_mod(r + 1, P), prev = ring_mod(r - 1, P);
  char* p = static_cast<char*>(data);
  // A chain from the root: receive everything, then pass it on.
  if (pos != 0) {
    COLOSSAL_RETURN_IF_ERROR(d.step(*control_, ctx, -1, nullptr, 0, prev, p, bytes,
                                    Impl::Land::kCopy, DType::kU8, kr::ReduceOp::kSum));
    d.sync_work();
  }
  if (pos != P - 1) {
    COLOSSAL_RETURN_IF_ERROR(d.step(*control_, ctx, next, p, bytes, -1, nullptr, 0,
                                    Impl::Land::kCopy, DType::kU8, kr::ReduceOp::kSum));
  }
  d.sync_work();
  return absl::OkStatus();
}

absl::Status CudaIpcTransport::all_to_all(const OpContext& ctx, void* output,
                                          absl::Span<const size_t> output_bytes,
                                          const void* input,
                                          absl::Span<const size_t> input_bytes) {
  DeviceGuard guard(device_);
  Impl& d = *impl_;
  const int P = size_, r = rank_;
  AllToAllOffsets off;
  COLOSSAL_RETURN_IF_ERROR(all_to_all_offsets(ctx, P, r, output_bytes, input_bytes, off));
  char* out = static_cast<char*>(output);
  const char* in = static_cast<const char*>(input);
  d.local_copy(out + off.out[r], in + off.in[r], input_bytes[r]);
  d.sync_work();
  for (int s = 1; s < P; ++s) {
    const int to = ring_mod(r + s, P), from = ring_mod(r - s, P);
    COLOSSAL_RETURN_IF_ERROR(d.step(*control_, ctx, to, in + off.in[to], input_bytes[to], from,
                                    out + off.out[from], output_bytes[from], Impl::Land::kCopy,
                                    DType::kU8, kr::ReduceOp::kSum));
  }
  d.sync_work();
  return absl::OkStatus();
}

#else  // !COLOSSAL_WITH_CUDA

bool cuda_ipc_transport_available() { return false; }

struct CudaIpcTransport::Impl {};

namespace {
absl::Status not_available() {
  return absl::UnimplementedError(
      "cuda_ipc transport: not available (this build has no CUDA: build with --//bazel:cuda=true)");
}
}  // namespace

CudaIpcTransport::CudaIpcTransport(int rank, int size, int device,
                                   std::unique_ptr<ShmTransport> control,
                                   std::unique_ptr<Impl> impl)
    : rank_(rank),
      size_(size),
      device_(device),
      control_(std::move(control)),
      impl_(std::move(impl)) {}

CudaIpcTransport::~CudaIpcTransport() = default;

absl::StatusOr<std::unique_ptr<CudaIpcTransport>> CudaIpcTransport::create(
    Store&, int, int, const CudaIpcTransportOptions&) {
  return not_available();
}

core::Stream CudaIpcTransport::stream() const { return core::Stream::cpu(); }

absl::Status CudaIpcTransport::all_reduce(const OpContext&, void*, int64_t, DType, ReduceOp) {
  return not_available();
}
absl::Status CudaIpcTransport::reduce_scatter(const OpContext&, void*, const void*, int64_t,
                                              DType, ReduceOp) {
  return not_available();
}
absl::Status CudaIpcTransport::all_gather(const OpContext&, void*, const void*, size_t) {
  return not_available();
}
absl::Status CudaIpcTransport::broadcast(const OpContext&, void*, size_t, int) {
  return not_available();
}
absl::Status CudaIpcTransport::all_to_all(const OpContext&, void*, absl::Span<const size_t>,
                                          const void*, absl::Span<const size_t>) {
  return not_available();
}

#endif  // COLOSSAL_WITH_CUDA

std::string CudaIpcTransport::describe_peer(int peer) const {
  return control_->describe_peer(peer);
}
absl::StatusOr<size_t> CudaIpcTransport::try_send(int peer, const void* data, size_t bytes) {
  return control_->try_send(peer, data, bytes);
}
absl::StatusOr<size_t> CudaIpcTransport::try_recv(int peer, void* data, size_t bytes) {
  return control_->try_recv(peer, data, bytes);
}
uint64_t CudaIpcTransport::progress_token() { return control_->progress_token(); }
absl::Status CudaIpcTransport::wait(absl::Span<const Interest> interests, uint64_t token,
                                    absl::Time until) {
  return control_->wait(interests, token, until);
}
void CudaIpcTransport::wake() { control_->wake(); }

}  // namespace colossal::comm::builtin
