// Bandwidth of the scaled masked / causal softmax in decimal GB/s. Bytes per call,
// as tools/bench/torch_softmax.py counts them for torch.softmax and its backward:
//   forward:  read x + write y            = 2 * elements * element size
//   backward: read y + read dy + write dx = 3 * elements * element size
// The mask (1 byte per [b, 1, sq, sk] element, read once per head) is not
// counted, and causal calls are counted in full although they skip reading the
// excluded half of their inputs, so their GB/s can pass the copy bandwidth.
// Run: bazel run -c opt //kernels/softmax:softmax_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/common/half.h"
#include "kernels/softmax/softmax.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>

#include "tests/util/cuda_bench_timer.h"
#endif

namespace colossal::kernels::softmax {
namespace {

struct Shape {
  int64_t batch, heads, sq, sk;
  int64_t elements() const { return batch * heads * sq * sk; }
};

// GPT-2 attention scores at 1k context, a 4k context, and a 50k-long row
// (staged in shared memory: 100 KB bfloat16 rows, two blocks per SM).
constexpr Shape kShapes[] = {{8, 12, 1024, 1024}, {2, 12, 4096, 4096}, {1, 4, 256, 50000}};
constexpr DType kTypes[] = {DType::kF32, DType::kBF16};
constexpr float kScale = 0.125f;  // 1 / sqrt(head dim 64)

enum Op : int { kMaskedForward, kCausalForward, kMaskedBackward, kCausalBackward };

bool is_forward(Op op) { return op == kMaskedForward || op == kCausalForward; }

std::string label(Op op, DType dtype, const Shape& s) {
  const char* names[] = {"masked fwd", "causal fwd", "masked bwd", "causal bwd"};
  return std::string(names[op]) + " " + dtype_name(dtype) + " [" + std::to_string(s.batch) + "," +
         std::to_string(s.heads) + "," + std::to_string(s.sq) + "," + std::to_string(s.sk) + "]";
}

// n random values in [-4, 4) as `dtype` bytes.
std::vector<uint8_t> random_bytes(DType dtype, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<uint8_t> out(n * dtype_size(dtype));
  (void)dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i) reinterpret_cast<T*>(out.data())[i] = from_float<T>(dist(rng));
    return KernelStatus();
  });
  return out;
}

// The causal pattern as an explicit [batch, 1, sq, sk] mask (1 = excluded).
std::vector<uint8_t> causal_mask(const Shape& s) {
  std::vector<uint8_t> mask(s.batch * s.sq * s.sk);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t i = 0; i < s.sq; ++i) {
      for (int64_t j = 0; j < s.sk; ++j) {
        mask[(b * s.sq + i) * s.sk + j] = j > i + (s.sk - s.sq) ? 1 : 0;
      }
    }
  }
  return mask;
}

KernelStatus run_cpu(Op op, void* out, const void* in, const void* y, const uint8_t* mask,
                     const Shape& s, DType dtype) {
  switch (op) {
    case kMaskedForward:
      return scaled_masked_softmax_forward_cpu(out, in, mask, s.batch, s.heads, s.sq, s.sk, dtype,
                                               kScale);
    case kCausalForward:
      return scaled_causal_softmax_forward_cpu(out, in, s.batch * s.heads, s.sq, s.sk, dtype,
                                               kScale);
    case kMaskedBackward:
      return scaled_masked_softmax_backward_cpu(out, in, y, s.batch, s.heads, s.sq, s.sk, dtype,
                                                kScale);
    case kCausalBackward:
      return scaled_causal_softmax_backward_cpu(out, in, y, s.batch * s.heads, s.sq, s.sk, dtype,
                                                kScale);
  }
  return KernelStatus::invalid_argument("unknown op");
}

void set_counters(benchmark::State& state, Op op, DType dtype, const Shape& s) {
  const double bytes = (is_forward(op) ? 2.0 : 3.0) * s.elements() * dtype_size(dtype);
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label(op, dtype, s));
}

// CPU at one 12-head attention layer of 512 tokens.
void BM_SoftmaxCpu(benchmark::State& state, Op op) {
  const DType dtype = kTypes[state.range(0)];
  const Shape s{1, 12, 512, 512};
  const auto x = random_bytes(dtype, s.elements(), 1);
  const auto mask = causal_mask(s);
  std::vector<uint8_t> y(x.size()), out(x.size());
  if (!run_cpu(kCausalForward, y.data(), x.data(), nullptr, nullptr, s, dtype).ok()) {
    state.SkipWithError("forward failed");
    return;
  }
  for (auto _ : state) {
    if (!run_cpu(op, out.data(), x.data(), y.data(), mask.data(), s, dtype).ok()) {
      state.SkipWithError("softmax cpu failed");
      break;
    }
    benchmark::ClobberMemory();
  }
  set_counters(state, op, dtype, s);
}
BENCHMARK_CAPTURE(BM_SoftmaxCpu, masked_forward, kMaskedForward)->Arg(0)->Arg(1)->ArgName("dtype");
BENCHMARK_CAPTURE(BM_SoftmaxCpu, causal_backward, kCausalBackward)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("dtype");

