// The CUDA backend: one cublasLtMatmul per call, with the algorithm from the
// context's cache. On a miss: cuBLASLt's first heuristic choice, or (autotuning,
// the default) the fastest of its top candidates timed on the compute stream.
// See gemm.h for how the row-major problem maps onto cuBLASLt's column-major one.
#include "bazel/cuda_config.h"

#if COLOSSAL_WITH_CUDA

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
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
  s.aux_ld = p.gelu_input ? p.n : 0;
  return s;
}

std::string describe_problem(const GemmProblem& p) {
  return absl::StrCat(dtype_name(p.dtype), p.allow_tf32 ? " (tf32)" : "", " m=", p.m, " n=", p.n,
                      " k=", p.k, " batch=", p.batch, " trans_a=", p.trans_a,
                      " trans_b=", p.trans_b, " epilogue=", epilogue_name(p.epilogue),
                      p.gelu_input ? " with gelu_input" : "");
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

// Times each candidate on call.stream and returns the index of the fastest, or
// -1 when none could be timed (then `why` says why). `times_ms` receives each
// candidate's time per call (-1: it failed to launch). With beta != 0 the
// candidates write a scratch output and C is only read; with beta == 0 they
// write C (and gelu_input), which the final call overwrites.
int time_candidates(Context& ctx, const GemmProblem& p, const MatmulCall& call,
                    const std::vector<cublasLtMatmulAlgo_t>& candidates,
                    std::vector<float>& times_ms, std::string& why) {
  const int count = static_cast<int>(candidates.size());
  times_ms.assign(count, -1.0f);
  RelaxedCaptureMode relaxed;
  std::shared_ptr<Storage> scratch;
  void* d = p.c;
  if (p.beta != 0.0) {
    const size_t bytes = static_cast<size_t>(p.batch * p.m * p.n) * dtype_size(p.dtype);
    absl::StatusOr<std::shared_ptr<Storage>> s =
        Storage::allocate(ctx.allocator(), bytes, ctx.compute_stream());
    if (!s.ok()) {
      why = absl::StrCat("no memory for the scratch output (", s.status().message(), ")");
      return -1;
    }
    scratch = *std::move(s);
    d = scratch->data();
  }
  std::vector<bool> ok(count, true);
  for (int i = 0; i < count; ++i) {
    for (int w = 0; w < kAutotuneWarmups && ok[i]; ++w) {
      ok[i] = call.run(candidates[i], d) == CUBLAS_STATUS_SUCCESS;
    }
  }
  // One event before the first block and one after each (round, candidate) block.
  std::vector<cudaEvent_t> events(kAutotuneRounds * count + 1, nullptr);
  for (cudaEvent_t& e : events) CUDA_CHECK(cudaEventCreate(&e));
  CUDA_CHECK(cudaEventRecord(events[0], call.stream));
  for (int r = 0; r < kAutotuneRounds; ++r) {
    for (int i = 0; i < count; ++i) {
      for (int rep = 0; rep < kAutotuneReps && ok[i]; ++rep) {
        ok[i] = call.run(candidates[i], d) == CUBLAS_STATUS_SUCCESS;
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

MatmulAlgo to_matmul_algo(const cublasLtMatmulHeuristicResult_t& result, MatmulAlgoSource source) {
  MatmulAlgo chosen;
  std::memcpy(chosen.data.data(), &result.algo, sizeof(result.algo));
  chosen.workspace_bytes = result.workspaceSize;
  chosen.source = source;
  return chosen;
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
  return key;
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
  call.c = p.c;
  call.workspace = ctx.cublaslt_workspace();
  call.workspace_bytes = ctx.cublaslt_workspace_bytes();
  call.stream = stream.handle();

  const MatmulAlgoKey key = matmul_algo_key(p);
  MatmulAlgoCache& cache = ctx.matmul_algo_cache();
  std::optional<MatmulAlgo> algo = cache.find(key);
  const GemmAutotune autotune = ctx.gemm_autotune();
  const bool may_tune = autotune != GemmAutotune::kOff &&
                        (!algo.has_value() || algo->source == MatmulAlgoSource::kProvisional);
  const AlgoAction action =
      choose_algo_action(algo, autotune, may_tune && is_capturing(stream.handle()));
  if (action != AlgoAction::kUseCached) {
    cublasLtMatmulPreference_t pref_raw = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_raw));
    Preference pref(pref_raw);
    set(pref_raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
        static_cast<uint64_t>(ctx.cublaslt_workspace_bytes()));
    set(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(key.align_a));
    set(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(key.align_b));
    set(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(key.align_c));
    set(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(key.align_c));
    const int wanted = action == AlgoAction::kAutotune ? kAutotuneCandidates : 1;
    std::vector<cublasLtMatmulHeuristicResult_t> results(wanted);
    std::memset(results.data(), 0, results.size() * sizeof(results[0]));
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle, desc_raw, layout_a.get(), layout_b.get(), layout_c.get(), layout_c.get(), pref_raw,
        wanted, results.data(), &found);
    // Keep the usable ones, in cuBLASLt's order (best first).
    std::vector<cublasLtMatmulHeuristicResult_t> usable;
    for (int i = 0; status == CUBLAS_STATUS_SUCCESS && i < found; ++i) {
      if (results[i].state == CUBLAS_STATUS_SUCCESS) usable.push_back(results[i]);
    }
    if (usable.empty()) {
      return absl::UnimplementedError(absl::StrCat("gemm: cuBLASLt has no algorithm for ",
                                                   describe_problem(p), " (",
                                                   cublasGetStatusString(status), ")"));
    }
    MatmulAlgo chosen = to_matmul_algo(usable[0], action == AlgoAction::kProvisional
                                                      ? MatmulAlgoSource::kProvisional
                                                      : MatmulAlgoSource::kHeuristic);
    if (action == AlgoAction::kAutotune && usable.size() > 1) {
      std::vector<cublasLtMatmulAlgo_t> candidates;
      for (const auto& r : usable) candidates.push_back(r.algo);
      std::vector<float> times_ms;
      std::string why;
      const int best = time_candidates(ctx, p, call, candidates, times_ms, why);
      if (best >= 0) chosen = to_matmul_algo(usable[best], MatmulAlgoSource::kAutotuned);
      if (autotune == GemmAutotune::kLog) {
        std::string lines = absl::StrCat("colossal gemm autotune: ", describe_problem(p), " beta=",
                                         p.beta, ": ");
        if (best < 0) absl::StrAppend(&lines, "not timed, ", why, "; using candidate 0");
        absl::StrAppend(&lines, "\n");
        for (size_t i = 0; i < times_ms.size(); ++i) {
          absl::StrAppend(&lines, static_cast<int>(i) == best ? "  * " : "    ", i, " ",
                          describe_algo(candidates[i]), " workspace ",
                          usable[i].workspaceSize, ": ",
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
  cublasLtMatmulAlgo_t lt_algo;
  std::memcpy(&lt_algo, algo->data.data(), sizeof(lt_algo));
  CUBLAS_CHECK(call.run(lt_algo, p.c));
  return absl::OkStatus();
}

}  // namespace colossal::core::gemm::internal

#endif  // COLOSSAL_WITH_CUDA
