// colossal::parallel — CPU offload of one rank's ZeRO slice (Colossal-AI's
// LowLevelZeroPlugin(cpu_offload=True)): the float32 master weights and Adam
// moments of the slice live in pinned host memory and CPU Adam
// (kernels/adam adam_step_cpu, AVX-512/AVX2 + OpenMP) updates them, so the GPU
// holds none of the optimizer's 12 bytes per parameter of its slice.
//
// One step, pipelined in chunks of `chunk` elements over the slice:
//   1. for every chunk, enqueue on `stream` the device-to-host copy of its
//      gradients (the gradient dtype: 16-bit gradients cross PCIe in 16 bits)
//      — and, for float32 models, of its weights, which are the masters — and
//      record the chunk's event;
//   2. for every chunk in order, the host waits for its event, runs CPU Adam
//      on the pieces in it, and enqueues the host-to-device copy of the new
//      weights (16-bit: the masters rounded to nearest even by the Adam kernel)
//      into `out` on `stream`.
// So CPU Adam of chunk c overlaps the download of later chunks and the upload
// of earlier ones. The host returns when the last chunk's update is enqueued;
// `out` is ready for work enqueued on `stream` after step().
//
// Masters: float32 models read theirs from the weights each step (the weights
// are the masters; weights loaded after boost take effect). 16-bit models keep
// the host master between steps, made at create() by widening the weights
// exactly; elements of the slice no piece covers (alignment gaps between
// parameters) keep the weights' values.
//
//   COLOSSAL_ASSIGN_OR_RETURN(auto off, ZeroOffload::create(weights_slice, stream, 0));
//   std::vector<ZeroOffload::Piece> pieces = {{0, n, adam_options}};
//   COLOSSAL_RETURN_IF_ERROR(off->step(grad_slice, pieces, weights_slice, out));
#ifndef COLOSSAL_PARALLEL_ZERO_ZERO_OFFLOAD_H_
#define COLOSSAL_PARALLEL_ZERO_ZERO_OFFLOAD_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/stream.h"
#include "core/tensor/tensor.h"
#include "kernels/adam/adam.h"

namespace colossal::parallel {

class ZeroOffload {
 public:
  // A run of the slice [at, at + count) updated with one group's options.
  struct Piece {
    int64_t at = 0;
    int64_t count = 0;
    kernels::adam::AdamOptions options;
  };

  // `weights`: this rank's slice of the model's flat values, a 1-D CUDA
  // tensor (float32, bfloat16 or float16) on `stream`'s device. cpu_threads:
  // CPU Adam's OpenMP threads (0: OpenMP's default). chunk: elements per
  // pipeline stage (> 0). Waits for the initial copy. Errors: a non-CUDA or
  // unsupported tensor, a bad chunk, no pinned memory (out of host memory).
  static absl::StatusOr<std::unique_ptr<ZeroOffload>> create(const core::Tensor& weights,
                                                             const core::Stream& stream,
                                                             int cpu_threads,
                                                             int64_t chunk = int64_t{1} << 22);
  ~ZeroOffload();

  // One Adam step of the slice (see the file comment). grad: the slice's
  // gradients, and weights, out: device tensors of the weights' dtype and
  // length (out may be weights itself). pieces: ordered by `at`, within the
  // slice, not overlapping. Errors: mismatched tensors, a piece outside the
  // slice, CPU Adam's argument errors (the options), a failed copy.
  absl::Status step(const core::Tensor& grad, const std::vector<Piece>& pieces,
                    const core::Tensor& weights, const core::Tensor& out);

  // The slice's float32 master weights and moments in pinned host memory.
  // Written only by step(), or by a caller loading a checkpoint between
  // steps (after synchronising the stream).
  const core::Tensor& master() const { return master_; }
  const core::Tensor& exp_avg() const { return exp_avg_; }
  const core::Tensor& exp_avg_sq() const { return exp_avg_sq_; }
  int64_t size() const { return n_; }

 private:
  ZeroOffload() = default;

  int64_t n_ = 0;
  int64_t chunk_ = 0;
  core::DType dtype_ = core::DType::kF32;
  core::Stream stream_;
  kernels::adam::AdamCpuOptions cpu_;
  core::Tensor master_, exp_avg_, exp_avg_sq_;  // pinned float32 [n]
  core::Tensor grad_;   // pinned dtype [n]: the downloaded gradients
  core::Tensor copy_;   // pinned dtype [n] (16-bit): the rounded masters to upload
  std::vector<core::Event> ready_;  // per chunk: its download has landed
};

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_ZERO_ZERO_OFFLOAD_H_
