// The CUDA backend: one cublasLtMatmul (or cublasGemmEx) per call, with the
// algorithm from the context's cache. On a miss: cuBLASLt's first heuristic
// choice, or (autotuning, the default) the fastest of its top candidates and,
// for problems without an epilogue, cuBLAS's cublasGemmEx (what torch.matmul
// calls; its own heuristic picks other kernels), timed on the compute stream.
// See gemm.h for how the row-major problem maps onto cuBLASLt's column-major one;
// cuBLAS gets the same mapping.
#include "bazel/cuda_config.h"

#if COLOSSAL_WITH_CUDA

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/gemm/gemm_internal.h"
#include "core/status/check.h"
#include "core/status/cublas_check.h"
#include "core/status/cuda_check.h"

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

// The problem in cuBLASLt's column-major terms: D (n x m) = opA'(B) (n x k) * opB'(A) (k x m).
struct LtShape {
  cublasOperation_t op_a, op_b;  // op_a applies to our B, op_b to our A
  int64_t a_rows, a_cols;        // our B as stored
  int64_t b_rows, b_cols;        // our A as stored
  cublasLtEpilogue_t epilogue;
  int64_t aux_ld;
};

LtShape lt_shape(const GemmProblem& p) {
  LtShape s;
  s.op_a = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  s.op_b = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  s.a_rows = p.trans_b ? p.k : p.n;
  s.a_cols = p.trans_b ? p.n : p.k;
  s.b_rows = p.trans_a ? p.m : p.k;
  s.b_cols = p.trans_a ? p.k : p.m;
  s.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (p.epilogue == Epilogue::kBias) s.epilogue = CUBLASLT_EPILOGUE_BIAS;
  if (p.epilogue == Epilogue::kBiasGelu) {
    s.epilogue = p.gelu_input ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
  }
  if (p.epilogue == Epilogue::kDGelu) s.epilogue = CUBLASLT_EPILOGUE_DGELU;
  s.aux_ld = p.gelu_input ? p.n : 0;
  return s;
}

std::string describe_problem(const GemmProblem& p) {
  return absl::StrCat(dtype_name(p.dtype), p.allow_tf32 ? " (tf32)" : "", " m=", p.m, " n=", p.n,
                      " k=", p.k, " batch=", p.batch, " trans_a=", p.trans_a,
                      " trans_b=", p.trans_b, " epilogue=", epilogue_name(p.epilogue),
                      p.gelu_input ? " with gelu_input" : "", p.addend ? " with addend" : "");
}

// "algo 66 tile 20 stages 10 splitk 1 reduction 0 swizzle 0": the candidate's
// cuBLASLt configuration attributes (numeric enum values; -1 when unreadable).
std::string describe_algo(const cublasLtMatmulAlgo_t& algo) {
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr) -> int64_t {
    uint32_t v = 0;  // every attribute read here is a 32-bit integer
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written) !=
        CUBLAS_STATUS_SUCCESS) {
      return -1;
    }
    return v;
  };
  return absl::StrCat("algo ", get(CUBLASLT_ALGO_CONFIG_ID), " tile ",
                      get(CUBLASLT_ALGO_CONFIG_TILE_ID), " stages ",
                      get(CUBLASLT_ALGO_CONFIG_STAGES_ID), " splitk ",
                      get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM), " reduction ",
                      get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), " swizzle ",
                      get(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING));
}

// Whether work enqueued on `stream` now would be captured into a CUDA graph.
bool is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;  // active, or invalidated
}

// While alive, this thread may make calls that CUDA forbids during another
// thread's global-mode stream capture (event synchronisation, allocation):
// autotuning touches only our own stream, which is not being captured.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode_)); }
  ~RelaxedCaptureMode() { CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode_)); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// Everything one cublasLtMatmul call needs but the algorithm and the output.
struct MatmulCall {
  cublasLtHandle_t handle;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t layout_a, layout_b, layout_c;
  const void* alpha;
  const void* beta;
  const void* a;  // cuBLASLt's A: our B
  const void* b;  // cuBLASLt's B: our A
  const void* c;
  void* workspace;
  size_t workspace_bytes;
  cudaStream_t stream;

