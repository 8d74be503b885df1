// Bandwidth of kernels/activation in decimal GB/s, with the byte counts that
// tools/bench/torch_activation.py uses (each input read once, each output
// written once; scratch traffic is not counted):
//   gelu forward        2 * n * e            (read x, write out)
//   gelu backward       3 * n * e            (read dout, x, write dx)
//   bias_gelu forward   2 * n * e + c * e    (+ read bias)
//   bias_gelu backward  3 * n * e + 3 * c * e (+ read bias, read and write dbias)
//   swiglu forward      3 * n * e            (read gate, up, write out)
//   swiglu backward     5 * n * e            (read dout, gate, up, write dgate, dup)
// with n = rows * cols, c = cols, e = element size. Shapes: rows = 8 * 1024
// tokens, cols = 3072 (GPT-2 124M MLP hidden) and 6400 (GPT-2 XL); SwiGLU at
// cols = 8192 (Llama-3.2-1B's intermediate size).
// Run: bazel run -c opt //kernels/activation:activation_bench
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/activation/activation.h"
#include "kernels/common/half.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>

#include "tests/util/cuda_bench_timer.h"
#endif

namespace colossal::kernels::activation {
namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kBF16};

enum Op : int { kGeluForward, kGeluBackward, kBiasGeluForward, kBiasGeluBackward, kSwigluForward, kSwigluBackward };

double bytes_moved(Op op, int64_t rows, int64_t cols, DType dtype) {
  const double n = static_cast<double>(rows) * cols, e = static_cast<double>(dtype_size(dtype));
  switch (op) {
    case kGeluForward: return 2 * n * e;
    case kGeluBackward: return 3 * n * e;
    case kBiasGeluForward: return 2 * n * e + cols * e;
    case kBiasGeluBackward: return 3 * n * e + 3 * cols * e;
    case kSwigluForward: return 3 * n * e;
    case kSwigluBackward: return 5 * n * e;
  }
  return 0;
}

// Non-zero pseudo-random values in [-3, 3) as raw bytes of `dtype`.
std::vector<uint8_t> random_bytes(DType dtype, int64_t n, uint32_t seed) {
  std::vector<uint8_t> out(n * dtype_size(dtype));
  uint32_t state = seed * 2654435761u + 1;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    const float v = (static_cast<float>(state >> 8) / 16777216.0f) * 6.0f - 3.0f + 1e-3f;
    if (dtype == DType::kF32) {
      reinterpret_cast<float*>(out.data())[i] = v;
    } else if (dtype == DType::kBF16) {
      reinterpret_cast<BFloat16*>(out.data())[i] = float_to_bfloat16(v);
    } else {
      reinterpret_cast<Half*>(out.data())[i] = float_to_half(v);
    }
  }
  return out;
}

std::string label(DType dtype, int64_t rows, int64_t cols) {
  return std::string(dtype_name(dtype)) + " " + std::to_string(rows) + "x" + std::to_string(cols);
}

