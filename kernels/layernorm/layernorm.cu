// CUDA LayerNorm / RMSNorm: launch configuration and entry points. The kernels
// are in layernorm_kernels.cuh.
//
// Design (memory-bound: the goal is one pass over HBM at copy bandwidth):
//   * Forward reads each row once into registers (packed, as loaded) and makes
//     two passes over the registers: the mean, then the centred sum of squares
//     (numerically stable, no second read of memory). Rows of up to 256 packs
//     (bf16 C <= 2048, fp32 C <= 1024) use one warp per row, 4 rows per block,
//     reductions by warp shuffles only; longer rows (up to 4096 packs: bf16
//     C <= 32768, fp32 C <= 16384) use one block per row of <= 256 threads
//     (512 for the longest), reductions through shared memory. Longer still:
//     a looped kernel that re-reads the row from global memory (L2). With
//     <= 4 packs per thread, gamma/beta are loaded with the row, not after
//     the statistics (one dependent memory round trip fewer).
//   * A pack is 16 bytes (8 bf16/fp16, 4 fp32) when C is a multiple of that
//     and every buffer is 16-byte aligned; else one element (odd C such as 77,
//     or offset pointers), with the same kernels.
//   * Backward launches a fixed number of blocks P = min(rows, 256): block b
//     owns a contiguous range of rows, and each thread keeps the running
//     dgamma/dbeta sums of its own columns in registers across those rows.
//     Warp-per-row up to 128 packs (8 warps per block), block-per-row up to
//     2048 packs, looped beyond; the next row's x and dout are loaded while
//     the current row is processed (where registers allow: up to 24 elements
//     per thread). Registers are capped at 128 so that 2 blocks share an SM
//     and the P blocks run in one wave. Each block writes one float32 partial
//     row to scratch; a second kernel adds the P partials per column in a
//     fixed order and adds that to dgamma/dbeta: deterministic, no float
//     atomics.
//   * All math in float32; every reduction has a fixed order, so results are
//     reproducible run to run.
#include <cstdint>
#include <initializer_list>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/layernorm/layernorm.h"
#include "kernels/layernorm/layernorm_internal.h"
#include "kernels/layernorm/layernorm_kernels.cuh"

