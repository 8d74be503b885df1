// Bandwidth of kernels/rope in decimal GB/s: each call reads its input once and
// writes its output once, 2 * rows * (q_heads + 2 * kv_heads) * D * e bytes
// (e = element size; inv_freq, D/2 floats, is not counted). Shapes: Llama-3.2-1B
// (32 q heads, 8 kv heads, D 64) at B 8, T 2048; Llama-3.1-8B heads (32 / 8,
// D 128) at the same tokens.
// Run: bazel run -c opt //kernels/rope:rope_bench
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/half.h"
#include "kernels/rope/rope.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>

#include "tests/util/cuda_bench_timer.h"
#endif

namespace colossal::kernels::rope {
namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kBF16};

struct Dims {
  int64_t batch, seq, q_heads, kv_heads, head_dim;
  int64_t rows() const { return batch * seq; }
  int64_t q_elems() const { return rows() * q_heads * head_dim; }
  int64_t kv_elems() const { return rows() * kv_heads * head_dim; }
  int64_t packed_elems() const { return rows() * (q_heads + 2 * kv_heads) * head_dim; }
};

Dims dims_of(const benchmark::State& state) {
  return Dims{state.range(1), state.range(2), 32, 8, state.range(3)};
}

double bytes_moved(const Dims& d, DType dtype) {
  return 2.0 * static_cast<double>(d.packed_elems()) * static_cast<double>(dtype_size(dtype));
}

// Pseudo-random values in [-2, 2) as raw bytes of `dtype`.
std::vector<uint8_t> random_bytes(DType dtype, int64_t n, uint32_t seed) {
  std::vector<uint8_t> out(n * dtype_size(dtype));
  uint32_t state = seed * 2654435761u + 1;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    const float v = (static_cast<float>(state >> 8) / 16777216.0f) * 4.0f - 2.0f;
    if (dtype == DType::kF32) {
      reinterpret_cast<float*>(out.data())[i] = v;
    } else {
      reinterpret_cast<BFloat16*>(out.data())[i] = float_to_bfloat16(v);
    }
  }
  return out;
}

std::vector<float> llama3_inv_freq(int64_t head_dim) {
  std::vector<float> f(head_dim / 2);
  const Llama3RopeScaling s{32.0, 1.0, 4.0, 8192};
  (void)rope_inv_freq(f.data(), head_dim, 500000.0, &s);
  return f;
}

std::string label(DType dtype, const Dims& d) {
  return std::string(dtype_name(dtype)) + " B" + std::to_string(d.batch) + " T" + std::to_string(d.seq) +
         " H32 KV8 D" + std::to_string(d.head_dim);
}

template <bool kBackward>
void BM_RopeCpu(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const Dims d = dims_of(state);
  const std::vector<float> inv = llama3_inv_freq(d.head_dim);
  std::vector<uint8_t> q = random_bytes(dtype, d.q_elems(), 1), k = random_bytes(dtype, d.kv_elems(), 2),
                       v = random_bytes(dtype, d.kv_elems(), 3), qkv = random_bytes(dtype, d.packed_elems(), 4);
  for (auto _ : state) {
    const KernelStatus s =
        kBackward ? rope_pack_backward_cpu(q.data(), k.data(), v.data(), qkv.data(), inv.data(), nullptr, d.batch, d.seq,
                                           d.q_heads, d.kv_heads, d.head_dim, dtype)
                  : rope_pack_forward_cpu(qkv.data(), q.data(), k.data(), v.data(), inv.data(), nullptr, d.batch, d.seq,
                                          d.q_heads, d.kv_heads, d.head_dim, dtype);
    if (!s.ok()) {
      state.SkipWithError(s.message());
      break;
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] =
      benchmark::Counter(bytes_moved(d, dtype) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label(dtype, d));
}
BENCHMARK_TEMPLATE(BM_RopeCpu, false)->Name("BM_RopePackForwardCpu")->ArgsProduct({{0, 1}, {1}, {1024}, {64}});
BENCHMARK_TEMPLATE(BM_RopeCpu, true)->Name("BM_RopePackBackwardCpu")->ArgsProduct({{0, 1}, {1}, {1024}, {64}});

#if COLOSSAL_WITH_CUDA
template <bool kBackward>
void BM_RopeCuda(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const Dims d = dims_of(state);
  const size_t es = dtype_size(dtype);
  const std::vector<float> inv = llama3_inv_freq(d.head_dim);
  void *q = nullptr, *k = nullptr, *v = nullptr, *qkv = nullptr, *dinv = nullptr;
  if (cudaMalloc(&q, d.q_elems() * es) != cudaSuccess || cudaMalloc(&k, d.kv_elems() * es) != cudaSuccess ||
      cudaMalloc(&v, d.kv_elems() * es) != cudaSuccess || cudaMalloc(&qkv, d.packed_elems() * es) != cudaSuccess ||
      cudaMalloc(&dinv, inv.size() * sizeof(float)) != cudaSuccess) {
    state.SkipWithError("no CUDA device or out of memory");
    return;
  }
  const auto hq = random_bytes(dtype, d.q_elems(), 1), hk = random_bytes(dtype, d.kv_elems(), 2),
             hv = random_bytes(dtype, d.kv_elems(), 3), hqkv = random_bytes(dtype, d.packed_elems(), 4);
  cudaMemcpy(q, hq.data(), hq.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(k, hk.data(), hk.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(v, hv.data(), hv.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(qkv, hqkv.data(), hqkv.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(dinv, inv.data(), inv.size() * sizeof(float), cudaMemcpyHostToDevice);
  const float* inv_d = static_cast<const float*>(dinv);
  testing::CudaBenchTimer timer;
  for (auto _ : state) {
    const bool ok = timer.time(state, [&] {
      return kBackward ? rope_pack_backward_cuda(q, k, v, qkv, inv_d, nullptr, d.batch, d.seq, d.q_heads,
                                                 d.kv_heads, d.head_dim, dtype, nullptr)
                       : rope_pack_forward_cuda(qkv, q, k, v, inv_d, nullptr, d.batch, d.seq, d.q_heads,
                                                d.kv_heads, d.head_dim, dtype, nullptr);
    });
    if (!ok) break;
  }
  if (cudaDeviceSynchronize() != cudaSuccess) state.SkipWithError("CUDA error");
  state.counters["GB/s"] =
      benchmark::Counter(bytes_moved(d, dtype) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label(dtype, d));
  for (void* p : {q, k, v, qkv, dinv}) cudaFree(p);
}
BENCHMARK_TEMPLATE(BM_RopeCuda, false)
    ->Name("BM_RopePackForwardCuda")
    ->ArgsProduct({{0, 1}, {8}, {2048}, {64, 128}})
    ->UseManualTime();
BENCHMARK_TEMPLATE(BM_RopeCuda, true)
    ->Name("BM_RopePackBackwardCuda")
    ->ArgsProduct({{0, 1}, {8}, {2048}, {64, 128}})
    ->UseManualTime();
#endif

}  // namespace
}  // namespace colossal::kernels::rope

BENCHMARK_MAIN();