#if COLOSSAL_WITH_CUDA
KernelStatus run_cuda(Op op, void* out, const void* in, const void* y, const uint8_t* mask,
                      const Shape& s, DType dtype) {
  switch (op) {
    case kMaskedForward:
      return scaled_masked_softmax_forward_cuda(out, in, mask, s.batch, s.heads, s.sq, s.sk, dtype,
                                                kScale, nullptr);
    case kCausalForward:
      return scaled_causal_softmax_forward_cuda(out, in, s.batch * s.heads, s.sq, s.sk, dtype,
                                                kScale, nullptr);
    case kMaskedBackward:
      return scaled_masked_softmax_backward_cuda(out, in, y, s.batch, s.heads, s.sq, s.sk, dtype,
                                                 kScale, nullptr);
    case kCausalBackward:
      return scaled_causal_softmax_backward_cuda(out, in, y, s.batch * s.heads, s.sq, s.sk, dtype,
                                                 kScale, nullptr);
  }
  return KernelStatus::invalid_argument("unknown op");
}

// Fills a device buffer of n elements with random data: one random host chunk,
// copied over and over (the values only need to be non-zero and varied).
bool fill_device(void* dst, DType dtype, int64_t n, uint32_t seed) {
  const int64_t chunk = std::min<int64_t>(n, int64_t{1} << 22);
  const auto host = random_bytes(dtype, chunk, seed);
  const size_t es = dtype_size(dtype);
  for (int64_t done = 0; done < n; done += chunk) {
    const int64_t count = std::min(chunk, n - done);
    if (cudaMemcpy(static_cast<uint8_t*>(dst) + done * es, host.data(), count * es,
                   cudaMemcpyHostToDevice) != cudaSuccess) {
      return false;
    }
  }
  return true;
}

// Forward: out = softmax(in = x). Backward: out = dx from in = dy and y, where
// y is a real forward output.
void BM_SoftmaxCuda(benchmark::State& state, Op op) {
  const DType dtype = kTypes[state.range(0)];
  const Shape s = kShapes[state.range(1)];
  const size_t bytes = s.elements() * dtype_size(dtype);
  void *in = nullptr, *y = nullptr, *out = nullptr;
  uint8_t* mask = nullptr;
  const auto host_mask = causal_mask(s);
  bool ok =
      cudaMalloc(&in, bytes) == cudaSuccess && cudaMalloc(&y, bytes) == cudaSuccess &&
      cudaMalloc(&out, bytes) == cudaSuccess &&
      cudaMalloc(&mask, host_mask.size()) == cudaSuccess &&
      cudaMemcpy(mask, host_mask.data(), host_mask.size(), cudaMemcpyHostToDevice) == cudaSuccess &&
      fill_device(in, dtype, s.elements(), 1) && fill_device(y, dtype, s.elements(), 2);
  // y: the causal forward of random scores, so the backward sees real probabilities.
  ok = ok && run_cuda(kCausalForward, y, y, nullptr, nullptr, s, dtype).ok() &&
       cudaDeviceSynchronize() == cudaSuccess;
  if (!ok) {
    state.SkipWithError("no CUDA device, out of memory, or setup failed");
  } else {
    testing::CudaBenchTimer timer;
    for (auto _ : state) {
      if (!timer.time(
              state, [&] { return run_cuda(op, out, in, y, mask, s, dtype).ok(); },
              "softmax cuda failed")) {
        break;
      }
    }
    set_counters(state, op, dtype, s);
  }
  cudaFree(in);
  cudaFree(y);
  cudaFree(out);
  cudaFree(mask);
}
#define SOFTMAX_CUDA_BENCH(name, op)          \
  BENCHMARK_CAPTURE(BM_SoftmaxCuda, name, op) \
      ->ArgsProduct({{0, 1}, {0, 1, 2}})      \
      ->ArgNames({"dtype", "shape"})          \
      ->UseManualTime()                       \
      ->Unit(benchmark::kMicrosecond)
SOFTMAX_CUDA_BENCH(masked_forward, kMaskedForward);
SOFTMAX_CUDA_BENCH(causal_forward, kCausalForward);
SOFTMAX_CUDA_BENCH(masked_backward, kMaskedBackward);
SOFTMAX_CUDA_BENCH(causal_backward, kCausalBackward);
#undef SOFTMAX_CUDA_BENCH
#endif

}  // namespace
}  // namespace colossal::kernels::softmax

BENCHMARK_MAIN();