namespace colossal::kernels::layernorm {
namespace {

using device::BackwardParams;
using device::ForwardParams;

// Grid-stride loops cover rows beyond the largest grid.
constexpr int64_t kMaxGrid = 0x7fffffff;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up_warp(int64_t n) { return ceil_div(n, device::kWarp) * device::kWarp; }
unsigned grid_of(int64_t blocks) {
  return static_cast<unsigned>(blocks < kMaxGrid ? blocks : kMaxGrid);
}

bool aligned16(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// One-row-per-block thread count for kItems packs per thread.
int64_t row_threads(int64_t nvec, int items) { return round_up_warp(ceil_div(nvec, items)); }

template <typename T, bool kRms, bool kResidual, int kVec>
KernelStatus launch_forward_packs(const ForwardParams<T>& p, cudaStream_t stream) {
  const int64_t nvec = p.C / kVec;
  if (nvec <= device::kWarp * 8) {
    const unsigned grid = grid_of(ceil_div(p.rows, device::kFwdWarpBlock / device::kWarp));
    auto launch = [&](auto kernel) { kernel<<<grid, device::kFwdWarpBlock, 0, stream>>>(p); };
    if (nvec <= device::kWarp) {
      launch(device::forward_kernel<T, kRms, kResidual, kVec, 1, true>);
    } else if (nvec <= device::kWarp * 2) {
      launch(device::forward_kernel<T, kRms, kResidual, kVec, 2, true>);
    } else if (nvec <= device::kWarp * 4) {
      launch(device::forward_kernel<T, kRms, kResidual, kVec, 4, true>);
    } else {
      launch(device::forward_kernel<T, kRms, kResidual, kVec, 8, true>);
    }
  } else if (nvec <= device::kMaxRowBlock * 8) {
    const unsigned grid = grid_of(p.rows);
    auto launch = [&](auto kernel, int64_t threads) {
      kernel<<<grid, static_cast<unsigned>(threads), 0, stream>>>(p);
    };
    // Fewest packs per thread that keep the block at <= 256 threads; the
    // longest rows take 8 packs and up to 512 threads.
    if (row_threads(nvec, 2) <= 256) {
      launch(device::forward_kernel<T, kRms, kResidual, kVec, 2, false>, row_threads(nvec, 2));
    } else if (row_threads(nvec, 4) <= 256) {
      launch(device::forward_kernel<T, kRms, kResidual, kVec, 4, false>, row_threads(nvec, 4));
    } else {
      launch(device::forward_kernel<T, kRms, kResidual, kVec, 8, false>, row_threads(nvec, 8));
    }
  } else {
    device::forward_loop_kernel<T, kRms, kResidual>
        <<<grid_of(p.rows), device::kLoopBlock, 0, stream>>>(p);
  }
  return cuda::last_launch_status();
}

template <typename T, bool kRms, bool kResidual>
KernelStatus launch_forward(const ForwardParams<T>& p, cudaStream_t stream) {
  constexpr int kWide = 16 / sizeof(T);
  if (p.C % kWide == 0 && aligned16({p.out, p.x, p.gamma, p.beta, p.residual, p.residual_out})) {
    return launch_forward_packs<T, kRms, kResidual, kWide>(p, stream);
  }
  return launch_forward_packs<T, kRms, kResidual, 1>(p, stream);
}

template <typename T, bool kRms, int kVec>
KernelStatus launch_backward_packs(const BackwardParams<T>& p, int64_t partials,
                                   cudaStream_t stream) {
  const int64_t nvec = p.C / kVec;
  const unsigned grid = static_cast<unsigned>(partials);
  if (nvec <= device::kWarp * 4) {
    constexpr int kB = device::kBwdWarpBlock;
    auto launch = [&](auto kernel) { kernel<<<grid, kB, 0, stream>>>(p); };
    if (nvec <= device::kWarp) {
      launch(device::backward_kernel<T, kRms, kVec, 1, true, kB>);
    } else if (nvec <= device::kWarp * 2) {
      launch(device::backward_kernel<T, kRms, kVec, 2, true, kB>);
    } else if (nvec <= device::kWarp * 3) {
      launch(device::backward_kernel<T, kRms, kVec, 3, true, kB>);
    } else {
      launch(device::backward_kernel<T, kRms, kVec, 4, true, kB>);
    }
  } else if (nvec <= device::kMaxRowBlock * 4) {
    auto launch = [&](auto kernel, int64_t threads) {
      kernel<<<grid, static_cast<unsigned>(threads), 0, stream>>>(p);
    };
    // Fewest packs per thread that keep the block at <= 256 threads; 4 packs
    // (up to 512 threads) beyond. The 512-thread bound caps registers at 128,
    // so two 256-thread blocks still share an SM and P blocks run in one wave.
    if (row_threads(nvec, 1) <= 256) {
      launch(device::backward_kernel<T, kRms, kVec, 1, false, 256>, row_threads(nvec, 1));
    } else if (row_threads(nvec, 2) <= 256) {
      launch(device::backward_kernel<T, kRms, kVec, 2, false, 256>, row_threads(nvec, 2));
    } else {
      launch(device::backward_kernel<T, kRms, kVec, 4, false, device::kMaxRowBlock>,
             row_threads(nvec, 4));
    }
  } else {
    device::backward_loop_kernel<T, kRms><<<grid, device::kLoopBlock, 0, stream>>>(p);
  }
  return cuda::last_launch_status();
}

template <typename T, bool kRms>
KernelStatus launch_backward(const BackwardParams<T>& p, T* dgamma, T* dbeta, cudaStream_t stream) {
  const int64_t partials = internal::backward_partials(p.rows);
  constexpr int kWide = 16 / sizeof(T);
  KernelStatus s;
  if (p.C % kWide == 0 && aligned16({p.dx, p.dout, p.x, p.gamma, p.addend})) {
    s = launch_backward_packs<T, kRms, kWide>(p, partials, stream);
  } else {
    s = launch_backward_packs<T, kRms, 1>(p, partials, stream);
  }
  if (!s.ok()) return s;
  device::finalize_kernel<T><<<grid_of(ceil_div(p.C, device::kFinalizeCols)),
                               device::kFinalizeCols * device::kFinalizeSlices, 0, stream>>>(
      dgamma, dbeta, p.scratch, partials, p.C);
  return cuda::last_launch_status();
}

KernelStatus check_forward(int64_t rows, int64_t C, DType dtype, const ForwardOptions& options,
                           bool* nothing) {
  KernelStatus s = internal::check_common(rows, C, dtype, /*cuda=*/true, nothing);
  if (!s.ok() || *nothing) return s;
  return internal::check_eps(options);
}

KernelStatus check_backward(int64_t rows, int64_t C, DType dtype, const void* scratch,
                            size_t scratch_bytes, int stats, bool* nothing) {
  KernelStatus s = internal::check_common(rows, C, dtype, /*cuda=*/true, nothing);
  if (!s.ok() || *nothing) return s;
  if (ceil_div(C, device::kFinalizeCols) > kMaxGrid) {
    return KernelStatus::invalid_argument("layernorm backward: C too large");
  }
  if (scratch == nullptr || scratch_bytes < internal::backward_scratch_bytes(rows, C, stats)) {
    return KernelStatus::invalid_argument(
        "layernorm backward: scratch smaller than *_backward_scratch_bytes(rows, C)");
  }
  if (reinterpret_cast<uintptr_t>(scratch) % alignof(float) != 0) {
    return KernelStatus::invalid_argument("layernorm backward: scratch not 4-byte aligned");
  }
  return KernelStatus();
}

}  // namespace

KernelStatus layernorm_forward_cuda(void* out, float* mean, float* rstd, const void* x,
                                    const void* gamma, const void* beta, int64_t rows, int64_t C,
                                    DType dtype, ForwardOptions options, cudaStream_t stream) {
  bool nothing = false;
  KernelStatus s = check_forward(rows, C, dtype, options, &nothing);
  if (!s.ok() || nothing) return s;
  if (!internal::all_set({out, x, gamma, beta})) {
    return KernelStatus::invalid_argument("layernorm_forward_cuda: null buffer");
  }
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    const ForwardParams<T> p{.out = static_cast<T*>(out),
                             .mean = mean,
                             .rstd = rstd,
                             .x = static_cast<const T*>(x),
                             .gamma = static_cast<const T*>(gamma),
                             .beta = static_cast<const T*>(beta),
                             .rows = rows,
                             .C = C,
                             .eps = options.eps};
    return launch_forward<T, false, false>(p, stream);
  });
}