  cublasStatus_t run(const cublasLtMatmulAlgo_t& algo, void* d) const {
    return cublasLtMatmul(handle, desc, alpha, a, layout_a, b, layout_b, beta, c, layout_c, d,
                          layout_c, &algo, workspace, workspace_bytes, stream);
  }
};

// Everything one cublasGemmEx / cublasGemmStridedBatchedEx call needs but the
// output, which is also its C (cuBLAS computes in place).
struct CublasCall {
  Context* ctx;
  CublasArgs args;
  const void* alpha;
  const void* beta;
  const void* a;  // cuBLAS's A: our B
  const void* b;  // cuBLAS's B: our A
  cudaStream_t stream;

  cublasStatus_t run(void* d) const {
    cublasHandle_t handle = ctx->cublas_handle();
    // The handle is shared: its stream and workspace are set under the
    // context's lock, workspace after stream (cublasSetStream resets it).
    std::lock_guard<std::mutex> lock(ctx->cublas_mutex());
    cublasStatus_t status = cublasSetStream(handle, stream);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    status = cublasSetWorkspace(handle, ctx->cublaslt_workspace(), ctx->cublaslt_workspace_bytes());
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    const auto op_a = static_cast<cublasOperation_t>(args.op_a);
    const auto op_b = static_cast<cublasOperation_t>(args.op_b);
    const auto type = static_cast<cudaDataType_t>(args.data_type);
    const auto compute = static_cast<cublasComputeType_t>(args.compute_type);
    const int m = static_cast<int>(args.m), n = static_cast<int>(args.n);
    const int k = static_cast<int>(args.k);
    const int lda = static_cast<int>(args.lda), ldb = static_cast<int>(args.ldb);
    const int ldc = static_cast<int>(args.ldc);
    if (args.batch > 1) {
      return cublasGemmStridedBatchedEx(handle, op_a, op_b, m, n, k, alpha, a, type, lda,
                                        args.stride_a, b, type, ldb, args.stride_b, beta, d, type,
                                        ldc, args.stride_c, static_cast<int>(args.batch), compute,
                                        CUBLAS_GEMM_DEFAULT);
    }
    return cublasGemmEx(handle, op_a, op_b, m, n, k, alpha, a, type, lda, b, type, ldb, beta, d,
                        type, ldc, compute, CUBLAS_GEMM_DEFAULT);
  }
};

// One autotuning candidate: a cuBLASLt algorithm, or cuBLAS.
struct Candidate {
  MatmulAlgoLibrary library = MatmulAlgoLibrary::kCublasLt;
  cublasLtMatmulAlgo_t algo{};  // cuBLASLt only
  size_t workspace_bytes = 0;   // cuBLASLt only
};

// Problems at least this large (2*m*n*k*batch flops, e.g. GPT-2's LM head or
// 8192^3) also time variants of the heuristic's first algorithm (below).
constexpr double kVariantMinFlops = 1e11;

