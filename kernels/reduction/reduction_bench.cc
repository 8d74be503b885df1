// Bandwidth of reduce_rows (sum, float32 output) in decimal GB/s. Bytes moved
// per call = rows * cols * input size + rows * 4 (read the input once, write
// the sums), as tools/bench/torch_reduction.py counts them. Shapes: the full
// reduction [1, 256M], [8192, 4096] from the issue, and GPT-2 rows of 8 x 1024
// tokens: [8192, 768] (hidden) and [8192, 50257] (logits over the vocabulary).
// Run: bazel run -c opt //kernels/reduction:reduction_bench
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/half.h"
#include "kernels/reduction/reduction.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>

#include "tests/util/cuda_bench_timer.h"
#endif

namespace colossal::kernels::reduction {
namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kBF16};

// Non-zero random data in [-1, 1) as `dtype` bytes.
std::vector<uint8_t> random_data(DType dtype, int64_t n) {
  std::vector<uint8_t> out(n * dtype_size(dtype));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  if (dtype == DType::kF32) {
    float* p = reinterpret_cast<float*>(out.data());
    for (int64_t i = 0; i < n; ++i) p[i] = dist(rng);
  } else {
    BFloat16* p = reinterpret_cast<BFloat16*>(out.data());
    for (int64_t i = 0; i < n; ++i) p[i] = float_to_bfloat16(dist(rng));
  }
  return out;
}

std::string label(DType dtype, int64_t rows, int64_t cols) {
  return std::string(dtype_name(dtype)) + "->float32 [" + std::to_string(rows) + "," +
         std::to_string(cols) + "]";
}

double bytes_moved(DType dtype, int64_t rows, int64_t cols) {
  return static_cast<double>(rows) * cols * dtype_size(dtype) + rows * 4.0;
}

void BM_SumRowsCpu(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t rows = state.range(1), cols = state.range(2);
  const auto x = random_data(dtype, rows * cols);
  std::vector<float> out(rows);
  for (auto _ : state) {
    if (!reduce_rows_cpu(out.data(), x.data(), rows, cols, DType::kF32, dtype, RowReduceOp::kSum).ok()) {
      state.SkipWithError("reduce_rows_cpu failed");
      break;
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] =
      benchmark::Counter(bytes_moved(dtype, rows, cols) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label(dtype, rows, cols));
}
BENCHMARK(BM_SumRowsCpu)->ArgsProduct({{0, 1}, {1}, {1 << 24}})->ArgsProduct({{0, 1}, {8192}, {768}});

#if COLOSSAL_WITH_CUDA
void BM_SumRowsCuda(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t rows = state.range(1), cols = state.range(2);
  const int64_t scratch_bytes = reduce_rows_scratch_bytes(rows, cols, dtype);
  void *in = nullptr, *out = nullptr, *scratch = nullptr;
  const auto host = random_data(dtype, rows * cols);
  if (cudaMalloc(&in, host.size()) != cudaSuccess || cudaMalloc(&out, rows * 4) != cudaSuccess ||
      (scratch_bytes > 0 && cudaMalloc(&scratch, scratch_bytes) != cudaSuccess) ||
      cudaMemcpy(in, host.data(), host.size(), cudaMemcpyHostToDevice) != cudaSuccess) {
    state.SkipWithError("no CUDA device or out of memory");
    cudaFree(in);
    cudaFree(out);
    cudaFree(scratch);
    return;
  }
  testing::CudaBenchTimer timer;
  for (auto _ : state) {
    const bool ok = timer.time(
        state,
        [&] {
          return reduce_rows_cuda(out, in, scratch, scratch_bytes, rows, cols, DType::kF32, dtype,
                                  RowReduceOp::kSum, nullptr)
              .ok();
        },
        "reduce_rows_cuda failed");
    if (!ok) break;
  }
  state.counters["GB/s"] =
      benchmark::Counter(bytes_moved(dtype, rows, cols) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label(dtype, rows, cols));
  cudaFree(in);
  cudaFree(out);
  cudaFree(scratch);
}
BENCHMARK(BM_SumRowsCuda)
    ->ArgsProduct({{0, 1}, {1}, {int64_t{1} << 28}})
    ->ArgsProduct({{0, 1}, {8192}, {4096, 768, 50257}})
    ->UseManualTime();
#endif

}  // namespace
}  // namespace colossal::kernels::reduction

BENCHMARK_MAIN();
