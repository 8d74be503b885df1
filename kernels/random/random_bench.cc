// Bandwidth of the random fills in decimal GB/s: bytes moved per call = n *
// element size (the output is written once; nothing is read), as
// tools/bench/torch_random.py counts them. Sizes: 64 Mi elements (the issue's
// size), and GPT-2 small parameter tensors: an MLP weight 768 x 3072 and the
// token embedding 50257 x 768.
// Run: bazel run -c opt //kernels/random:random_bench
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/random/random.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>

#include "tests/util/cuda_bench_timer.h"
#endif

namespace colossal::kernels::random {
namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kBF16};
constexpr int64_t k64Mi = int64_t{1} << 26;
constexpr int64_t kMlp = 768 * 3072;
constexpr int64_t kWte = 50257 * 768;

std::string label(DType dtype, int64_t n) {
  return std::string(dtype_name(dtype)) + " n=" + std::to_string(n);
}

void BM_NormalCpu(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t n = state.range(1);
  std::vector<uint8_t> out(n * dtype_size(dtype));
  uint64_t offset = 0;
  for (auto _ : state) {
    if (!fill_normal_cpu(out.data(), 0.0, 0.02, 1234, offset, n, dtype).ok()) {
      state.SkipWithError("fill_normal_cpu failed");
      break;
    }
    offset += n;
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] =
      benchmark::Counter(1e-9 * n * dtype_size(dtype), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label(dtype, n));
}
BENCHMARK(BM_NormalCpu)->ArgsProduct({{0, 1}, {kMlp}});

#if COLOSSAL_WITH_CUDA
// range(2): 0 = uniform(-1, 1), 1 = normal(0, 0.02).
void BM_RandomCuda(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t n = state.range(1);
  const bool normal = state.range(2) == 1;
  void* out = nullptr;
  if (cudaMalloc(&out, n * dtype_size(dtype)) != cudaSuccess) {
    state.SkipWithError("no CUDA device or out of memory");
    return;
  }
  testing::CudaBenchTimer timer;
  uint64_t offset = 0;
  for (auto _ : state) {
    const bool ok = timer.time(
        state,
        [&] {
          const KernelStatus s =
              normal ? fill_normal_cuda(out, 0.0, 0.02, 1234, offset, n, dtype, nullptr)
                     : fill_uniform_cuda(out, -1.0, 1.0, 1234, offset, n, dtype, nullptr);
          return s.ok();
        },
        "random fill failed");
    if (!ok) break;
    offset += n;
  }
  state.counters["GB/s"] =
      benchmark::Counter(1e-9 * n * dtype_size(dtype), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(normal ? "normal " : "uniform ") + label(dtype, n));
  cudaFree(out);
}
BENCHMARK(BM_RandomCuda)
    ->ArgsProduct({{0, 1}, {k64Mi, kWte, kMlp}, {1}})
    ->ArgsProduct({{0, 1}, {k64Mi}, {0}})
    ->UseManualTime();
#endif

}  // namespace
}  // namespace colossal::kernels::random

BENCHMARK_MAIN();