// Variants of `base` with the tile, cluster shape and custom option changed:
// on an H100, a sweep of cuBLASLt's whole configuration space for bf16 8192^3
// (core/gemm/gemm_algo_sweep.cc) found its fastest kernels among these, 5-7%
// ahead of the heuristic's first choice, which never returns some of them
// (192x128). Only those cublasLtMatmulAlgoCheck accepts within the workspace
// and that differ from `have` are added.
void add_config_variants(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                         cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                         cublasLtMatrixLayout_t c, size_t workspace_limit,
                         std::vector<Candidate>& have) {
  const cublasLtMatmulAlgo_t base = have.front().algo;
  int32_t custom_max = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max,
                                        sizeof(custom_max), &written) != CUBLAS_STATUS_SUCCESS) {
    return;
  }
  const uint32_t tiles[] = {CUBLASLT_MATMUL_TILE_128x256, CUBLASLT_MATMUL_TILE_256x128,
                            CUBLASLT_MATMUL_TILE_192x128};
  const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_1x2x1, CUBLASLT_CLUSTER_SHAPE_2x1x1};
  for (uint32_t tile : tiles) {
    for (uint16_t cluster : clusters) {
      for (uint32_t custom = 4; custom <= 7 && static_cast<int32_t>(custom) <= custom_max;
           ++custom) {
        Candidate v;
        v.algo = base;
        if (cublasLtMatmulAlgoConfigSetAttribute(&v.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                                 sizeof(tile)) != CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulAlgoConfigSetAttribute(&v.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
                                                 &cluster, sizeof(cluster)) !=
                CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulAlgoConfigSetAttribute(&v.algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
                                                 &custom, sizeof(custom)) != CUBLAS_STATUS_SUCCESS) {
          continue;
        }
        cublasLtMatmulHeuristicResult_t check{};
        if (cublasLtMatmulAlgoCheck(handle, desc, a, b, c, c, &v.algo, &check) !=
                CUBLAS_STATUS_SUCCESS ||
            check.state != CUBLAS_STATUS_SUCCESS || check.workspaceSize > workspace_limit) {
          continue;
        }
        v.workspace_bytes = check.workspaceSize;
        const bool seen = std::any_of(have.begin(), have.end(), [&](const Candidate& h) {
          return h.library == MatmulAlgoLibrary::kCublasLt &&
                 std::memcmp(&h.algo, &v.algo, sizeof(v.algo)) == 0;
        });
        if (!seen) have.push_back(v);
      }
    }
  }
}

// Runs a candidate writing `d` (cuBLAS reads C from `d` too).
cublasStatus_t run_candidate(const Candidate& candidate, const MatmulCall& lt, const CublasCall& blas,
                             void* d) {
  if (candidate.library == MatmulAlgoLibrary::kCublas) return blas.run(d);
  return lt.run(candidate.algo, d);
}

// Times each candidate on call.stream and returns the index of the fastest, or
// -1 when none could be timed (then `why` says why). `times_ms` receives each
// candidate's time per call (-1: it failed to launch). With beta != 0 the
// candidates write a scratch output and C is only read (cuBLAS, which reads C
// from its output, gets a copy of C in the scratch); with beta == 0 they write
// C (and gelu_input), which the final call overwrites.
int time_candidates(Context& ctx, const GemmProblem& p, const MatmulCall& call,
                    const CublasCall& blas, const std::vector<Candidate>& candidates,
                    std::vector<float>& times_ms, std::string& why) {
  const int count = static_cast<int>(candidates.size());
  times_ms.assign(count, -1.0f);
  RelaxedCaptureMode relaxed;
  std::shared_ptr<Storage> scratch;
  void* d = p.c;
  if (p.beta != 0.0 && p.addend == nullptr) {  // C is read in place: keep it
    const size_t bytes = static_cast<size_t>(p.batch * p.m * p.n) * dtype_size(p.dtype);
    absl::StatusOr<std::shared_ptr<Storage>> s =
        Storage::allocate(ctx.allocator(), bytes, ctx.compute_stream());
    if (!s.ok()) {
      why = absl::StrCat("no memory for the scratch output (", s.status().message(), ")");
      return -1;
    }
    scratch = *std::move(s);
    d = scratch->data();
    CUDA_CHECK(cudaMemcpyAsync(d, p.c, bytes, cudaMemcpyDeviceToDevice, call.stream));
  }
  std::vector<bool> ok(count, true);
  for (int i = 0; i < count; ++i) {
    for (int w = 0; w < kAutotuneWarmups && ok[i]; ++w) {
      ok[i] = run_candidate(candidates[i], call, blas, d) == CUBLAS_STATUS_SUCCESS;
    }
  }
  // One event before the first block and one after each (round, candidate) block.
  std::vector<cudaEvent_t> events(kAutotuneRounds * count + 1, nullptr);
  for (cudaEvent_t& e : events) CUDA_CHECK(cudaEventCreate(&e));
  CUDA_CHECK(cudaEventRecord(events[0], call.stream));
  for (int r = 0; r < kAutotuneRounds; ++r) {
    for (int i = 0; i < count; ++i) {
      for (int rep = 0; rep < kAutotuneReps && ok[i]; ++rep) {
        ok[i] = run_candidate(candidates[i], call, blas, d) == CUBLAS_STATUS_SUCCESS;
      }
      CUDA_CHECK(cudaEventRecord(events[r * count + i + 1], call.stream));
    }
  }
  CUDA_CHECK(cudaEventSynchronize(events.back()));
  for (int r = 0; r < kAutotuneRounds; ++r) {
    for (int i = 0; i < count; ++i) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, events[r * count + i], events[r * count + i + 1]));
      const float per_call = ms / kAutotuneReps;
      if (ok[i] && (times_ms[i] < 0 || per_call < times_ms[i])) times_ms[i] = per_call;
    }
  }
  for (int i = 0; i < count; ++i) {
    if (!ok[i]) times_ms[i] = -1.0f;
  }
  for (cudaEvent_t e : events) CUDA_CHECK(cudaEventDestroy(e));
  scratch.reset();  // returned on the compute stream, after the timed calls
  const int best = fastest_candidate(times_ms.data(), count);
  if (best < 0) why = "no candidate ran";
  return best;
}

