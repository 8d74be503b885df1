// The CUDA backend: one cublasLtMatmul per call, with the algorithm from the
// context's cache (or cuBLASLt's heuristic on a miss). See gemm.h for how the
// row-major problem maps onto cuBLASLt's column-major one.
#include "bazel/cuda_config.h"

#if COLOSSAL_WITH_CUDA

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "core/gemm/gemm_internal.h"
#include "core/status/check.h"
#include "core/status/cublas_check.h"

namespace colossal::core::gemm::internal {
namespace {

static_assert(sizeof(cublasLtMatmulAlgo_t) == sizeof(MatmulAlgo::data),
              "MatmulAlgo must hold a cublasLtMatmulAlgo_t");

struct CudaTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
  cudaDataType_t scale;
};

CudaTypes cuda_types(DType dtype, bool allow_tf32) {
  switch (dtype) {
    case DType::kF32:
      return {CUDA_R_32F, allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
              CUDA_R_32F};
    case DType::kF16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::kBF16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::kF64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F};
    default: break;
  }
  COLOSSAL_FATAL() << "gemm validated an unsupported dtype " << dtype_name(dtype);
}

// The largest power of two, at most 256, that divides the address.
uint32_t alignment(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

// RAII for cuBLASLt descriptors.
struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { CUBLAS_CHECK(cublasLtMatmulDescDestroy(d)); }
  void operator()(cublasLtMatrixLayoutOpaque_t* d) const {
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(d));
  }
  void operator()(cublasLtMatmulPreferenceOpaque_t* d) const {
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(d));
  }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, DescDeleter>;

template <typename T>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

template <typename T>
void set(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr, const T& value) {
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, attr, &value, sizeof(value)));
}

template <typename T>
void set(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

// A column-major `rows` x `cols` matrix with leading dimension `rows`,
// `batch` of them `rows * cols` apart.
Layout make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t batch) {
  cublasLtMatrixLayout_t layout = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows),
                                          static_cast<uint64_t>(cols), rows));
  Layout owned(layout);
  if (batch > 1) {
    set(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(batch));
    set(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, rows * cols);
  }
  return owned;
}

}  // namespace

absl::Status run_cuda(Context& ctx, const GemmProblem& p) {
  COLOSSAL_CHECK(ctx.cublaslt_handle() != nullptr) << "a CUDA context without a cuBLASLt handle";
  const CudaTypes types = cuda_types(p.dtype, p.allow_tf32);
  cublasLtHandle_t handle = ctx.cublaslt_handle();
  DeviceGuard guard(ctx.device());

  // Column-major view: D (n x m) = opA'(B) (n x k) * opB'(A) (k x m).
  const cublasOperation_t op_a = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // applies to our B
  const cublasOperation_t op_b = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // applies to our A
  const int64_t a_rows = p.trans_b ? p.k : p.n, a_cols = p.trans_b ? p.n : p.k;  // our B as stored
  const int64_t b_rows = p.trans_a ? p.m : p.k, b_cols = p.trans_a ? p.k : p.m;  // our A as stored
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (p.epilogue == Epilogue::kBias) epilogue = CUBLASLT_EPILOGUE_BIAS;
  if (p.epilogue == Epilogue::kBiasGelu) {
    epilogue = p.gelu_input ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
  }

  cublasLtMatmulDesc_t desc_raw = nullptr;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_raw, types.compute, types.scale));
  MatmulDesc desc(desc_raw);
  set(desc_raw, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(op_a));
  set(desc_raw, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(op_b));
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    set(desc_raw, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(epilogue));
    set(desc_raw, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);  // shared by the batch (stride 0)
  }
  const int64_t aux_ld = p.gelu_input ? p.n : 0;
  if (p.gelu_input) {
    set(desc_raw, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.gelu_input);
    set(desc_raw, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld);
    set(desc_raw, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, p.m * p.n);
  }
  Layout layout_a = make_layout(types.data, a_rows, a_cols, p.batch);
  Layout layout_b = make_layout(types.data, b_rows, b_cols, p.batch);
  Layout layout_c = make_layout(types.data, p.n, p.m, p.batch);

  MatmulAlgoKey key;
  key.m = p.n;
  key.n = p.m;
  key.k = p.k;
  key.batch = p.batch;
  key.lda = a_rows;
  key.ldb = b_rows;
  key.ldc = p.n;
  key.stride_a = p.batch > 1 ? p.k * p.n : 0;
  key.stride_b = p.batch > 1 ? p.m * p.k : 0;
  key.stride_c = p.batch > 1 ? p.m * p.n : 0;
  key.a_type = key.b_type = key.c_type = types.data;
  key.compute_type = types.compute;
  key.scale_type = types.scale;
  key.op_a = op_a;
  key.op_b = op_b;
  key.epilogue = epilogue;
  key.align_a = alignment(p.b);
  key.align_b = alignment(p.a);
  key.align_c = alignment(p.c);
  key.align_bias = p.bias ? alignment(p.bias) : 0;
  key.align_aux = p.gelu_input ? alignment(p.gelu_input) : 0;
  key.aux_ld = aux_ld;

  MatmulAlgoCache& cache = ctx.matmul_algo_cache();
  std::optional<MatmulAlgo> algo = cache.find(key);
  if (!algo) {
    cublasLtMatmulPreference_t pref_raw = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_raw));
    Preference pref(pref_raw);
    set(pref_raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
        static_cast<uint64_t>(ctx.cublaslt_workspace_bytes()));
    set(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(key.align_a));
    set(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(key.align_b));
    set(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(key.align_c));
    set(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(key.align_c));
    cublasLtMatmulHeuristicResult_t result;
    std::memset(&result, 0, sizeof(result));
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle, desc_raw, layout_a.get(), layout_b.get(), layout_c.get(), layout_c.get(), pref_raw,
        1, &result, &found);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
      return absl::UnimplementedError(absl::StrCat(
          "gemm: cuBLASLt has no algorithm for ", dtype_name(p.dtype), p.allow_tf32 ? " (tf32)" : "",
          " m=", p.m, " n=", p.n, " k=", p.k, " batch=", p.batch, " trans_a=", p.trans_a,
          " trans_b=", p.trans_b, " epilogue=", epilogue_name(p.epilogue),
          p.gelu_input ? " with gelu_input" : "", " (", cublasGetStatusString(status), ")"));
    }
    MatmulAlgo chosen;
    std::memcpy(chosen.data.data(), &result.algo, sizeof(result.algo));
    chosen.workspace_bytes = result.workspaceSize;
    cache.insert(key, chosen);
    algo = chosen;
  }
  cublasLtMatmulAlgo_t lt_algo;
  std::memcpy(&lt_algo, algo->data.data(), sizeof(lt_algo));

  const float alpha_f = static_cast<float>(p.alpha), beta_f = static_cast<float>(p.beta);
  const double alpha_d = p.alpha, beta_d = p.beta;
  const bool f64 = types.scale == CUDA_R_64F;
  const Stream& stream = ctx.compute_stream();
  CUBLAS_CHECK(cublasLtMatmul(handle, desc_raw, f64 ? static_cast<const void*>(&alpha_d) : &alpha_f,
                              p.b, layout_a.get(), p.a, layout_b.get(),
                              f64 ? static_cast<const void*>(&beta_d) : &beta_f, p.c, layout_c.get(),
                              p.c, layout_c.get(), &lt_algo, ctx.cublaslt_workspace(),
                              ctx.cublaslt_workspace_bytes(), stream.handle()));
  return absl::OkStatus();
}

}  // namespace colossal::core::gemm::internal

#endif  // COLOSSAL_WITH_CUDA
