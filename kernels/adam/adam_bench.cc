// Adam step throughput in decimal GB/s and params/s. Bytes moved per parameter:
// read p, m, v (12) + grad (4 or 2) and write p, m, v (12) + model copy (0 or 2),
// as tools/bench/torch_adam.py counts them. GPT-2 small: 124,439,808 parameters,
// as one flat buffer or as its 148 tensors (the same flat buffers carved up).
// Split masters (bf16 grads; the master as the bf16 value and its low half):
// read hi, lo (4), m, v (8), grad (2), write hi, lo, m, v (12): 26 bytes.
// Run: bazel run -c opt //kernels/adam:adam_bench
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/adam/adam.h"
#include "kernels/common/half.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>

#include "tests/util/cuda_bench_timer.h"
#endif

namespace colossal::kernels::adam {
namespace {

// Case 0: fp32 grads, no model copy. Case 1: bf16 grads and a bf16 model copy.
struct Case {
  DType grad;
  bool copy;
  const char* name;
};
constexpr Case kCases[] = {{DType::kF32, false, "grad=float32 copy=none"},
                           {DType::kBF16, true, "grad=bfloat16 copy=bfloat16"}};

double bytes_per_param(const Case& c) {
  return 24.0 + static_cast<double>(dtype_size(c.grad)) + (c.copy ? 2.0 : 0.0);
}

constexpr Case kSplitCase = {DType::kBF16, false, "grad=bfloat16 split master"};
constexpr double kSplitBytes = 26.0;

void set_counters(benchmark::State& state, const Case& c, int64_t n, const std::string& label) {
  const double per_param = &c == &kSplitCase ? kSplitBytes : bytes_per_param(c);
  state.counters["GB/s"] = benchmark::Counter(per_param * n * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["params/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label + " " + c.name + " n=" + std::to_string(n));
}

AdamOptions bench_options() {
  AdamOptions o;
  o.lr = 1e-4f;  // small: parameters stay in range however many iterations run
  o.weight_decay = 0.1f;
  o.step = 10;
  return o;
}

// A host buffer as framework allocators hand out (core/alloc, PyTorch's c10):
// 64-byte aligned, and large ones 2 MiB aligned with transparent huge pages
// requested, so that streaming 3.5 GB does not walk 4 KiB page tables.
template <typename T>
struct Aligned {
  T* data;
  explicit Aligned(int64_t n) {
    const size_t bytes = static_cast<size_t>(n) * sizeof(T);
    const size_t align = bytes >= (size_t{2} << 20) ? (size_t{2} << 20) : 64;
    data = static_cast<T*>(std::aligned_alloc(align, (bytes + align - 1) / align * align));
    if (align > 64) madvise(data, (bytes + align - 1) / align * align, MADV_HUGEPAGE);
  }
  Aligned(const Aligned&) = delete;
  ~Aligned() { std::free(data); }
};

// Args: case, n, ISA (CpuIsa), threads (0 = all).
void BM_AdamCpu(benchmark::State& state) {
  const Case& c = kCases[state.range(0)];
  const int64_t n = state.range(1);
  const AdamCpuOptions cpu{static_cast<CpuIsa>(state.range(2)), static_cast<int>(state.range(3))};
  if (!cpu_isa_available(cpu.isa)) {
    state.SkipWithError("ISA not available on this CPU");
    return;
  }
  Aligned<float> p(n), m(n), v(n);
  Aligned<uint16_t> copy(n);
  Aligned<uint8_t> g(n * dtype_size(c.grad));
  for (int64_t i = 0; i < n; ++i) {
    const float x = static_cast<float>((i * 7919) % 2001 - 1000) * 1e-3f;
    p.data[i] = x;
    m.data[i] = 0.01f * x;
    v.data[i] = 1e-4f * x * x;
    if (c.grad == DType::kF32) {
      reinterpret_cast<float*>(g.data)[i] = 0.5f * x + 1e-3f;
    } else {
      reinterpret_cast<BFloat16*>(g.data)[i] = float_to_bfloat16(0.5f * x + 1e-3f);
    }
  }
  const AdamOptions o = bench_options();
  for (auto _ : state) {
    if (!adam_step_cpu(p.data, m.data, v.data, c.copy ? copy.data : nullptr, g.data, nullptr, n,
                       c.grad, DType::kBF16, o, cpu)
             .ok()) {
      state.SkipWithError("adam_step_cpu failed");
      break;
    }
    benchmark::ClobberMemory();
  }
  set_counters(state, c, n, std::string("cpu ") + cpu_isa_name(cpu.isa) +
                                " threads=" + std::to_string(state.range(3)));
}
BENCHMARK(BM_AdamCpu)
    ->ArgsProduct({{0, 1}, {1 << 20, 124439808}, {static_cast<int>(CpuIsa::kAuto)}, {0}})
    ->ArgsProduct({{0},
                   {1 << 22},
                   {static_cast<int>(CpuIsa::kScalar), static_cast<int>(CpuIsa::kAvx2),
                    static_cast<int>(CpuIsa::kAvx512)},
                   {1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Split masters (adam_step_split_cpu) over the same data as case 1. Args: n.
void BM_AdamSplitCpu(benchmark::State& state) {
  const int64_t n = state.range(0);
  Aligned<uint16_t> hi(n), g(n);
  Aligned<int16_t> lo(n);
  Aligned<float> m(n), v(n);
  for (int64_t i = 0; i < n; ++i) {
    const float x = static_cast<float>((i * 7919) % 2001 - 1000) * 1e-3f;
    hi.data[i] = float_to_bfloat16(x).bits;
    lo.data[i] = static_cast<int16_t>(i * 31);
    m.data[i] = 0.01f * x;
    v.data[i] = 1e-4f * x * x;
    g.data[i] = float_to_bfloat16(0.5f * x + 1e-3f).bits;
  }
  const AdamOptions o = bench_options();
  for (auto _ : state) {
    if (!adam_step_split_cpu(hi.data, lo.data, m.data, v.data, g.data, nullptr, n, DType::kBF16, o).ok()) {
      state.SkipWithError("adam_step_split_cpu failed");
      break;
    }
    benchmark::ClobberMemory();
  }
  set_counters(state, kSplitCase, n, "cpu auto threads=0");
}
BENCHMARK(BM_AdamSplitCpu)->Arg(1 << 20)->Arg(124439808)->Unit(benchmark::kMillisecond)->UseRealTime();

#if COLOSSAL_WITH_CUDA
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

int64_t total(const std::vector<int64_t>& sizes) {
  int64_t n = 0;
  for (int64_t s : sizes) n += s;
  return n;
}

// Device buffers of one benchmark case, filled with finite non-zero data.
struct DeviceSet {
  float *p = nullptr, *m = nullptr, *v = nullptr;
  void *g = nullptr, *copy = nullptr;
  bool ok = false;

  DeviceSet(const Case& c, int64_t n) {
    std::vector<float> host(n);
    for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>((i * 7919) % 2001 - 1000) * 1e-3f;
    const size_t gb = n * dtype_size(c.grad);
    ok = cudaMalloc(&p, n * 4) == cudaSuccess && cudaMalloc(&m, n * 4) == cudaSuccess &&
         cudaMalloc(&v, n * 4) == cudaSuccess && cudaMalloc(&g, gb) == cudaSuccess &&
         (!c.copy || cudaMalloc(&copy, n * 2) == cudaSuccess);
    if (!ok) return;
    cudaMemcpy(p, host.data(), n * 4, cudaMemcpyHostToDevice);
    for (float& x : host) x *= 0.01f;
    cudaMemcpy(m, host.data(), n * 4, cudaMemcpyHostToDevice);
    for (float& x : host) x = x * x + 1e-6f;
    cudaMemcpy(v, host.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemset(g, 0x3c, gb);  // 0.0115 as float32 / bfloat16 patterns
  }
  ~DeviceSet() {
    cudaFree(p);
    cudaFree(m);
    cudaFree(v);
    cudaFree(g);
    cudaFree(copy);
  }
};

// Args: case, layout (0 = one flat buffer, 1 = GPT-2's 148 tensors with scratch).
void BM_AdamCuda(benchmark::State& state) {
  const Case& c = kCases[state.range(0)];
  const bool split = state.range(1) == 1;
  const auto sizes = gpt2_tensor_sizes();
  const int64_t n = total(sizes);
  DeviceSet d(c, n);
  if (!d.ok) {
    state.SkipWithError("no CUDA device or out of memory");
    return;
  }
  std::vector<AdamTensor> tensors;
  int64_t at = 0;
  const size_t gs = dtype_size(c.grad);
  for (int64_t s : sizes) {
    tensors.push_back(AdamTensor{d.p + at, d.m + at, d.v + at, static_cast<char*>(d.g) + at * gs,
                                 c.copy ? static_cast<char*>(d.copy) + at * 2 : nullptr, s});
    at += s;
  }
  const int64_t scratch_bytes = adam_cuda_scratch_bytes(tensors.size());
  void* scratch = nullptr;
  cudaMalloc(&scratch, scratch_bytes);
  const AdamOptions o = bench_options();
  testing::CudaBenchTimer timer;
  for (auto _ : state) {
    const bool ok = timer.time(state, [&] {
      return split ? adam_step_tensors_cuda(tensors.data(), nullptr, scratch, scratch_bytes,
                                            tensors.size(), c.grad, DType::kBF16, o, nullptr)
                   : adam_step_cuda(d.p, d.m, d.v, d.copy, d.g, nullptr, n, c.grad, DType::kBF16,
                                    o, nullptr);
    });
    if (!ok) break;
  }
  set_counters(state, c, n, split ? "gpt2-148-tensors" : "flat");
  cudaFree(scratch);
}
BENCHMARK(BM_AdamCuda)->ArgsProduct({{0, 1}, {0, 1}})->UseManualTime()->Unit(benchmark::kMicrosecond);

// Split masters on the device, one flat buffer of GPT-2 small's size: hi in
// the model copy's buffer, lo in the float32 master's (half of it used).
void BM_AdamSplitCuda(benchmark::State& state) {
  const Case& c = kCases[1];
  const int64_t n = total(gpt2_tensor_sizes());
  DeviceSet d(c, n);
  if (!d.ok) {
    state.SkipWithError("no CUDA device or out of memory");
    return;
  }
  const AdamOptions o = bench_options();
  testing::CudaBenchTimer timer;
  for (auto _ : state) {
    const bool ok = timer.time(state, [&] {
      return adam_step_split_cuda(static_cast<uint16_t*>(d.copy), reinterpret_cast<int16_t*>(d.p), d.m,
                                  d.v, d.g, nullptr, n, DType::kBF16, o, nullptr);
    });
    if (!ok) break;
  }
  set_counters(state, kSplitCase, n, "flat");
}
BENCHMARK(BM_AdamSplitCuda)->UseManualTime()->Unit(benchmark::kMicrosecond);
#endif

}  // namespace
}  // namespace colossal::kernels::adam

BENCHMARK_MAIN();
