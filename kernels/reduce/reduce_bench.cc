// Bandwidth of reduce_into in decimal GB/s: bytes moved = 3 * n * element size
// (read dst, read src, write dst), as tools/bench/torch_reduce.py counts them. Run: bazel run -c opt //kernels/reduce:reduce_bench
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "kernels/common/half.h"
#include "kernels/reduce/reduce.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>

#include "tests/util/cuda_bench_timer.h"
#endif

namespace colossal::kernels::reduce {
namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kBF16};

void BM_ReduceCpu(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t n = state.range(1);
  std::vector<uint8_t> dst(n * dtype_size(dtype)), src(n * dtype_size(dtype));
  for (size_t i = 0; i < dst.size(); ++i) {
    dst[i] = static_cast<uint8_t>(i * 7 + 1);
    src[i] = static_cast<uint8_t>(i * 13 + 5) & 0x3f;  // keeps values finite
  }
  for (auto _ : state) {
    if (!reduce_into_cpu(dst.data(), src.data(), n, dtype, ReduceOp::kMax).ok()) {
      state.SkipWithError("reduce_into_cpu failed");
      break;
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] =
      benchmark::Counter(3e-9 * n * dtype_size(dtype), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(dtype_name(dtype));
}
BENCHMARK(BM_ReduceCpu)->ArgsProduct({{0, 1}, {1 << 16, 1 << 22}});

#if COLOSSAL_WITH_CUDA
void BM_ReduceCuda(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t n = state.range(1);
  const size_t bytes = n * dtype_size(dtype);
  void *dst = nullptr, *src = nullptr;
  if (cudaMalloc(&dst, bytes) != cudaSuccess || cudaMalloc(&src, bytes) != cudaSuccess) {
    state.SkipWithError("no CUDA device or out of memory");
    return;
  }
  // Finite, non-zero data: bit pattern 0x3c3c is 1.06 (fp16) / 0.0115 (bf16).
  cudaMemset(dst, 0x3c, bytes);
  cudaMemset(src, 0x3c, bytes);
  testing::CudaBenchTimer timer;
  for (auto _ : state) {
    const bool ok = timer.time(
        state, [&] { return reduce_into_cuda(dst, src, n, dtype, ReduceOp::kMax, nullptr).ok(); },
        "reduce_into_cuda failed");
    if (!ok) break;
  }
  state.counters["GB/s"] =
      benchmark::Counter(3e-9 * bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(dtype_name(dtype));
  cudaFree(dst);
  cudaFree(src);
}
BENCHMARK(BM_ReduceCuda)->ArgsProduct({{0, 1}, {1 << 20, 1 << 26}})->UseManualTime();
#endif

}  // namespace
}  // namespace colossal::kernels::reduce

BENCHMARK_MAIN();
