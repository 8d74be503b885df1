// GEMM throughput in decimal TFLOP/s (2*m*n*k per GEMM; epilogue work not
// counted), the same cases as tools/bench/torch_gemm.py. Run:
//   bazel run -c opt //core/gemm:gemm_bench
//
// CUDA cases time batches of kReps back-to-back GEMMs between two CUDA events
// (so host overhead overlaps the GPU, as in a training step) and report the
// per-GEMM time as the iteration time. The untimed first call chooses the
// algorithm: autotuned by default; COLOSSAL_GEMM_AUTOTUNE=0 measures cuBLASLt's
// first heuristic choice instead, COLOSSAL_GEMM_AUTOTUNE=log also prints each
// tuning's candidates and times (see core/gemm/gemm.h). The label says which,
// and which library won ("autotuned cublas": cuBLAS's cublasGemmEx, the
// candidate torch.matmul's kernel comes from). Inputs are random (not zeros: constant
// data draws less power and runs faster than real data). Args: dtype mode
// (0 float32, 1 tf32, 2 bfloat16, 3 float16), m, n, k, trans_b, epilogue
// (0 none, 2 bias+GELU).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/gemm/gemm.h"
#include "kernels/common/half.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime_api.h>

#include "tests/util/cuda_bench_timer.h"
#endif

namespace colossal::core::gemm {
namespace {

constexpr DType kDtypes[] = {DType::kF32, DType::kF32, DType::kBF16, DType::kF16};
constexpr const char* kModeNames[] = {"float32", "tf32", "bfloat16", "float16"};
constexpr int kReps = 10;

// A host tensor of uniform values in [-1, 1) from a fast LCG.
Tensor random_host(const Shape& shape, DType dtype, uint64_t seed) {
  absl::StatusOr<Tensor> t = Tensor::empty(shape, dtype, Stream::cpu());
  COLOSSAL_CHECK_OK(t.status());
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t i = 0; i < t->numel(); ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const float v = static_cast<float>((x >> 40) * (1.0 / 8388608.0)) - 1.0f;
    switch (dtype) {
      case DType::kF32: t->data<float>()[i] = v; break;
      case DType::kBF16: t->data<kernels::BFloat16>()[i] = kernels::float_to_bfloat16(v); break;
      case DType::kF16: t->data<kernels::Half>()[i] = kernels::float_to_half(v); break;
      default: COLOSSAL_FATAL() << "benchmark dtype";
    }
  }
  return *t;
}

struct Problem {
  Tensor a, b, c, bias;
  GemmOptions options;
};

Problem make_problem(Context& ctx, const benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  const int64_t m = state.range(1), n = state.range(2), k = state.range(3);
  const bool trans_b = state.range(4) != 0;
  const DType dtype = kDtypes[mode];
  Problem p;
  auto on_device = [&](const Tensor& host) {
    absl::StatusOr<Tensor> t = host.to(ctx.device(), ctx.compute_stream());
    COLOSSAL_CHECK_OK(t.status());
    return *t;
  };
  p.a = on_device(random_host({m, k}, dtype, 1));
  p.b = on_device(random_host(trans_b ? Shape{n, k} : Shape{k, n}, dtype, 2));
  p.c = on_device(random_host({m, n}, dtype, 3));
  p.options.trans_b = trans_b;
  p.options.allow_tf32 = mode == 1;
  if (state.range(5) == 2) {
    p.bias = on_device(random_host({n}, dtype, 4));
    p.options.epilogue = Epilogue::kBiasGelu;
    p.options.bias = &p.bias;
  }
  ctx.synchronize();
  return p;
}

void set_counters(benchmark::State& state, const std::string& suffix = "") {
  const double flops = 2.0 * state.range(1) * state.range(2) * state.range(3);
  state.counters["TFLOP/s"] = benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(absl::StrCat(kModeNames[state.range(0)], " ", state.range(1), "x", state.range(2), "x",
                              state.range(3), state.range(4) ? " NT" : " NN",
                              state.range(5) == 2 ? " bias+gelu" : "", suffix));
}

void BM_GemmCpu(benchmark::State& state) {
  absl::StatusOr<std::unique_ptr<Context>> ctx = Context::create(Device::cpu());
  COLOSSAL_CHECK_OK(ctx.status());
  Problem p = make_problem(**ctx, state);
  for (auto _ : state) {
    const absl::Status s = gemm(**ctx, p.a, p.b, p.c, p.options);
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
  }
  set_counters(state);
}
BENCHMARK(BM_GemmCpu)
    ->ArgNames({"mode", "m", "n", "k", "trans_b", "epilogue"})
    ->Args({0, 512, 512, 512, 0, 0})
    ->Args({2, 512, 512, 512, 0, 0})
    ->Unit(benchmark::kMillisecond);

#if COLOSSAL_WITH_CUDA
void BM_GemmCuda(benchmark::State& state) {
  absl::StatusOr<std::unique_ptr<Context>> ctx = Context::create(Device::cuda(0));
  if (!ctx.ok()) {
    state.SkipWithError(ctx.status().ToString().c_str());
    return;
  }
  Context& c = **ctx;
  Problem p = make_problem(c, state);
  cudaStream_t stream = c.compute_stream().handle();
  testing::CudaBenchTimer timer(stream, /*calls=*/kReps);  // the time of one GEMM
  absl::Status status = gemm(c, p.a, p.b, p.c, p.options);  // warm-up: picks and caches the algorithm
  for (auto _ : state) {
    if (!status.ok()) break;
    const bool ok = timer.time(state, [&] {
      for (int r = 0; r < kReps && status.ok(); ++r) status = gemm(c, p.a, p.b, p.c, p.options);
    });
    if (!ok) break;
  }
  if (!status.ok()) state.SkipWithError(status.ToString().c_str());
  // How the algorithm was chosen (the context has just this one problem).
  std::string how = " (no algorithm)";
  for (const auto& [key, algo] : c.matmul_algo_cache().entries()) {
    how = absl::StrCat(algo.source == MatmulAlgoSource::kAutotuned ? " autotuned" : " heuristic",
                       algo.library == MatmulAlgoLibrary::kCublas ? " cublas" : " cublasLt");
  }
  set_counters(state, how);
}
BENCHMARK(BM_GemmCuda)
    ->ArgNames({"mode", "m", "n", "k", "trans_b", "epilogue"})
    ->Args({2, 8192, 8192, 8192, 0, 0})   // the target: bf16 8192^3
    ->Args({3, 8192, 8192, 8192, 0, 0})   // fp16 8192^3
    ->Args({0, 4096, 4096, 4096, 0, 0})   // fp32 4096^3
    ->Args({1, 4096, 4096, 4096, 0, 0})   // tf32 4096^3
    ->Args({2, 8192, 2304, 768, 1, 0})    // GPT-2 qkv: [B*T, 768] x W[2304, 768]^T
    ->Args({2, 8192, 768, 3072, 1, 0})    // GPT-2 mlp proj: [B*T, 3072] x W[768, 3072]^T
    ->Args({2, 8192, 3072, 768, 1, 2})    // GPT-2 mlp fc with bias + GELU epilogue
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
#endif

}  // namespace
}  // namespace colossal::core::gemm

BENCHMARK_MAIN();
