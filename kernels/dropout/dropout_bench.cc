// Bandwidth of inverted dropout in decimal GB/s: bytes moved per call = 2 * n
// * element size (the input read once, the output written once; the mask is
// regenerated from Philox, never stored), as tools/bench/torch_dropout.py
// counts PyTorch's (which also writes a one-byte mask it does not count).
// p = 0.1. Sizes: 64 Mi elements and GPT-2 small's activations at B16 x 1024:
// the residual stream (x 768) and the MLP's hidden layer (x 3072).
// Run: bazel run -c opt //kernels/dropout:dropout_bench
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dropout/dropout.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>

#include "tests/util/cuda_bench_timer.h"
#endif

namespace colossal::kernels::dropout {
namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kBF16};
constexpr double kP = 0.1;
constexpr int64_t k64Mi = int64_t{1} << 26;
constexpr int64_t kResidual = int64_t{16} * 1024 * 768;
constexpr int64_t kHidden = int64_t{16} * 1024 * 3072;

std::string label(DType dtype, int64_t n) {
  return std::string(dtype_name(dtype)) + " n=" + std::to_string(n) + " p=0.1";
}

void set_bandwidth(benchmark::State& state, DType dtype, int64_t n) {
  state.counters["GB/s"] = benchmark::Counter(2e-9 * n * dtype_size(dtype),
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label(dtype, n));
}

void BM_DropoutCpu(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t n = state.range(1);
  std::vector<uint8_t> in(n * dtype_size(dtype), 0x3c), out(n * dtype_size(dtype));
  uint64_t offset = 0;
  for (auto _ : state) {
    if (!dropout_cpu(out.data(), in.data(), kP, 1234, offset, n, dtype).ok()) {
      state.SkipWithError("dropout_cpu failed");
      break;
    }
    offset += n;  // a fresh mask every call, as in training
    benchmark::ClobberMemory();
  }
  set_bandwidth(state, dtype, n);
}
BENCHMARK(BM_DropoutCpu)->ArgsProduct({{0, 1}, {kResidual}});

#if COLOSSAL_WITH_CUDA
void BM_DropoutCuda(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t n = state.range(1);
  void* in = nullptr;
  void* out = nullptr;
  if (cudaMalloc(&in, n * dtype_size(dtype)) != cudaSuccess ||
      cudaMalloc(&out, n * dtype_size(dtype)) != cudaSuccess) {
    state.SkipWithError("no CUDA device or out of memory");
    cudaFree(in);
    return;
  }
  cudaMemset(in, 0x3c, n * dtype_size(dtype));
  testing::CudaBenchTimer timer;
  uint64_t offset = 0;
  for (auto _ : state) {
    if (!timer.time(
            state, [&] { return dropout_cuda(out, in, kP, 1234, offset, n, dtype, nullptr).ok(); },
            "dropout_cuda failed")) {
      break;
    }
    offset += n;
  }
  set_bandwidth(state, dtype, n);
  cudaFree(in);
  cudaFree(out);
}
BENCHMARK(BM_DropoutCuda)->ArgsProduct({{0, 1}, {k64Mi, kResidual, kHidden}})->UseManualTime();
#endif

}  // namespace
}  // namespace colossal::kernels::dropout

BENCHMARK_MAIN();
