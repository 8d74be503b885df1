// Launch plan of the CUDA cross-entropy kernels (private to kernels/loss):
// threads per row and how much of a row the fused kernel keeps in shared
// memory. Plain host arithmetic, shared by loss.cu and loss_bench.cc so the
// benchmark counts the bytes the kernel really moves.
#ifndef COLOSSAL_KERNELS_LOSS_LOSS_PLAN_H_
#define COLOSSAL_KERNELS_LOSS_LOSS_PLAN_H_

#include <algorithm>
#include <cstdint>

namespace colossal::kernels::loss::internal {

// Largest CTA (the kernels are compiled with __launch_bounds__ of this).
inline constexpr int kMaxThreads = 512;
// 16-byte vectors each thread loads before using any (memory-level parallelism).
inline constexpr int kUnroll = 4;

// Threads for one row of `len` elements read `vec` at a time: about four
// vectors per thread, a multiple of a warp, from 32 to kMaxThreads. Short rows
// (V = 3, 17) get one warp instead of a mostly idle CTA.
inline int row_threads(int64_t len, int vec) {
  const int64_t vectors = (len + vec - 1) / vec;
  const int64_t threads = ((vectors + 3) / 4 + 31) / 32 * 32;
  return static_cast<int>(std::clamp<int64_t>(threads, 32, kMaxThreads));
}

// Vectors of `vector_bytes` in the aligned body of a row of `len` elements
// (at most; the exact count depends on the row's alignment).
inline int64_t row_vectors(int64_t len, int vector_bytes, int element_bytes) {
  return len / (vector_bytes / element_bytes);
}

// Vectors of each row the fused kernel caches in shared memory between its
// two passes: the whole body when it fits in one CTA's opt-in shared memory
// (`smem_optin` minus `static_smem`), else as much as fits (the rest is read
// again from global memory, usually an L2 hit: it was read a moment before).
inline int64_t fused_cache_vectors(int64_t len, int vector_bytes, int element_bytes,
                                   int64_t smem_optin, int64_t static_smem) {
  const int64_t body = row_vectors(len, vector_bytes, element_bytes);
  const int64_t fits = std::max<int64_t>(0, (smem_optin - static_smem) / vector_bytes);
  return std::min(body, fits);
}

}  // namespace colossal::kernels::loss::internal

#endif  // COLOSSAL_KERNELS_LOSS_LOSS_PLAN_H_
