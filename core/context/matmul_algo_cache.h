// colossal::core — a cache of cuBLASLt matmul algorithms (or "use cuBLAS"), keyed by problem.
//
// Choosing a cuBLASLt algorithm (cublasLtMatmulAlgoGetHeuristic) costs tens of
// microseconds; a training step runs the same few GEMM shapes thousands of
// times. core/gemm asks this cache first and stores its choice in it (the
// heuristic's first, or the fastest of its top candidates when autotuning, see
// ContextOptions::gemm_autotune; autotuning also times cuBLAS's cublasGemmEx and
// may record it as the winner). Each Context owns one (Context::matmul_algo_cache()). Keys and values are
// plain data, so this header needs no CUDA headers: MatmulAlgo holds the bytes
// of a cublasLtMatmulAlgo_t (an opaque struct of eight uint64_t).
//
//   MatmulAlgoKey key;
//   key.m = 8192; key.n = 2304; key.k = 768; ...
//   if (std::optional<MatmulAlgo> hit = cache.find(key)) { ... use *hit ... }
//   else { MatmulAlgo chosen = ...; cache.insert(key, chosen); }
#ifndef COLOSSAL_CORE_CONTEXT_MATMUL_ALGO_CACHE_H_
#define COLOSSAL_CORE_CONTEXT_MATMUL_ALGO_CACHE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace colossal::core {

// Everything cuBLASLt's choice depends on, in cuBLASLt's own (column-major)
// terms; enum fields hold the numeric values of cudaDataType_t,
// cublasComputeType_t, cublasOperation_t and cublasLtEpilogue_t. Alignments are
// the largest power of two (<= 256 bytes) dividing each pointer, since an
// algorithm chosen for aligned pointers may not run on misaligned ones.
struct MatmulAlgoKey {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  int32_t a_type = 0, b_type = 0, c_type = 0, compute_type = 0, scale_type = 0;
  int32_t op_a = 0, op_b = 0, epilogue = 0;
  int32_t align_a = 0, align_b = 0, align_c = 0, align_bias = 0, align_aux = 0;
  int64_t aux_ld = 0;
  // The alignment of a separate addend C is read from (D = ... + beta C, D
  // elsewhere: cuBLAS, which works in place, cannot run it); 0 without one.
  int32_t align_addend = 0;

  friend bool operator==(const MatmulAlgoKey& a, const MatmulAlgoKey& b) = default;

  template <typename H>
  friend H AbslHashValue(H h, const MatmulAlgoKey& k) {
    return H::combine(std::move(h), k.m, k.n, k.k, k.batch, k.lda, k.ldb, k.ldc, k.stride_a,
                      k.stride_b, k.stride_c, k.a_type, k.b_type, k.c_type, k.compute_type,
                      k.scale_type, k.op_a, k.op_b, k.epilogue, k.align_a, k.align_b, k.align_c,
                      k.align_bias, k.align_aux, k.aux_ld, k.align_addend);
  }
};

// How a cached algorithm was chosen.
enum class MatmulAlgoSource : int32_t {
  // cuBLASLt's first heuristic choice, final: autotuning was off, or had
  // nothing to compare (one candidate), or could not run (no memory for its
  // scratch output).
  kHeuristic = 0,
  // The fastest of the timed candidates.
  kAutotuned = 1,
  // cuBLASLt's first heuristic choice, taken while the stream was being
  // captured into a CUDA graph (nothing may be timed then); the next call
  // outside a capture autotunes and replaces it.
  kProvisional = 2,
};

// Which library runs a cached problem.
enum class MatmulAlgoLibrary : int32_t {
  // cublasLtMatmul with the algorithm in MatmulAlgo::data.
  kCublasLt = 0,
  // cublasGemmEx / cublasGemmStridedBatchedEx (CUBLAS_GEMM_DEFAULT, cuBLAS's own
  // heuristic, as torch.matmul calls it); MatmulAlgo::data is unused. Only for
  // problems without an epilogue; chosen only by autotuning.
  kCublas = 1,
};

// "cublasLt" or "cublas".
const char* matmul_algo_library_name(MatmulAlgoLibrary library);

// A chosen algorithm: the library, and for cuBLASLt the bytes of a
// cublasLtMatmulAlgo_t and the workspace it needs.
struct MatmulAlgo {
  std::array<uint64_t, 8> data{};
  size_t workspace_bytes = 0;
  MatmulAlgoSource source = MatmulAlgoSource::kHeuristic;
  MatmulAlgoLibrary library = MatmulAlgoLibrary::kCublasLt;
};

// Thread-safe map from MatmulAlgoKey to MatmulAlgo.
class MatmulAlgoCache {
 public:
  std::optional<MatmulAlgo> find(const MatmulAlgoKey& key) const;
  // Stores `algo` for `key`, replacing any earlier entry.
  void insert(const MatmulAlgoKey& key, const MatmulAlgo& algo);
  size_t size() const;
  void clear();
  // A copy of every entry, in no particular order (for tests and diagnostics).
  std::vector<std::pair<MatmulAlgoKey, MatmulAlgo>> entries() const;

 private:
  mutable std::mutex mu_;
  absl::flat_hash_map<MatmulAlgoKey, MatmulAlgo> map_;
};

}  // namespace colossal::core

#endif  // COLOSSAL_CORE_CONTEXT_MATMUL_ALGO_CACHE_H_
