// Softmax cross-entropy throughput in decimal GB/s. Run:
//   bazel run -c opt //kernels/loss:loss_bench
//
// Byte counts (the per-row int32/float32 vectors, < 0.01%, are left out):
//   fused:    "GB/s" counts what the kernel moves: logits read once, dlogits
//             written once, plus the part of each row that does not fit in
//             shared memory read a second time (bf16 V = 128256 only);
//             "ideal_GB/s" counts 1 read + 1 write, the convention of
//             tools/bench/torch_loss.py (F.cross_entropy forward + backward).
//   forward:  one read of the logits.   backward: one read + one write.
//   vocab_shard_* (one shard of tensor parallelism: columns [v_start, v_start
//   + v) of a v_real vocabulary): max and sum_exp one read of the shard's
//   real columns, backward one read + one write of the shard.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/half.h"
#include "kernels/loss/loss.h"
#include "kernels/loss/loss_plan.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>

#include "tests/util/cuda_bench_timer.h"
#endif

namespace colossal::kernels::loss {
namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kBF16};

// n * v logits uniform in [-4, 4) as raw bytes of `dtype`, and targets in [0, v_real).
std::vector<uint8_t> random_logits(DType dtype, int64_t n, int64_t v) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<uint8_t> bytes(n * v * dtype_size(dtype));
  for (int64_t i = 0; i < n * v; ++i) {
    const float x = dist(rng);
    if (dtype == DType::kBF16) {
      reinterpret_cast<BFloat16*>(bytes.data())[i] = float_to_bfloat16(x);
    } else {
      reinterpret_cast<float*>(bytes.data())[i] = x;
    }
  }
  return bytes;
}

std::vector<int32_t> random_targets(int64_t n, int64_t v_real) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> cls(0, static_cast<int32_t>(v_real - 1));
  std::vector<int32_t> t(n);
  for (auto& x : t) x = cls(rng);
  return t;
}

std::string label(DType dtype, int64_t n, int64_t v, int64_t v_real) {
  std::string s = std::string(dtype_name(dtype)) + " n=" + std::to_string(n) + " v=" + std::to_string(v);
  if (v_real != v) s += " v_real=" + std::to_string(v_real);
  return s;
}

void BM_CrossEntropyFusedCpu(benchmark::State& state) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t n = state.range(1), v = state.range(2), v_real = state.range(3);
  const auto logits = random_logits(dtype, n, v);
  const auto targets = random_targets(n, v_real);
  std::vector<uint8_t> dlogits(logits.size());
  std::vector<float> rows(n), lse(n);
  float loss = 0;
  const CrossEntropyOptions opts;
  for (auto _ : state) {
    if (!cross_entropy_fused_cpu(&loss, rows.data(), lse.data(), dlogits.data(), logits.data(),
                                 targets.data(), 1.0f, n, v, v_real, dtype, opts)
             .ok()) {
      state.SkipWithError("cross_entropy_fused_cpu failed");
      break;
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(2e-9 * logits.size(),
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label(dtype, n, v, v_real));
}
// The CPU recipe's head: 1024 rows (micro-batch 8 x 128) of the padded vocabulary.
BENCHMARK(BM_CrossEntropyFusedCpu)
    ->Args({0, 16, 50257, 50257})
    ->Args({1, 16, 50257, 50257})
    ->Args({0, 1024, 50304, 50257});

#if COLOSSAL_WITH_CUDA
enum class Which { kFused, kForward, kBackward, kShardMax, kShardSumExp, kShardBackward };

// Bytes of logits read again by the fused kernel: the part of each row beyond
// what shared memory holds (0 when a row fits). The kernel's static shared
// memory is ~0.5 KB; assuming 1 KB errs towards counting fewer bytes.
double reread_bytes(DType dtype, int64_t n, int64_t v) {
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    return 0;
  }
  const int es = static_cast<int>(dtype_size(dtype));
  const int64_t body = internal::row_vectors(v, 16, es);
  const int64_t cached = internal::fused_cache_vectors(v, 16, es, optin, 1024);
  return static_cast<double>(n) * static_cast<double>(body - cached) * 16.0;
}

