// Bandwidth of kernels/embedding in decimal GB/s at GPT-2 124M's shapes
// (B = 8, T = 1024, C = 768, V = 50257), with the byte counts that
// tools/bench/torch_embedding.py uses (each byte that must move, moved once):
//   forward   N*4 + N*C*e + T*C*e + N*C*e   (tokens, gathered wte rows, wpe rows, out)
//   backward  N*4 + N*C*e + 2*T*C*g + 2*U*C*g (tokens, dout, dwpe and the U distinct
//                                             dwte rows read and written)
// N = B*T, e = activation element size, g = gradient element size. Token ids are
// splitmix64(i) % V (the Python script computes the same sequence), so U is the
// same in both. Scratch traffic of the deterministic mode is not counted.
// Run: bazel run -c opt //kernels/embedding:embedding_bench
#include <benchmark/benchmark.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "kernels/common/half.h"
#include "kernels/embedding/embedding.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>

#include "tests/util/cuda_bench_timer.h"
#endif

namespace colossal::kernels::embedding {
namespace {

constexpr int64_t kVocab = 50257;
constexpr DType kTypes[] = {DType::kF32, DType::kBF16};

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<int32_t> bench_tokens(int64_t n) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(splitmix64(static_cast<uint64_t>(i)) % kVocab);
  return t;
}

int64_t distinct(const std::vector<int32_t>& t) { return static_cast<int64_t>(std::set<int32_t>(t.begin(), t.end()).size()); }

// Non-zero pseudo-random values in [-1, 1) as raw bytes of `dtype`.
std::vector<uint8_t> random_bytes(DType dtype, int64_t n, uint32_t seed) {
  std::vector<uint8_t> out(n * dtype_size(dtype));
  uint32_t state = seed * 2654435761u + 1;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    const float v = (static_cast<float>(state >> 8) / 16777216.0f) * 2.0f - 1.0f + 1e-4f;
    if (dtype == DType::kF32) {
      reinterpret_cast<float*>(out.data())[i] = v;
    } else {
      reinterpret_cast<BFloat16*>(out.data())[i] = float_to_bfloat16(v);
    }
  }
  return out;
}

double forward_bytes(int64_t b, int64_t t, int64_t c, DType dtype) {
  const double n = static_cast<double>(b) * t, e = static_cast<double>(dtype_size(dtype));
  return n * 4 + n * c * e + static_cast<double>(t) * c * e + n * c * e;
}

double backward_bytes(int64_t b, int64_t t, int64_t c, int64_t unique, DType dtype, DType grad) {
  const double n = static_cast<double>(b) * t, e = static_cast<double>(dtype_size(dtype)),
               g = static_cast<double>(dtype_size(grad));
  return n * 4 + n * c * e + 2.0 * t * c * g + 2.0 * unique * c * g;
}

std::string label(DType dtype, int64_t b, int64_t t, int64_t c) {
  return std::string(dtype_name(dtype)) + " B=" + std::to_string(b) + " T=" + std::to_string(t) +
         " C=" + std::to_string(c) + " V=" + std::to_string(kVocab);
}

// CPU: one sequence of 1024 tokens (the full batch is slow to repeat).
void BM_EmbeddingForwardCpu(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t B = 1, T = 1024, C = 768;
  const auto tok = bench_tokens(B * T);
  const auto wte = random_bytes(dtype, kVocab * C, 1), wpe = random_bytes(dtype, T * C, 2);
  std::vector<uint8_t> out(B * T * C * dtype_size(dtype));
  for (auto _ : state) {
    const KernelStatus s = embedding_forward_cpu(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C, kVocab, T, dtype);
    if (!s.ok()) {
      state.SkipWithError(s.message());
      break;
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(forward_bytes(B, T, C, dtype) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label(dtype, B, T, C));
}
BENCHMARK(BM_EmbeddingForwardCpu)->Arg(0)->Arg(1);

void BM_EmbeddingBackwardCpu(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t B = 1, T = 1024, C = 768;
  const auto tok = bench_tokens(B * T);
  const auto dout = random_bytes(dtype, B * T * C, 1);
  auto dwte = random_bytes(DType::kF32, kVocab * C, 2), dwpe = random_bytes(DType::kF32, T * C, 3);
  for (auto _ : state) {
    const KernelStatus s = embedding_backward_cpu(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C, kVocab,
                                                  T, dtype, DType::kF32);
    if (!s.ok()) {
      state.SkipWithError(s.message());
      break;
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(backward_bytes(B, T, C, distinct(tok), dtype, DType::kF32) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label(dtype, B, T, C) + " grad float32");
}
BENCHMARK(BM_EmbeddingBackwardCpu)->Arg(0)->Arg(1);

#if COLOSSAL_WITH_CUDA
struct DeviceBuffers {
  std::vector<void*> ptrs;
  void* alloc(size_t bytes, const void* host = nullptr) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes == 0 ? 16 : bytes) != cudaSuccess) return nullptr;
    ptrs.push_back(p);
    if (host != nullptr) cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice);
    return p;
  }
  ~DeviceBuffers() {
    for (void* p : ptrs) cudaFree(p);
  }
};