KernelStatus rmsnorm_forward_cuda(void* out, float* rstd, const void* x, const void* gamma,
                                  int64_t rows, int64_t C, DType dtype, ForwardOptions options,
                                  cudaStream_t stream) {
  bool nothing = false;
  KernelStatus s = check_forward(rows, C, dtype, options, &nothing);
  if (!s.ok() || nothing) return s;
  if (!internal::all_set({out, x, gamma})) {
    return KernelStatus::invalid_argument("rmsnorm_forward_cuda: null buffer");
  }
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    const ForwardParams<T> p{.out = static_cast<T*>(out),
                             .rstd = rstd,
                             .x = static_cast<const T*>(x),
                             .gamma = static_cast<const T*>(gamma),
                             .rows = rows,
                             .C = C,
                             .eps = options.eps};
    return launch_forward<T, true, false>(p, stream);
  });
}

KernelStatus fused_residual_layernorm_forward_cuda(void* residual_out, void* out, float* mean,
                                                   float* rstd, const void* x, const void* residual,
                                                   const void* gamma, const void* beta,
                                                   int64_t rows, int64_t C, DType dtype,
                                                   ForwardOptions options, cudaStream_t stream) {
  bool nothing = false;
  KernelStatus s = check_forward(rows, C, dtype, options, &nothing);
  if (!s.ok() || nothing) return s;
  if (!internal::all_set({residual_out, out, x, residual, gamma, beta})) {
    return KernelStatus::invalid_argument("fused_residual_layernorm_forward_cuda: null buffer");
  }
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    const ForwardParams<T> p{.out = static_cast<T*>(out),
                             .mean = mean,
                             .rstd = rstd,
                             .residual_out = static_cast<T*>(residual_out),
                             .x = static_cast<const T*>(x),
                             .residual = static_cast<const T*>(residual),
                             .gamma = static_cast<const T*>(gamma),
                             .beta = static_cast<const T*>(beta),
                             .rows = rows,
                             .C = C,
                             .eps = options.eps};
    return launch_forward<T, false, true>(p, stream);
  });
}