// Args: dtype index, n, v, v_real (and v_start for the shard cases).
void run_cuda(benchmark::State& state, Which which) {
  const DType dtype = kTypes[state.range(0)];
  const int64_t n = state.range(1), v = state.range(2), v_real = state.range(3);
  const bool shard = which >= Which::kShardMax;
  const int64_t v_start = shard ? state.range(4) : 0;
  const size_t bytes = n * v * dtype_size(dtype);
  void *logits = nullptr, *dlogits = nullptr;
  float *rows = nullptr, *lse = nullptr, *loss = nullptr, *sums = nullptr;
  int32_t* targets = nullptr;
  if (cudaMalloc(&logits, bytes) != cudaSuccess || cudaMalloc(&dlogits, bytes) != cudaSuccess ||
      cudaMalloc(&rows, n * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&lse, n * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&sums, n * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&loss, sizeof(float)) != cudaSuccess ||
      cudaMalloc(&targets, n * sizeof(int32_t)) != cudaSuccess) {
    state.SkipWithError("no CUDA device or out of memory");
    return;
  }
  const auto host_logits = random_logits(dtype, n, v);
  const auto host_targets = random_targets(n, v_real);
  cudaMemcpy(logits, host_logits.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemcpy(targets, host_targets.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice);
  const CrossEntropyOptions opts;  // kMean
  // Backward reads the lse of a forward run; a shard's backward its max
  // (in lse) and sum (in sums), here the shard's own.
  const bool ready =
      shard ? vocab_shard_max_cuda(lse, rows, logits, targets, n, v, v_start, v_real, -100, dtype,
                                   nullptr)
                      .ok() &&
                  vocab_shard_sum_exp_cuda(sums, logits, lse, n, v, v_start, v_real, dtype, nullptr)
                      .ok()
            : cross_entropy_forward_cuda(loss, rows, lse, logits, targets, n, v, v_real, dtype,
                                         opts, nullptr)
                  .ok();
  if (!ready) {
    state.SkipWithError("forward failed");
    return;
  }
  testing::CudaBenchTimer timer;
  for (auto _ : state) {
    const bool ok = timer.time(state, [&] {
      KernelStatus s;
      switch (which) {
        case Which::kFused:
          s = cross_entropy_fused_cuda(loss, rows, nullptr, dlogits, logits, targets, 1.0f, n, v,
                                       v_real, dtype, opts, nullptr);
          break;
        case Which::kForward:
          s = cross_entropy_forward_cuda(loss, rows, lse, logits, targets, n, v, v_real, dtype,
                                         opts, nullptr);
          break;
        case Which::kBackward:
          s = cross_entropy_backward_cuda(dlogits, logits, lse, targets, 1.0f, n, v, v_real, dtype,
                                          opts, nullptr);
          break;
        case Which::kShardMax:
          s = vocab_shard_max_cuda(lse, rows, logits, targets, n, v, v_start, v_real, -100, dtype,
                                   nullptr);
          break;
        case Which::kShardSumExp:
          s = vocab_shard_sum_exp_cuda(sums, logits, lse, n, v, v_start, v_real, dtype, nullptr);
          break;
        case Which::kShardBackward:
          s = vocab_shard_backward_cuda(dlogits, logits, lse, sums, targets, 1.0f, n, v, v_start,
                                        v_real, -100, dtype, nullptr);
          break;
      }
      // A launch error the call did not report.
      const cudaError_t e = s.ok() ? cudaGetLastError() : cudaSuccess;
      return e == cudaSuccess ? s : KernelStatus::cuda_error(e, "CUDA error");
    });
    if (!ok) break;
  }
  const double logit_bytes = static_cast<double>(bytes);
  double moved = 0;
  switch (which) {
    case Which::kFused:
      moved = 2 * logit_bytes + reread_bytes(dtype, n, v);
      state.counters["ideal_GB/s"] = benchmark::Counter(
          2e-9 * logit_bytes, benchmark::Counter::kIsIterationInvariantRate);
      break;
    case Which::kForward: moved = logit_bytes * v_real / v; break;
    case Which::kBackward:
    case Which::kShardBackward: moved = 2 * logit_bytes; break;
    case Which::kShardMax:
    case Which::kShardSumExp:
      moved = logit_bytes * std::clamp<int64_t>(v_real - v_start, 0, v) / v;
      break;
  }
  state.counters["GB/s"] =
      benchmark::Counter(1e-9 * moved, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label(dtype, n, v, v_real) + (shard ? " v_start=" + std::to_string(v_start) : ""));
  cudaFree(logits);
  cudaFree(dlogits);
  cudaFree(rows);
  cudaFree(lse);
  cudaFree(loss);
  cudaFree(sums);
  cudaFree(targets);
}

void BM_CrossEntropyFusedCuda(benchmark::State& state) { run_cuda(state, Which::kFused); }
void BM_CrossEntropyForwardCuda(benchmark::State& state) { run_cuda(state, Which::kForward); }
void BM_CrossEntropyBackwardCuda(benchmark::State& state) { run_cuda(state, Which::kBackward); }

// The shapes: GPT-2 (8k tokens x 50257) in bf16 and fp32, Llama-3
// (4k tokens x 128256) in bf16; plus llm.c's padded vocabulary.
BENCHMARK(BM_CrossEntropyFusedCuda)
    ->Args({1, 8 * 1024, 50257, 50257})
    ->Args({0, 8 * 1024, 50257, 50257})
    ->Args({1, 4096, 128256, 128256})
    ->Args({1, 8 * 1024, 50304, 50257})
    ->UseManualTime();
BENCHMARK(BM_CrossEntropyForwardCuda)->Args({1, 8 * 1024, 50257, 50257})->UseManualTime();
BENCHMARK(BM_CrossEntropyBackwardCuda)->Args({1, 8 * 1024, 50257, 50257})->UseManualTime();

void BM_VocabShardMaxCuda(benchmark::State& state) { run_cuda(state, Which::kShardMax); }
void BM_VocabShardSumExpCuda(benchmark::State& state) { run_cuda(state, Which::kShardSumExp); }
void BM_VocabShardBackwardCuda(benchmark::State& state) { run_cuda(state, Which::kShardBackward); }

// The last of 2 tensor-parallel shards of GPT-2's padded vocabulary (50304).
BENCHMARK(BM_VocabShardMaxCuda)->Args({1, 8 * 1024, 25152, 50257, 25152})->UseManualTime();
BENCHMARK(BM_VocabShardSumExpCuda)->Args({1, 8 * 1024, 25152, 50257, 25152})->UseManualTime();
BENCHMARK(BM_VocabShardBackwardCuda)->Args({1, 8 * 1024, 25152, 50257, 25152})->UseManualTime();
#endif

}  // namespace
}  // namespace colossal::kernels::loss

BENCHMARK_MAIN();
