// copy_2d_cuda beside cudaMemcpy2DAsync (device to device) on the rows of
// attention-head exchanges: bytes moved (read + write) per second. Shapes:
// Llama-3.2-1B's q projection at B4 x T1024 per rank split into two head
// blocks (4096 rows of 2 KB from 4 KB-pitched rows), its k/v (512 B of 1 KB),
// GPT-2's 64-channel heads (128 B of 1536 B), and wide rows (2 MB, 4 rows).
// Run: bazel run -c opt //kernels/copy:copy_bench -- --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <cstdint>

#include "kernels/copy/copy.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>

#include "tests/util/cuda_bench_timer.h"
#endif

namespace colossal::kernels::copy {
namespace {

#if COLOSSAL_WITH_CUDA
struct Shape {
  size_t width, src_pitch, height;
};
constexpr Shape kShapes[] = {
    {2048, 4096, 4096}, {512, 1024, 4096}, {128, 1536, 65536}, {2 << 20, 4 << 20, 4}};

void run(benchmark::State& state, bool kernel) {
  const Shape s = kShapes[state.range(0)];
  char *src = nullptr, *dst = nullptr;
  if (cudaMalloc(&src, s.src_pitch * s.height) != cudaSuccess ||
      cudaMalloc(&dst, s.width * s.height) != cudaSuccess) {
    state.SkipWithError("cudaMalloc failed");
    return;
  }
  cudaMemset(src, 1, s.src_pitch * s.height);
  testing::CudaBenchTimer timer;
  for (auto _ : state) {
    const bool ok = timer.time(
        state,
        [&] {
          if (kernel) {
            return copy_2d_cuda(dst, s.width, src, s.src_pitch, s.width, s.height, nullptr).ok();
          }
          cudaMemcpy2DAsync(dst, s.width, src, s.src_pitch, s.width, s.height,
                            cudaMemcpyDeviceToDevice, nullptr);
          return true;
        },
        "copy_2d_cuda failed");
    if (!ok) break;
  }
  state.SetBytesProcessed(state.iterations() * 2 * s.width * s.height);
  state.SetLabel(std::to_string(s.height) + " rows of " + std::to_string(s.width) + " B");
  cudaFree(src);
  cudaFree(dst);
}

void BM_Copy2dKernel(benchmark::State& state) { run(state, true); }
void BM_CudaMemcpy2DAsync(benchmark::State& state) { run(state, false); }
BENCHMARK(BM_Copy2dKernel)->DenseRange(0, 3)->UseManualTime();
BENCHMARK(BM_CudaMemcpy2DAsync)->DenseRange(0, 3)->UseManualTime();
#endif

}  // namespace
}  // namespace colossal::kernels::copy

BENCHMARK_MAIN();
