// Bandwidth of the elementwise ops in decimal GB/s. Bytes moved per call:
//   add / axpby : 3 * n * element size (read a, read b, write out)
//   cast        : n * (in size + out size)
//   fill        : n * element size
// as tools/bench/torch_elementwise.py counts them. Shapes: 64 Mi elements
// (the size) and 8192 * 768 (GPT-2 small activations, 8 x 1024 tokens).
// Run: bazel run -c opt //kernels/elementwise:elementwise_bench
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/elementwise/elementwise.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>

#include "tests/util/cuda_bench_timer.h"
#endif

namespace colossal::kernels::elementwise {
namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kBF16};
constexpr int64_t kGpt2 = 8192 * 768;
constexpr int64_t k64Mi = int64_t{1} << 26;

// n non-zero random values in [-2, 2) of `dtype` (generated as float32, then cast).
std::vector<uint8_t> random_data(DType dtype, int64_t n, uint32_t seed) {
  std::vector<float> f(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (float& v : f) v = dist(rng);
  std::vector<uint8_t> out(n * dtype_size(dtype));
  if (!cast_cpu(out.data(), f.data(), n, dtype, DType::kF32).ok()) out.clear();
  return out;
}

std::string label(DType dtype, int64_t n) {
  return std::string(dtype_name(dtype)) + " n=" + std::to_string(n);
}

void BM_AddCpu(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t n = state.range(1);
  const auto a = random_data(dtype, n, 1), b = random_data(dtype, n, 2);
  std::vector<uint8_t> out(a.size());
  for (auto _ : state) {
    if (!binary_cpu(out.data(), a.data(), b.data(), n, dtype, BinaryOp::kAdd).ok()) {
      state.SkipWithError("binary_cpu failed");
      break;
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(3e-9 * n * dtype_size(dtype),
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label(dtype, n));
}
BENCHMARK(BM_AddCpu)->ArgsProduct({{0, 1}, {kGpt2}});

void BM_CastCpu(benchmark::State& state) {
  const DType in = state.range(0) == 0 ? DType::kBF16 : DType::kF32;
  const DType out_t = state.range(0) == 0 ? DType::kF32 : DType::kBF16;
  const int64_t n = state.range(1);
  const auto x = random_data(in, n, 3);
  std::vector<uint8_t> out(n * dtype_size(out_t));
  for (auto _ : state) {
    if (!cast_cpu(out.data(), x.data(), n, out_t, in).ok()) {
      state.SkipWithError("cast_cpu failed");
      break;
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(
      1e-9 * n * (dtype_size(in) + dtype_size(out_t)), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(dtype_name(in)) + "->" + dtype_name(out_t) + " n=" + std::to_string(n));
}
BENCHMARK(BM_CastCpu)->ArgsProduct({{0, 1}, {kGpt2}});

#if COLOSSAL_WITH_CUDA

// Device buffers filled with host random data; freed on scope exit.
struct DeviceData {
  void* ptr = nullptr;
  DeviceData(DType dtype, int64_t n, uint32_t seed) {
    const auto host = random_data(dtype, n, seed);
    if (host.empty() || cudaMalloc(&ptr, host.size()) != cudaSuccess ||
        cudaMemcpy(ptr, host.data(), host.size(), cudaMemcpyHostToDevice) != cudaSuccess) {
      cudaFree(ptr);
      ptr = nullptr;
    }
  }
  ~DeviceData() { cudaFree(ptr); }
};

// Times `call` with CUDA events; `bytes` per call become the GB/s counter.
template <typename Call>
void time_cuda(benchmark::State& state, double bytes, const std::string& label, Call call) {
  testing::CudaBenchTimer timer;
  for (auto _ : state) {
    if (!timer.time(state, [&] { return call().ok(); }, "kernel failed")) break;
  }
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label);
}

void BM_AddCuda(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t n = state.range(1);
  DeviceData a(dtype, n, 1), b(dtype, n, 2), out(dtype, n, 3);
  if (!a.ptr || !b.ptr || !out.ptr) return state.SkipWithError("no CUDA device or out of memory");
  time_cuda(state, 3.0 * n * dtype_size(dtype), label(dtype, n), [&] {
    return binary_cuda(out.ptr, a.ptr, b.ptr, n, dtype, BinaryOp::kAdd, nullptr);
  });
}
BENCHMARK(BM_AddCuda)->ArgsProduct({{0, 1}, {kGpt2, k64Mi}})->UseManualTime();

void BM_AxpbyCuda(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t n = state.range(1);
  DeviceData a(dtype, n, 1), b(dtype, n, 2), out(dtype, n, 3);
  if (!a.ptr || !b.ptr || !out.ptr) return state.SkipWithError("no CUDA device or out of memory");
  time_cuda(state, 3.0 * n * dtype_size(dtype), label(dtype, n), [&] {
    return axpby_cuda(out.ptr, a.ptr, b.ptr, 0.9, 0.1, n, dtype, nullptr);
  });
}
BENCHMARK(BM_AxpbyCuda)->ArgsProduct({{0, 1}, {k64Mi}})->UseManualTime();

// range(0): 0 = bfloat16 -> float32, 1 = float32 -> bfloat16.
void BM_CastCuda(benchmark::State& state) {
  const DType in = state.range(0) == 0 ? DType::kBF16 : DType::kF32;
  const DType out_t = state.range(0) == 0 ? DType::kF32 : DType::kBF16;
  const int64_t n = state.range(1);
  DeviceData x(in, n, 1), out(out_t, n, 2);
  if (!x.ptr || !out.ptr) return state.SkipWithError("no CUDA device or out of memory");
  time_cuda(state, 1.0 * n * (dtype_size(in) + dtype_size(out_t)),
            std::string(dtype_name(in)) + "->" + dtype_name(out_t) + " n=" + std::to_string(n),
            [&] { return cast_cuda(out.ptr, x.ptr, n, out_t, in, nullptr); });
}
BENCHMARK(BM_CastCuda)->ArgsProduct({{0, 1}, {kGpt2, k64Mi}})->UseManualTime();

void BM_FillCuda(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t n = state.range(1);
  DeviceData out(dtype, n, 1);
  if (!out.ptr) return state.SkipWithError("no CUDA device or out of memory");
  time_cuda(state, 1.0 * n * dtype_size(dtype), label(dtype, n),
            [&] { return fill_cuda(out.ptr, 0.5, n, dtype, nullptr); });
}
BENCHMARK(BM_FillCuda)->ArgsProduct({{0, 1}, {k64Mi}})->UseManualTime();

#endif

}  // namespace
}  // namespace colossal::kernels::elementwise

BENCHMARK_MAIN();
