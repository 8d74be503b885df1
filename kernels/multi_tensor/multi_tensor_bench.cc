// Multi-tensor L2 norm, scale and accumulate in decimal GB/s. Bytes moved: l2_norm
// reads every element once (n * element size); scale reads and writes it (n * (in +
// out size)), as tools/bench/torch_multi_tensor.py counts them; accumulate reads acc
// and part and writes acc (3 n * element size). Inputs: GPT-2 small's
// 124,439,808 gradients as one flat buffer or as its 148 tensors.
// Run: bazel run -c opt //kernels/multi_tensor:multi_tensor_bench
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/half.h"
#include "kernels/multi_tensor/multi_tensor.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>

#include "tests/util/cuda_bench_timer.h"
#endif

namespace colossal::kernels::multi_tensor {
namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kBF16};

// GPT-2 small's parameter tensors in order (lm_head is tied to wte).
std::vector<int64_t> gpt2_tensor_sizes() {
  const int64_t C = 768, V = 50257, T = 1024;
  std::vector<int64_t> s = {V * C, T * C};
  for (int layer = 0; layer < 12; ++layer) {
    const int64_t block[] = {C, C, C * 3 * C, 3 * C, C * C, C, C, C, C * 4 * C, 4 * C, 4 * C * C, C};
    s.insert(s.end(), std::begin(block), std::end(block));
  }
  s.push_back(C);
  s.push_back(C);
  return s;
}

// Tensor list over one buffer: the whole buffer (layout 0) or GPT-2's tensors (1).
std::vector<int64_t> layout_sizes(int layout, int64_t n) {
  return layout == 0 ? std::vector<int64_t>{n} : gpt2_tensor_sizes();
}

const char* layout_name(int layout) { return layout == 0 ? "flat" : "gpt2-148-tensors"; }

void set_rate(benchmark::State& state, double bytes, const std::string& label) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label);
}

// Finite non-zero host data of `dtype`.
std::vector<uint8_t> host_data(DType dtype, int64_t n) {
  std::vector<uint8_t> b(n * dtype_size(dtype));
  for (int64_t i = 0; i < n; ++i) {
    const float x = static_cast<float>((i * 7919) % 2001 - 1000) * 1e-3f + 1e-4f;
    if (dtype == DType::kF32) {
      reinterpret_cast<float*>(b.data())[i] = x;
    } else {
      reinterpret_cast<BFloat16*>(b.data())[i] = float_to_bfloat16(x);
    }
  }
  return b;
}

