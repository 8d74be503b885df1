// Device-to-device copy bandwidth: the ceiling memory-bound kernels are judged
// against. GB/s counts bytes read plus bytes written (2 * size), decimal.
// Run on a GPU: bazel run -c opt //tools/bench:copy_bench (or through the GPU bundle).
#include <benchmark/benchmark.h>

#include <cstdint>

#include "bazel/cuda_config.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>

#include "tests/util/cuda_bench_timer.h"
#endif

namespace {

#if COLOSSAL_WITH_CUDA

void BM_DeviceCopy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) << 20;
  void *src = nullptr, *dst = nullptr;
  if (cudaMalloc(&src, bytes) != cudaSuccess || cudaMalloc(&dst, bytes) != cudaSuccess) {
    state.SkipWithError("no CUDA device or out of memory");
    return;
  }
  cudaMemset(src, 0x5a, bytes);
  colossal::testing::CudaBenchTimer timer;
  for (auto _ : state) {
    if (!timer.time(
            state, [&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nullptr); },
            "copy failed")) {
      break;
    }
  }
  state.counters["GB/s"] =
      benchmark::Counter(2e-9 * bytes, benchmark::Counter::kIsIterationInvariantRate);
  cudaFree(src);
  cudaFree(dst);
}
BENCHMARK(BM_DeviceCopy)->Arg(256)->Arg(1024)->Arg(4096)->UseManualTime();
#else
void BM_DeviceCopy(benchmark::State& state) {
  state.SkipWithError("built without CUDA (--config=cpu or no toolkit found)");
  for (auto _ : state) {
  }
}
BENCHMARK(BM_DeviceCopy);
#endif

}  // namespace

BENCHMARK_MAIN();