KernelStatus fused_residual_rmsnorm_forward_cuda(void* residual_out, void* out, float* rstd,
                                                 const void* x, const void* residual,
                                                 const void* gamma, int64_t rows, int64_t C,
                                                 DType dtype, ForwardOptions options,
                                                 cudaStream_t stream) {
  bool nothing = false;
  KernelStatus s = check_forward(rows, C, dtype, options, &nothing);
  if (!s.ok() || nothing) return s;
  if (!internal::all_set({residual_out, out, x, residual, gamma})) {
    return KernelStatus::invalid_argument("fused_residual_rmsnorm_forward_cuda: null buffer");
  }
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    const ForwardParams<T> p{.out = static_cast<T*>(out),
                             .rstd = rstd,
                             .residual_out = static_cast<T*>(residual_out),
                             .x = static_cast<const T*>(x),
                             .residual = static_cast<const T*>(residual),
                             .gamma = static_cast<const T*>(gamma),
                             .rows = rows,
                             .C = C,
                             .eps = options.eps};
    return launch_forward<T, true, true>(p, stream);
  });
}

KernelStatus layernorm_backward_cuda(void* dx, void* dgamma, void* dbeta, const void* dout,
                                     const void* x, const float* mean, const float* rstd,
                                     const void* gamma, void* scratch, size_t scratch_bytes,
                                     int64_t rows, int64_t C, DType dtype, BackwardOptions options,
                                     cudaStream_t stream) {
  bool nothing = false;
  KernelStatus s = check_backward(rows, C, dtype, scratch, scratch_bytes, 2, &nothing);
  if (!s.ok() || nothing) return s;
  if (!internal::all_set({dx, dgamma, dbeta, dout, x, mean, rstd, gamma})) {
    return KernelStatus::invalid_argument("layernorm_backward_cuda: null buffer");
  }
  const void* addend = nullptr;
  if (s = internal::dx_addend(dx, options, &addend); !s.ok()) return s;
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    const BackwardParams<T> p{.dx = static_cast<T*>(dx),
                              .dout = static_cast<const T*>(dout),
                              .x = static_cast<const T*>(x),
                              .mean = mean,
                              .rstd = rstd,
                              .gamma = static_cast<const T*>(gamma),
                              .scratch = static_cast<float*>(scratch),
                              .rows = rows,
                              .C = C,
                              .addend = static_cast<const T*>(addend)};
    return launch_backward<T, false>(p, static_cast<T*>(dgamma), static_cast<T*>(dbeta), stream);
  });
}

KernelStatus rmsnorm_backward_cuda(void* dx, void* dgamma, const void* dout, const void* x,
                                   const float* rstd, const void* gamma, void* scratch,
                                   size_t scratch_bytes, int64_t rows, int64_t C, DType dtype,
                                   BackwardOptions options, cudaStream_t stream) {
  bool nothing = false;
  KernelStatus s = check_backward(rows, C, dtype, scratch, scratch_bytes, 1, &nothing);
  if (!s.ok() || nothing) return s;
  if (!internal::all_set({dx, dgamma, dout, x, rstd, gamma})) {
    return KernelStatus::invalid_argument("rmsnorm_backward_cuda: null buffer");
  }
  const void* addend = nullptr;
  if (s = internal::dx_addend(dx, options, &addend); !s.ok()) return s;
  return cuda::dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    const BackwardParams<T> p{.dx = static_cast<T*>(dx),
                              .dout = static_cast<const T*>(dout),
                              .x = static_cast<const T*>(x),
                              .rstd = rstd,
                              .gamma = static_cast<const T*>(gamma),
                              .scratch = static_cast<float*>(scratch),
                              .rows = rows,
                              .C = C,
                              .addend = static_cast<const T*>(addend)};
    return launch_backward<T, true>(p, static_cast<T*>(dgamma), nullptr, stream);
  });
}

}  // namespace colossal::kernels::layernorm