MatmulAlgo to_matmul_algo(const Candidate& candidate, MatmulAlgoSource source) {
  MatmulAlgo chosen;
  chosen.library = candidate.library;
  if (candidate.library == MatmulAlgoLibrary::kCublasLt) {
    std::memcpy(chosen.data.data(), &candidate.algo, sizeof(candidate.algo));
    chosen.workspace_bytes = candidate.workspace_bytes;
  }
  chosen.source = source;
  return chosen;
}

// The log line's name of a candidate.
std::string describe_candidate(const Candidate& candidate, const GemmProblem& p,
                               size_t cublas_workspace_bytes) {
  if (candidate.library == MatmulAlgoLibrary::kCublas) {
    return absl::StrCat("cuBLAS ", p.batch > 1 ? "cublasGemmStridedBatchedEx" : "cublasGemmEx",
                        " CUBLAS_GEMM_DEFAULT workspace ", cublas_workspace_bytes);
  }
  return absl::StrCat("cuBLASLt ", describe_algo(candidate.algo), " workspace ",
                      candidate.workspace_bytes);
}

}  // namespace

MatmulAlgoKey matmul_algo_key(const GemmProblem& p) {
  const CudaTypes types = cuda_types(p.dtype, p.allow_tf32);
  const LtShape s = lt_shape(p);
  MatmulAlgoKey key;
  key.m = p.n;
  key.n = p.m;
  key.k = p.k;
  key.batch = p.batch;
  key.lda = s.a_rows;
  key.ldb = s.b_rows;
  key.ldc = p.n;
  key.stride_a = p.batch > 1 ? p.k * p.n : 0;
  key.stride_b = p.batch > 1 ? p.m * p.k : 0;
  key.stride_c = p.batch > 1 ? p.m * p.n : 0;
  key.a_type = key.b_type = key.c_type = types.data;
  key.compute_type = types.compute;
  key.scale_type = types.scale;
  key.op_a = s.op_a;
  key.op_b = s.op_b;
  key.epilogue = s.epilogue;
  key.align_a = alignment(p.b);
  key.align_b = alignment(p.a);
  key.align_c = alignment(p.c);
  key.align_bias = p.bias ? alignment(p.bias) : 0;
  key.align_aux = p.gelu_input ? alignment(p.gelu_input) : 0;
  key.aux_ld = s.aux_ld;
  key.align_addend = p.addend ? alignment(p.addend) : 0;
  return key;
}

CublasArgs cublas_args(const GemmProblem& p) {
  const CudaTypes types = cuda_types(p.dtype, p.allow_tf32);
  const LtShape s = lt_shape(p);
  CublasArgs args;
  args.op_a = s.op_a;
  args.op_b = s.op_b;
  args.m = p.n;
  args.n = p.m;
  args.k = p.k;
  args.batch = p.batch;
  args.lda = std::max<int64_t>(s.a_rows, 1);
  args.ldb = std::max<int64_t>(s.b_rows, 1);
  args.ldc = std::max<int64_t>(p.n, 1);
  args.stride_a = p.batch > 1 ? p.k * p.n : 0;
  args.stride_b = p.batch > 1 ? p.m * p.k : 0;
  args.stride_c = p.batch > 1 ? p.m * p.n : 0;
  args.data_type = types.data;
  args.compute_type = types.compute;
  args.scale_type = types.scale;
  return args;
}

