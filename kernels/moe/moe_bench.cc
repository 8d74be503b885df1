// kernels/moe on the GPU at Mixtral-8x7B's routing shape: N = 16384 tokens
// (B 8 x T 2048), E = 8 experts, k = 2, C = 4096, bfloat16. Memory-bound: each
// benchmark reports decimal GB/s of the bytes it must move (logits and routing
// tables for the router; rows for dispatch and combine). Beside it,
// tools/bench/torch_moe.py times PyTorch's equivalents.
// Run: bazel run -c opt //kernels/moe:moe_bench
#include <benchmark/benchmark.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "kernels/moe/moe.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>

#include "tests/util/cuda_bench_timer.h"
#endif

namespace colossal::kernels::moe {
namespace {

#if COLOSSAL_WITH_CUDA
constexpr int64_t kTokens = 16384, kExperts = 8, kTopK = 2, kCols = 4096;
constexpr DType kType = DType::kBF16;
constexpr double kElem = 2.0;  // bytes of a bfloat16

// Device buffers for every benchmark: random logits, rows and gradients,
// routing from the CUDA router and slots from expert_slots.
struct Buffers {
  void *logits = nullptr, *dlogits = nullptr, *x = nullptr, *rows = nullptr, *drows = nullptr, *out = nullptr,
       *dout = nullptr;
  void *weights = nullptr, *dweights = nullptr;
  int32_t *experts = nullptr, *slots = nullptr;
  bool ok = false;
  Buffers() {
    const int64_t rows_n = kTokens * kTopK * kCols;
    bool good = cudaMalloc(&logits, kTokens * kExperts * 2) == cudaSuccess &&
                cudaMalloc(&dlogits, kTokens * kExperts * 2) == cudaSuccess &&
                cudaMalloc(&x, kTokens * kCols * 2) == cudaSuccess && cudaMalloc(&rows, rows_n * 2) == cudaSuccess &&
                cudaMalloc(&drows, rows_n * 2) == cudaSuccess &&
                cudaMalloc(&out, kTokens * kCols * 2) == cudaSuccess &&
                cudaMalloc(&dout, kTokens * kCols * 2) == cudaSuccess &&
                cudaMalloc(&weights, kTokens * kTopK * 4) == cudaSuccess &&
                cudaMalloc(&dweights, kTokens * kTopK * 4) == cudaSuccess &&
                cudaMalloc(&experts, kTokens * kTopK * 4) == cudaSuccess &&
                cudaMalloc(&slots, kTokens * kTopK * 4) == cudaSuccess;
    if (!good) return;
    // Pseudo-random bf16 bits in [-2, 2) for every row buffer and the logits.
    std::vector<uint16_t> h(rows_n);
    uint32_t s = 12345;
    for (auto& v : h) {
      s = s * 1664525u + 1013904223u;
      v = static_cast<uint16_t>(0x3f80 | ((s >> 16) & 0x807f));  // +-[1, 2) mantissas
    }
    good = cudaMemcpy(rows, h.data(), rows_n * 2, cudaMemcpyHostToDevice) == cudaSuccess &&
           cudaMemcpy(x, h.data(), kTokens * kCols * 2, cudaMemcpyHostToDevice) == cudaSuccess &&
           cudaMemcpy(dout, h.data() + 7, kTokens * kCols * 2, cudaMemcpyHostToDevice) == cudaSuccess &&
           cudaMemcpy(logits, h.data() + 3, kTokens * kExperts * 2, cudaMemcpyHostToDevice) == cudaSuccess &&
           cudaMemcpy(dweights, h.data() + 11, kTokens * kTopK * 4, cudaMemcpyHostToDevice) == cudaSuccess;
    if (!good || !route_forward_cuda(weights, experts, logits, kTokens, kExperts, kTopK, true, kType, nullptr).ok()) {
      return;
    }
    std::vector<int32_t> ex(kTokens * kTopK), sl(kTokens * kTopK);
    std::vector<int64_t> offsets(kExperts + 1);
    ok = cudaMemcpy(ex.data(), experts, ex.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
         expert_slots(sl.data(), offsets.data(), ex.data(), kTokens, kExperts, kTopK).ok() &&
         cudaMemcpy(slots, sl.data(), sl.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess;
  }
  ~Buffers() {
    for (void* p : {logits, dlogits, x, rows, drows, out, dout, weights, dweights, static_cast<void*>(experts),
                    static_cast<void*>(slots)}) {
      cudaFree(p);
    }
  }
};

template <typename Run>
void time_it(benchmark::State& state, double bytes, Run run) {
  Buffers b;
  if (!b.ok) {
    state.SkipWithError("no CUDA device or out of memory");
    return;
  }
  testing::CudaBenchTimer timer;
  for (auto _ : state) {
    if (!timer.time(state, [&] { return run(b); })) break;
  }
  state.counters["GB/s"] = benchmark::Counter(bytes * static_cast<double>(state.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
}

void BM_RouteForwardCuda(benchmark::State& state) {
  time_it(state, kTokens * (kExperts * kElem + kTopK * 8.0), [](Buffers& b) {
    return route_forward_cuda(b.weights, b.experts, b.logits, kTokens, kExperts, kTopK, true, kType, nullptr);
  });
}

void BM_RouteBackwardCuda(benchmark::State& state) {
  time_it(state, kTokens * (2 * kExperts * kElem + kTopK * 8.0), [](Buffers& b) {
    return route_backward_cuda(b.dlogits, b.dweights, b.logits, b.experts, kTokens, kExperts, kTopK, true, kType,
                               nullptr);
  });
}

void BM_DispatchCuda(benchmark::State& state) {
  time_it(state, kTokens * kCols * kElem * (1 + kTopK), [](Buffers& b) {
    return dispatch_cuda(b.rows, b.x, b.slots, kTokens, kTopK, kCols, kType, nullptr);
  });
}

void BM_CombineCuda(benchmark::State& state) {
  // Reads k rows and the residual of each token, writes one.
  time_it(state, kTokens * kCols * kElem * (kTopK + 2), [](Buffers& b) {
    return combine_cuda(b.out, b.rows, b.slots, b.weights, b.x, kTokens, kTopK, kCols, kType, nullptr);
  });
}

void BM_CombineBackwardCuda(benchmark::State& state) {
  // Reads dout and k rows of each token, writes k row gradients.
  time_it(state, kTokens * kCols * kElem * (1 + 2 * kTopK), [](Buffers& b) {
    return combine_backward_cuda(b.drows, b.dweights, b.dout, b.rows, b.slots, b.weights, kTokens, kTopK, kCols,
                                 kType, nullptr);
  });
}

BENCHMARK(BM_RouteForwardCuda)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RouteBackwardCuda)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DispatchCuda)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CombineCuda)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CombineBackwardCuda)->UseManualTime()->Unit(benchmark::kMicrosecond);
#endif

}  // namespace
}  // namespace colossal::kernels::moe

BENCHMARK_MAIN();