// Args: dtype, layout, n (flat only).
void BM_L2NormCpu(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int layout = static_cast<int>(state.range(1));
  const auto sizes = layout_sizes(layout, state.range(2));
  int64_t n = 0;
  for (int64_t s : sizes) n += s;
  const auto data = host_data(dtype, n);
  std::vector<TensorRef> refs;
  int64_t at = 0;
  for (int64_t s : sizes) {
    refs.push_back(TensorRef{data.data() + at * dtype_size(dtype), s});
    at += s;
  }
  std::vector<float> per(refs.size());
  float norm = 0, found = 0;
  for (auto _ : state) {
    if (!l2_norm_cpu(&norm, per.data(), &found, nullptr, refs.data(), refs.size(), dtype, 0).ok()) {
      state.SkipWithError("l2_norm_cpu failed");
      break;
    }
    benchmark::DoNotOptimize(norm);
  }
  set_rate(state, static_cast<double>(n) * dtype_size(dtype),
           std::string("cpu ") + dtype_name(dtype) + " " + layout_name(layout) +
               " n=" + std::to_string(n));
}
BENCHMARK(BM_L2NormCpu)
    ->ArgsProduct({{0, 1}, {0}, {1 << 22}})
    ->ArgsProduct({{0, 1}, {1}, {0}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// acc += part with the results' norm over one flat pair of buffers, gemini's
// gradient fold (a 50M-element chunk: far beyond the caches). Args: dtype, ISA
// (CpuIsa), n.
void BM_AccumulateCpu(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const CpuIsa isa = static_cast<CpuIsa>(state.range(1));
  const int64_t n = state.range(2);
  if (!cpu_isa_available(isa)) {
    state.SkipWithError("this CPU lacks the instruction set");
    return;
  }
  auto acc = host_data(dtype, n);
  const auto part = host_data(dtype, n);
  const AccumulateTensor t{acc.data(), part.data(), n};
  float norm = 0, found = 0;
  for (auto _ : state) {
    if (!accumulate_cpu(&norm, &found, &t, 1, dtype, 0, isa).ok()) {
      state.SkipWithError("accumulate_cpu failed");
      break;
    }
    benchmark::DoNotOptimize(norm);
  }
  set_rate(state, 3.0 * n * dtype_size(dtype),
           std::string("cpu ") + dtype_name(dtype) + " " + cpu_isa_name(isa) + " n=" + std::to_string(n));
}
BENCHMARK(BM_AccumulateCpu)
    ->ArgsProduct({{0, 1},
                   {static_cast<int>(CpuIsa::kScalar), static_cast<int>(CpuIsa::kAvx2),
                    static_cast<int>(CpuIsa::kAvx512)},
                   {50 << 20}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// In-place scale (unscale / clip) of the same lists. Args: dtype, layout, n.
void BM_ScaleCpu(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int layout = static_cast<int>(state.range(1));
  const auto sizes = layout_sizes(layout, state.range(2));
  int64_t n = 0;
  for (int64_t s : sizes) n += s;
  auto data = host_data(dtype, n);
  std::vector<ScaleTensor> ts;
  int64_t at = 0;
  for (int64_t s : sizes) {
    void* p = data.data() + at * dtype_size(dtype);
    ts.push_back(ScaleTensor{p, p, s});
    at += s;
  }
  float found = 0;
  int iter = 0;
  for (auto _ : state) {
    // Alternate x2 and x0.5 so values stay put however many iterations run.
    if (!scale_cpu(&found, ts.data(), nullptr, ts.size(), dtype, dtype, (iter++ & 1) ? 0.5f : 2.0f)
             .ok()) {
      state.SkipWithError("scale_cpu failed");
      break;
    }
    benchmark::ClobberMemory();
  }
  set_rate(state, 2.0 * n * dtype_size(dtype),
           std::string("cpu in-place ") + dtype_name(dtype) + " " + layout_name(layout) +
               " n=" + std::to_string(n));
}
BENCHMARK(BM_ScaleCpu)
    ->ArgsProduct({{0, 1}, {0}, {1 << 22}})
    ->ArgsProduct({{0, 1}, {1}, {0}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

#if COLOSSAL_WITH_CUDA
// Args: dtype, layout (0 = one 124,439,808-element tensor, 1 = GPT-2's 148 tensors).
void BM_L2NormCuda(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int layout = static_cast<int>(state.range(1));
  const auto gpt2 = gpt2_tensor_sizes();
  int64_t n = 0;
  for (int64_t s : gpt2) n += s;
  const auto sizes = layout_sizes(layout, n);
  const auto host = host_data(dtype, n);
  uint8_t* data = nullptr;
  float* out = nullptr;
  if (cudaMalloc(&data, host.size()) != cudaSuccess ||
      cudaMalloc(&out, (sizes.size() + 2) * 4) != cudaSuccess) {
    state.SkipWithError("no CUDA device or out of memory");
    return;
  }
  cudaMemcpy(data, host.data(), host.size(), cudaMemcpyHostToDevice);
  std::vector<TensorRef> refs;
  int64_t at = 0;
  for (int64_t s : sizes) {
    refs.push_back(TensorRef{data + at * dtype_size(dtype), s});
    at += s;
  }
  const int64_t bytes = l2_norm_cuda_scratch_bytes(refs.data(), refs.size());
  void* scratch = nullptr;
  cudaMalloc(&scratch, bytes);
  testing::CudaBenchTimer timer;
  for (auto _ : state) {
    const bool ok = timer.time(state, [&] {
      return l2_norm_cuda(out, out + 2, out + 1, nullptr, refs.data(), scratch, bytes, refs.size(),
                          dtype, 0.0f, nullptr);
    });
    if (!ok) break;
  }
  set_rate(state, static_cast<double>(n) * dtype_size(dtype),
           std::string(dtype_name(dtype)) + " " + layout_name(layout) + " n=" + std::to_string(n));
  cudaFree(scratch);
  cudaFree(out);
  cudaFree(data);
}
BENCHMARK(BM_L2NormCuda)->ArgsProduct({{0, 1}, {0, 1}})->UseManualTime()->Unit(benchmark::kMicrosecond);

// In-place scale with a device found_inf flag. Args: dtype, layout.
void BM_ScaleCuda(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int layout = static_cast<int>(state.range(1));
  const auto gpt2 = gpt2_tensor_sizes();
  int64_t n = 0;
  for (int64_t s : gpt2) n += s;
  const auto sizes = layout_sizes(layout, n);
  const auto host = host_data(dtype, n);
  uint8_t* data = nullptr;
  float* found = nullptr;
  if (cudaMalloc(&data, host.size()) != cudaSuccess || cudaMalloc(&found, 4) != cudaSuccess) {
    state.SkipWithError("no CUDA device or out of memory");
    return;
  }
  cudaMemcpy(data, host.data(), host.size(), cudaMemcpyHostToDevice);
  cudaMemset(found, 0, 4);
  std::vector<ScaleTensor> ts;
  int64_t at = 0;
  for (int64_t s : sizes) {
    void* p = data + at * dtype_size(dtype);
    ts.push_back(ScaleTensor{p, p, s});
    at += s;
  }
  const int64_t bytes = scale_cuda_scratch_bytes(ts.size());
  void* scratch = nullptr;
  cudaMalloc(&scratch, bytes);
  testing::CudaBenchTimer timer;
  int iter = 0;
  for (auto _ : state) {
    const bool ok = timer.time(state, [&] {
      return scale_cuda(found, ts.data(), nullptr, scratch, bytes, ts.size(), dtype, dtype,
                        (iter++ & 1) ? 0.5f : 2.0f, nullptr);
    });
    if (!ok) break;
  }
  set_rate(state, 2.0 * n * dtype_size(dtype),
           std::string("in-place ") + dtype_name(dtype) + " " + layout_name(layout) +
               " n=" + std::to_string(n));
  cudaFree(scratch);
  cudaFree(found);
  cudaFree(data);
}
BENCHMARK(BM_ScaleCuda)->ArgsProduct({{0, 1}, {0, 1}})->UseManualTime()->Unit(benchmark::kMicrosecond);

// acc += part with the sum's norm in the CPU's order, over GPT-2 small's
// gradients as one flat tensor (gemini sums one chunk a call). Arg: dtype.
void BM_AccumulateCuda(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  int64_t n = 0;
  for (int64_t s : gpt2_tensor_sizes()) n += s;
  const auto host = host_data(dtype, n);
  uint8_t *acc = nullptr, *part = nullptr;
  float* out = nullptr;
  if (cudaMalloc(&acc, host.size()) != cudaSuccess || cudaMalloc(&part, host.size()) != cudaSuccess ||
      cudaMalloc(&out, 8) != cudaSuccess) {
    state.SkipWithError("no CUDA device or out of memory");
    return;
  }
  cudaMemcpy(acc, host.data(), host.size(), cudaMemcpyHostToDevice);
  cudaMemset(part, 0, host.size());  // the sums stay put however many iterations run
  const AccumulateTensor t{acc, part, n};
  const int64_t bytes = accumulate_cuda_scratch_bytes(&t, 1);
  void* scratch = nullptr;
  cudaMalloc(&scratch, bytes);
  testing::CudaBenchTimer timer;
  for (auto _ : state) {
    const bool ok = timer.time(state, [&] {
      return accumulate_cuda(out, out + 1, &t, scratch, bytes, 1, dtype, nullptr);
    });
    if (!ok) break;
  }
  set_rate(state, 3.0 * n * dtype_size(dtype), std::string(dtype_name(dtype)) + " flat n=" + std::to_string(n));
  cudaFree(scratch);
  cudaFree(out);
  cudaFree(part);
  cudaFree(acc);
}
BENCHMARK(BM_AccumulateCuda)->DenseRange(0, 1)->UseManualTime()->Unit(benchmark::kMicrosecond);
#endif

}  // namespace
}  // namespace colossal::kernels::multi_tensor

BENCHMARK_MAIN();