absl::Status run_cuda(Context& ctx, const GemmProblem& p) {
  COLOSSAL_CHECK(ctx.cublaslt_handle() != nullptr) << "a CUDA context without a cuBLASLt handle";
  const CudaTypes types = cuda_types(p.dtype, p.allow_tf32);
  cublasLtHandle_t handle = ctx.cublaslt_handle();
  DeviceGuard guard(ctx.device());
  const LtShape s = lt_shape(p);

  cublasLtMatmulDesc_t desc_raw = nullptr;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_raw, types.compute, types.scale));
  MatmulDesc desc(desc_raw);
  set(desc_raw, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(s.op_a));
  set(desc_raw, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(s.op_b));
  if (s.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    set(desc_raw, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(s.epilogue));
  }
  if (p.bias) {
    set(desc_raw, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);  // shared by the batch (stride 0)
  }
  if (p.gelu_input) {
    set(desc_raw, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.gelu_input);
    set(desc_raw, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, s.aux_ld);
    set(desc_raw, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, p.m * p.n);
  }
  Layout layout_a = make_layout(types.data, s.a_rows, s.a_cols, p.batch);
  Layout layout_b = make_layout(types.data, s.b_rows, s.b_cols, p.batch);
  Layout layout_c = make_layout(types.data, p.n, p.m, p.batch);

  const float alpha_f = static_cast<float>(p.alpha), beta_f = static_cast<float>(p.beta);
  const double alpha_d = p.alpha, beta_d = p.beta;
  const bool f64 = types.scale == CUDA_R_64F;
  const Stream& stream = ctx.compute_stream();
  MatmulCall call;
  call.handle = handle;
  call.desc = desc_raw;
  call.layout_a = layout_a.get();
  call.layout_b = layout_b.get();
  call.layout_c = layout_c.get();
  call.alpha = f64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  call.beta = f64 ? static_cast<const void*>(&beta_d) : &beta_f;
  call.a = p.b;
  call.b = p.a;
  call.c = p.addend != nullptr ? p.addend : p.c;
  call.workspace = ctx.cublaslt_workspace();
  call.workspace_bytes = ctx.cublaslt_workspace_bytes();
  call.stream = stream.handle();

  CublasCall blas;
  blas.ctx = &ctx;
  blas.args = cublas_args(p);
  blas.alpha = call.alpha;
  blas.beta = call.beta;
  blas.a = p.b;
  blas.b = p.a;
  blas.stream = call.stream;

  const MatmulAlgoKey key = matmul_algo_key(p);
  MatmulAlgoCache& cache = ctx.matmul_algo_cache();
  std::optional<MatmulAlgo> algo = cache.find(key);
  const GemmAutotune autotune = p.varying_size ? GemmAutotune::kOff : ctx.gemm_autotune();
  const CudaLibraryChoice library = cuda_library_for_testing();
  const bool cublas_ok = ctx.cublas_handle() != nullptr && cublas_can_run(p);
  const bool may_tune = autotune != GemmAutotune::kOff &&
                        (!algo.has_value() || algo->source == MatmulAlgoSource::kProvisional);
  const AlgoAction action =
      choose_algo_action(algo, autotune, may_tune && is_capturing(stream.handle()));
  if (action != AlgoAction::kUseCached && action != AlgoAction::kProvisional &&
      library == CudaLibraryChoice::kCublas && cublas_ok) {
    // Tests only: cuBLAS, untimed.
    Candidate forced;
    forced.library = MatmulAlgoLibrary::kCublas;
    const MatmulAlgo chosen = to_matmul_algo(forced, MatmulAlgoSource::kHeuristic);
    cache.insert(key, chosen);
    algo = chosen;
  } else if (action != AlgoAction::kUseCached) {
    cublasLtMatmulPreference_t pref_raw = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_raw));
    Preference pref(pref_raw);
    set(pref_raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
        static_cast<uint64_t>(ctx.cublaslt_workspace_bytes()));
    set(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(key.align_a));
    set(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(key.align_b));
    set(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
        static_cast<uint32_t>(p.addend != nullptr ? key.align_addend : key.align_c));
    set(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(key.align_c));
    const int wanted = action == AlgoAction::kAutotune ? kAutotuneCandidates : 1;
    std::vector<cublasLtMatmulHeuristicResult_t> results(wanted);
    std::memset(results.data(), 0, results.size() * sizeof(results[0]));
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle, desc_raw, layout_a.get(), layout_b.get(), layout_c.get(), layout_c.get(), pref_raw,
        wanted, results.data(), &found);
    // Keep the usable ones, in cuBLASLt's order (best first).
    std::vector<Candidate> candidates;
    for (int i = 0; status == CUBLAS_STATUS_SUCCESS && i < found; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
      Candidate c;
      c.algo = results[i].algo;
      c.workspace_bytes = results[i].workspaceSize;
      candidates.push_back(c);
    }
    if (candidates.empty()) {
      return absl::UnimplementedError(absl::StrCat("gemm: cuBLASLt has no algorithm for ",
                                                   describe_problem(p), " (",
                                                   cublasGetStatusString(status), ")"));
    }
    MatmulAlgo chosen = to_matmul_algo(candidates[0], action == AlgoAction::kProvisional
                                                          ? MatmulAlgoSource::kProvisional
                                                          : MatmulAlgoSource::kHeuristic);
    if (action == AlgoAction::kAutotune && library == CudaLibraryChoice::kAuto &&
        2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k) *
                static_cast<double>(std::max<int64_t>(p.batch, 1)) >=
            kVariantMinFlops) {
      add_config_variants(handle, desc_raw, layout_a.get(), layout_b.get(), layout_c.get(),
                          ctx.cublaslt_workspace_bytes(), candidates);
    }
    // cuBLAS last: the heuristic's order still breaks ties.
    if (action == AlgoAction::kAutotune && cublas_ok && library == CudaLibraryChoice::kAuto) {
      Candidate c;
      c.library = MatmulAlgoLibrary::kCublas;
      candidates.push_back(c);
    }
    if (action == AlgoAction::kAutotune && candidates.size() > 1) {
      std::vector<float> times_ms;
      std::string why;
      const int best = time_candidates(ctx, p, call, blas, candidates, times_ms, why);
      if (best >= 0) chosen = to_matmul_algo(candidates[best], MatmulAlgoSource::kAutotuned);
      if (autotune == GemmAutotune::kLog) {
        std::string lines = absl::StrCat("colossal gemm autotune: ", describe_problem(p), " beta=",
                                         p.beta, ": ");
        if (best < 0) absl::StrAppend(&lines, "not timed, ", why, "; using candidate 0");
        absl::StrAppend(&lines, "\n");
        for (size_t i = 0; i < times_ms.size(); ++i) {
          absl::StrAppend(&lines, static_cast<int>(i) == best ? "  * " : "    ", i, " ",
                          describe_candidate(candidates[i], p, ctx.cublaslt_workspace_bytes()),
                          ": ",
                          times_ms[i] < 0 ? std::string("failed")
                                          : absl::StrCat(times_ms[i] * 1e3f, " us"),
                          "\n");
        }
        std::fputs(lines.c_str(), stderr);
      }
    }  // one candidate: nothing to compare, so chosen stays a final kHeuristic
    cache.insert(key, chosen);
    algo = chosen;
  }
  if (algo->library == MatmulAlgoLibrary::kCublas) {
    COLOSSAL_CHECK(ctx.cublas_handle() != nullptr) << "a CUDA context without a cuBLAS handle";
    CUBLAS_CHECK(blas.run(p.c));
    return absl::OkStatus();
  }
  cublasLtMatmulAlgo_t lt_algo;
  std::memcpy(&lt_algo, algo->data.data(), sizeof(lt_algo));
  CUBLAS_CHECK(call.run(lt_algo, p.c));
  return absl::OkStatus();
}

}  // namespace colossal::core::gemm::internal

#endif  // COLOSSAL_WITH_CUDA