template <typename F>
void time_cuda(benchmark::State& state, F&& call) {
  testing::CudaBenchTimer timer;
  for (auto _ : state) {
    if (!timer.time(state, call)) break;
  }
  if (cudaDeviceSynchronize() != cudaSuccess) state.SkipWithError("CUDA error");
}

void BM_EmbeddingForwardCuda(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t B = 8, T = 1024, C = 768;
  const auto tok = bench_tokens(B * T);
  const auto wte = random_bytes(dtype, kVocab * C, 1), wpe = random_bytes(dtype, T * C, 2);
  DeviceBuffers d;
  void* d_tok = d.alloc(tok.size() * 4, tok.data());
  void* d_wte = d.alloc(wte.size(), wte.data());
  void* d_wpe = d.alloc(wpe.size(), wpe.data());
  void* d_out = d.alloc(B * T * C * dtype_size(dtype));
  if (!d_tok || !d_wte || !d_wpe || !d_out) {
    state.SkipWithError("no CUDA device or out of memory");
    return;
  }
  time_cuda(state, [&] {
    return embedding_forward_cuda(d_out, nullptr, static_cast<int32_t*>(d_tok), d_wte, d_wpe, B, T, C, kVocab, T,
                                  dtype, nullptr);
  });
  state.counters["GB/s"] = benchmark::Counter(forward_bytes(B, T, C, dtype) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label(dtype, B, T, C));
}
BENCHMARK(BM_EmbeddingForwardCuda)->Arg(0)->Arg(1)->UseManualTime();

// Args: activation dtype (0 float32, 1 bfloat16), gradient dtype (same), mode (0 deterministic, 1 atomic).
void BM_EmbeddingBackwardCuda(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)], grad = kTypes[state.range(1)];
  const GradMode mode = state.range(2) == 0 ? GradMode::kDeterministic : GradMode::kAtomic;
  const int64_t B = 8, T = 1024, C = 768;
  const auto tok = bench_tokens(B * T);
  const auto dout = random_bytes(dtype, B * T * C, 1);
  const auto dwte = random_bytes(grad, kVocab * C, 2), dwpe = random_bytes(grad, T * C, 3);
  const size_t scratch_bytes = embedding_backward_scratch_bytes(B, T, C, mode);
  DeviceBuffers d;
  void* d_tok = d.alloc(tok.size() * 4, tok.data());
  void* d_dout = d.alloc(dout.size(), dout.data());
  void* d_dwte = d.alloc(dwte.size(), dwte.data());
  void* d_dwpe = d.alloc(dwpe.size(), dwpe.data());
  void* d_scratch = d.alloc(scratch_bytes);
  if (!d_tok || !d_dout || !d_dwte || !d_dwpe || !d_scratch) {
    state.SkipWithError("no CUDA device or out of memory");
    return;
  }
  time_cuda(state, [&] {
    return embedding_backward_cuda(d_dwte, d_dwpe, nullptr, d_dout, static_cast<int32_t*>(d_tok), d_scratch,
                                   scratch_bytes, B, T, C, kVocab, T, dtype, grad, mode, nullptr);
  });
  state.counters["GB/s"] = benchmark::Counter(backward_bytes(B, T, C, distinct(tok), dtype, grad) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label(dtype, B, T, C) + " grad " + dtype_name(grad) + " " + grad_mode_name(mode));
}
BENCHMARK(BM_EmbeddingBackwardCuda)
    ->Args({0, 0, 0})
    ->Args({0, 0, 1})
    ->Args({1, 0, 0})
    ->Args({1, 0, 1})
    ->Args({1, 1, 0})
    ->UseManualTime();
#endif

}  // namespace
}  // namespace colossal::kernels::embedding

BENCHMARK_MAIN();
