// colossal::comm::builtin — the CUDA IPC transport: GPUs of one host, one process per GPU.
//
// The builtin backend's transport for CUDA tensors. Each rank owns one device
// staging buffer on its GPU (three slots of `slot_bytes` for every peer that
// sends to it), exports it with cudaIpcGetMemHandle through the store, and
// maps every peer's buffer with cudaIpcOpenMemHandle. Data never touches the
// host: a sender copies a piece of its chunk straight into the receiver's
// slot (cudaMemcpyAsync between devices: the copy engines over NVLink/PCIe),
// and the receiver reduces the slot into its buffer with kernels/reduce's
// reduce_into_cuda (or copies it, for gathers) on its own stream.
//
// Small control messages ("piece i is in your slot", "I am done with slot
// i") travel over a shared-memory transport (shm_transport.h) through
// run_transfers (exchange.h), so every step has the operation's deadline,
// checked headers (ranks issuing different collectives or sizes get an error,
// not corrupt data), dead-peer detection and abort. Host byte streams (CPU
// tensors, barriers) are delegated to that same shm transport, so a group on
// this transport also takes host buffers.
//
// A step (send a chunk to one peer, receive one from another) moves it in
// pieces of at most `slot_bytes`, three slots per direction in rotation:
//   sender:   copy piece i into slot i%3 (launched while piece i-1 is being
//             announced) -> sync -> DATA(i); slot i%3 is reused for piece i+3
//             only after ACK(i)
//   receiver: DATA(i) -> reduce/copy slot i%3 into dst -> sync -> ACK(i)
// (the message protocol was checked with a model over 2-4 ranks and ragged
// sizes: no deadlock, no slot overwritten early, no message left over).
// The device algorithms (ring reduce-scatter / all-gather / all-reduce, chain
// broadcast, pairwise all-to-all) are those of ring.h, with this step in place
// of run_transfers and device memory in place of host memory.
//
//   CudaIpcTransportOptions o;  o.device = local_rank;
//   COLOSSAL_ASSIGN_OR_RETURN(auto t, CudaIpcTransport::create(store, rank, size, o));
//   COLOSSAL_RETURN_IF_ERROR(t->all_reduce(ctx, d_grads, n, DType::kBF16, ReduceOp::kSum));
//
// Errors at create(): a build without CUDA ("cuda_ipc transport: not
// available"), no such device, peers on another host (hostnames differ, or
// LOCAL_WORLD_SIZE != WORLD_SIZE for the world group), CUDA IPC refused.
// Device collectives take pointers on device(); they return once the result
// is complete on the device (the host waited for the transport's streams).
#ifndef COLOSSAL_COMM_BUILTIN_CUDA_IPC_TRANSPORT_H_
#define COLOSSAL_COMM_BUILTIN_CUDA_IPC_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "comm/builtin/exchange.h"
#include "comm/builtin/shm_transport.h"
#include "comm/builtin/transport.h"
#include "comm/process_group/types.h"
#include "comm/store/store.h"
#include "core/device/stream.h"

namespace colossal::comm::builtin {

struct CudaIpcTransportOptions {
  // CUDA ordinal of this rank's GPU; -1: LOCAL_RANK from the environment
  // when set, else the rank modulo the number of devices.
  int device = -1;
  // Bytes of each staging slot (three per sending peer); 0 picks 8 MiB.
  // Rounded up to a multiple of 256.
  size_t slot_bytes = 0;
  // The control channel (and host byte streams).
  ShmTransportOptions shm;
};

// Whether this build has the CUDA path (false: create() always fails).
bool cuda_ipc_transport_available();

class CudaIpcTransport : public Transport {
 public:
  // Collective over the `size` ranks using `store` (keys "cuda_ipc/..." and
  // the shm transport's): every rank of the group calls it.
  static absl::StatusOr<std::unique_ptr<CudaIpcTransport>> create(
      Store& store, int rank, int size, const CudaIpcTransportOptions& options);
  ~CudaIpcTransport() override;

  // Transport: host byte streams over the shared-memory control transport.
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* kind() const override { return "cuda_ipc"; }
  std::string describe_peer(int peer) const override;
  absl::StatusOr<size_t> try_send(int peer, const void* data, size_t bytes) override;
  absl::StatusOr<size_t> try_recv(int peer, void* data, size_t bytes) override;
  uint64_t progress_token() override;
  absl::Status wait(absl::Span<const Interest> interests, uint64_t token,
                    absl::Time until) override;
  void wake() override;

  // This rank's CUDA device ordinal.
  int device() const { return device_; }
  // The stream the device collectives run on; callers make it wait for the
  // producer of their inputs (an event) before calling them.
  core::Stream stream() const;

  // Device collectives (pointers on device()); the semantics of ring.h's.
  absl::Status all_reduce(const OpContext& ctx, void* data, int64_t count, DType dtype,
                          ReduceOp op);
  absl::Status reduce_scatter(const OpContext& ctx, void* output, const void* input,
                              int64_t count, DType dtype, ReduceOp op);
  absl::Status all_gather(const OpContext& ctx, void* output, const void* input, size_t bytes);
  absl::Status broadcast(const OpContext& ctx, void* data, size_t bytes, int root);
  absl::Status all_to_all(const OpContext& ctx, void* output,
                          absl::Span<const size_t> output_bytes, const void* input,
                          absl::Span<const size_t> input_bytes);

  struct Impl;  // CUDA state (cuda_ipc_transport.cc)

 private:
  CudaIpcTransport(int rank, int size, int device, std::unique_ptr<ShmTransport> control,
                   std::unique_ptr<Impl> impl);

  const int rank_;
  const int size_;
  const int device_;
  std::unique_ptr<ShmTransport> control_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace colossal::comm::builtin

#endif  // COLOSSAL_COMM_BUILTIN_CUDA_IPC_TRANSPORT_H_