template <Op kOp>
void BM_ActivationCpu(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t rows = state.range(1), cols = state.range(2), n = rows * cols;
  std::vector<uint8_t> x = random_bytes(dtype, n, 1), dout = random_bytes(dtype, n, 2),
                       bias = random_bytes(dtype, cols, 3), dbias = random_bytes(dtype, cols, 4),
                       up = random_bytes(dtype, n, 5), out(n * dtype_size(dtype)), out2(n * dtype_size(dtype));
  for (auto _ : state) {
    KernelStatus s;
    switch (kOp) {
      case kGeluForward: s = gelu_forward_cpu(out.data(), x.data(), n, dtype); break;
      case kGeluBackward: s = gelu_backward_cpu(out.data(), dout.data(), x.data(), n, dtype); break;
      case kBiasGeluForward:
        s = bias_gelu_forward_cpu(out.data(), x.data(), bias.data(), rows, cols, dtype);
        break;
      case kBiasGeluBackward:
        s = bias_gelu_backward_cpu(out.data(), dbias.data(), dout.data(), x.data(), bias.data(), rows,
                                   cols, dtype);
        break;
      case kSwigluForward: s = swiglu_forward_cpu(out.data(), x.data(), up.data(), n, dtype); break;
      case kSwigluBackward:
        s = swiglu_backward_cpu(out.data(), out2.data(), dout.data(), x.data(), up.data(), n, dtype);
        break;
    }
    if (!s.ok()) {
      state.SkipWithError(s.message());
      break;
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(bytes_moved(kOp, rows, cols, dtype) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label(dtype, rows, cols));
}
BENCHMARK_TEMPLATE(BM_ActivationCpu, kGeluForward)->Name("BM_GeluForwardCpu")->ArgsProduct({{0, 1}, {1024}, {3072}});
BENCHMARK_TEMPLATE(BM_ActivationCpu, kBiasGeluBackward)
    ->Name("BM_BiasGeluBackwardCpu")
    ->ArgsProduct({{0, 1}, {1024}, {3072}});
BENCHMARK_TEMPLATE(BM_ActivationCpu, kSwigluForward)->Name("BM_SwigluForwardCpu")->ArgsProduct({{0, 1}, {1024}, {8192}});
BENCHMARK_TEMPLATE(BM_ActivationCpu, kSwigluBackward)->Name("BM_SwigluBackwardCpu")->ArgsProduct({{0, 1}, {1024}, {8192}});

#if COLOSSAL_WITH_CUDA
template <Op kOp>
void BM_ActivationCuda(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t rows = state.range(1), cols = state.range(2), n = rows * cols;
  const size_t bytes = n * dtype_size(dtype), cbytes = cols * dtype_size(dtype);
  const size_t scratch_bytes = bias_gelu_backward_scratch_bytes(rows, cols);
  void *x = nullptr, *dout = nullptr, *out = nullptr, *bias = nullptr, *dbias = nullptr, *scratch = nullptr,
       *up = nullptr, *out2 = nullptr;
  if (cudaMalloc(&x, bytes) != cudaSuccess || cudaMalloc(&dout, bytes) != cudaSuccess ||
      cudaMalloc(&out, bytes) != cudaSuccess || cudaMalloc(&bias, cbytes) != cudaSuccess ||
      cudaMalloc(&up, bytes) != cudaSuccess || cudaMalloc(&out2, bytes) != cudaSuccess ||
      cudaMalloc(&dbias, cbytes) != cudaSuccess || cudaMalloc(&scratch, scratch_bytes) != cudaSuccess) {
    state.SkipWithError("no CUDA device or out of memory");
    return;
  }
  const auto hx = random_bytes(dtype, n, 1), hdout = random_bytes(dtype, n, 2),
             hbias = random_bytes(dtype, cols, 3), hdbias = random_bytes(dtype, cols, 4);
  cudaMemcpy(x, hx.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemcpy(dout, hdout.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemcpy(up, hdout.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemcpy(bias, hbias.data(), cbytes, cudaMemcpyHostToDevice);
  cudaMemcpy(dbias, hdbias.data(), cbytes, cudaMemcpyHostToDevice);
  testing::CudaBenchTimer timer;
  for (auto _ : state) {
    const bool ok = timer.time(state, [&] {
      KernelStatus s;
      switch (kOp) {
        case kGeluForward: s = gelu_forward_cuda(out, x, n, dtype, nullptr); break;
        case kGeluBackward: s = gelu_backward_cuda(out, dout, x, n, dtype, nullptr); break;
        case kBiasGeluForward: s = bias_gelu_forward_cuda(out, x, bias, rows, cols, dtype, nullptr); break;
        case kBiasGeluBackward:
          s = bias_gelu_backward_cuda(out, dbias, dout, x, bias, scratch, scratch_bytes, rows, cols,
                                      dtype, nullptr);
          break;
        case kSwigluForward: s = swiglu_forward_cuda(out, x, up, n, dtype, nullptr); break;
        case kSwigluBackward: s = swiglu_backward_cuda(out, out2, dout, x, up, n, dtype, nullptr); break;
      }
      return s;
    });
    if (!ok) break;
  }
  if (cudaDeviceSynchronize() != cudaSuccess) state.SkipWithError("CUDA error");
  state.counters["GB/s"] = benchmark::Counter(bytes_moved(kOp, rows, cols, dtype) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label(dtype, rows, cols));
  for (void* p : {x, dout, out, bias, dbias, scratch, up, out2}) cudaFree(p);
}
#define COLOSSAL_ACTIVATION_CUDA_BENCH(op, name)          \
  BENCHMARK_TEMPLATE(BM_ActivationCuda, op)               \
      ->Name(name)                                        \
      ->ArgsProduct({{0, 1}, {8 * 1024}, {3072, 6400}})   \
      ->UseManualTime()
COLOSSAL_ACTIVATION_CUDA_BENCH(kGeluForward, "BM_GeluForwardCuda");
COLOSSAL_ACTIVATION_CUDA_BENCH(kGeluBackward, "BM_GeluBackwardCuda");
COLOSSAL_ACTIVATION_CUDA_BENCH(kBiasGeluForward, "BM_BiasGeluForwardCuda");
COLOSSAL_ACTIVATION_CUDA_BENCH(kBiasGeluBackward, "BM_BiasGeluBackwardCuda");
BENCHMARK_TEMPLATE(BM_ActivationCuda, kSwigluForward)
    ->Name("BM_SwigluForwardCuda")
    ->ArgsProduct({{0, 1}, {8 * 1024}, {8192}})
    ->UseManualTime();
BENCHMARK_TEMPLATE(BM_ActivationCuda, kSwigluBackward)
    ->Name("BM_SwigluBackwardCuda")
    ->ArgsProduct({{0, 1}, {8 * 1024}, {8192}})
    ->UseManualTime();
#endif

}  // namespace
}  // namespace colossal::kernels::activation

BENCHMARK_MAIN();
