// Throughput of the fused attention in TFLOP/s, counted as FlashAttention's
// and tools/bench/torch_attention.py's benchmarks count it (causal = half the
// dense matmul work):
//   forward:            4 * B * H * T^2 * D / 2    (Q K^T and P V; H query heads)
//                       4 * B * H * T^2 * D        (full mask: 2x the causal FLOPs)
//   forward + backward: 3.5 x the forward          (backward = 2.5 x: five matmuls)
// Shapes are causal unless the label says mask=full (B4 H16 T2048 D128 under
// the full mask); the Hopper kernels run the D96 row as head_dim 128 with zero
// columns.
// Inputs are read straight from a packed qkv [B, T, (H + 2 KV) D] (GPT-2's
// c_attn output [B, T, 3C] when KV = H; Llama's fused q|k|v with grouped-query
// heads when KV < H) and O / dO are [B, T, H D]; times are CUDA events around
// each call. The forward runs through each kernel explicitly (path=portable:
// mma.sync, sm_80+; path=hopper: wgmma + TMA, compute capability 9.0 only, an
// error elsewhere) and through the automatic choice (path=auto, what callers
// get). Forward + backward, every shape: path=auto (both automatic: on
// Hopper the fused dQ at head_dim 96 and 128), path=portable (both portable),
// path=hopper (the Hopper forward and the deterministic Hopper backward: dK/dV
// and dQ kernels), path=hopper_fused_dq (the Hopper forward and backward with
// dQ fused into dK/dV) and path=hopper+portable_bwd (the Hopper forward
// feeding the portable backward).
// The varlen layout (packed sequences of mixed lengths, cu_seqlens) has its own
// case: BM_AttentionVarlenCuda, forward and forward + backward.
// Run: bazel run -c opt //kernels/attention:attention_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_internal.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/half.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>

#include "tests/util/cuda_bench_timer.h"
#endif

namespace colossal::kernels::attention {
namespace {

struct Shape {
  int64_t B, H, KV, T, D;  // H query heads over KV key/value heads
  AttentionMask mask = AttentionMask::kCausal;
  int64_t qkv_width() const { return (H + 2 * KV) * D; }
};

// GPT-2 124M at 1k context (issue #6), a 2k context, head_dim 128; grouped-query
// heads: Llama-3.2-1B's attention (32 query heads, 8 kv heads, D 64) at 2k, and
// the same heads at D 128; then D 128 with those heads at long contexts (issue
// #20's FlashAttention-3 range), 16k tokens a batch; then the full mask at
// B4 H16 T2048 D128 and head_dim 96 (causal) at the same size.
constexpr Shape kShapes[] = {{16, 12, 12, 1024, 64},
                             {8, 12, 12, 2048, 64},
                             {4, 16, 16, 2048, 128},
                             {4, 32, 8, 2048, 64},
                             {4, 32, 8, 2048, 128},
                             {4, 32, 8, 4096, 128},
                             {2, 32, 8, 8192, 128},
                             {1, 32, 8, 16384, 128},
                             {4, 16, 16, 2048, 128, AttentionMask::kFull},
                             {4, 16, 16, 2048, 96}};
constexpr int kNumShapes = sizeof(kShapes) / sizeof(kShapes[0]);
constexpr DType kTypes[] = {DType::kBF16, DType::kF16};

double forward_flops(const Shape& s) {
  const double dense = 4.0 * s.B * s.H * static_cast<double>(s.T) * s.T * s.D;
  return s.mask == AttentionMask::kFull ? dense : dense / 2.0;
}

std::string label(const char* op, DType dtype, const Shape& s) {
  return std::string(op) + " " + dtype_name(dtype) + " B=" + std::to_string(s.B) +
         " H=" + std::to_string(s.H) + " KV=" + std::to_string(s.KV) + " T=" + std::to_string(s.T) +
         " D=" + std::to_string(s.D) + (s.mask == AttentionMask::kFull ? " mask=full" : "");
}

// CPU reference at a small size (it is the test oracle, not a fast path).
void BM_AttentionCpu(benchmark::State& state) {
  const Shape s{1, 2, 2, 128, 64};
  const int64_t C = s.H * s.D, n = s.B * s.T * 3 * C;
  std::vector<float> qkv(n), o(s.B * s.T * C), lse(s.B * s.H * s.T);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (float& x : qkv) x = dist(rng);
  for (auto _ : state) {
    if (!causal_attention_forward_cpu(o.data(), lse.data(), qkv.data(), qkv.data() + C,
                                      qkv.data() + 2 * C, s.B, s.H, s.KV, s.T, s.D, 3 * C, C,
                                      DType::kF32, 0.125f)
             .ok()) {
      state.SkipWithError("attention cpu failed");
      break;
    }
    benchmark::ClobberMemory();
  }
  state.counters["TFLOP/s"] =
      benchmark::Counter(forward_flops(s) * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label("fwd cpu", DType::kF32, s));
}
BENCHMARK(BM_AttentionCpu)->Unit(benchmark::kMillisecond);

#if COLOSSAL_WITH_CUDA
using internal::BackwardPath;
using internal::ForwardPath;
constexpr ForwardPath kPaths[] = {ForwardPath::kAuto, ForwardPath::kPortable, ForwardPath::kHopper,
                                  ForwardPath::kHopper, ForwardPath::kHopper};
constexpr BackwardPath kBackwardPaths[] = {BackwardPath::kAuto, BackwardPath::kPortable,
                                           BackwardPath::kHopper, BackwardPath::kPortable,
                                           BackwardPath::kHopperFusedDq};
constexpr const char* kPathNames[] = {"auto", "portable", "hopper", "hopper+portable_bwd",
                                      "hopper_fused_dq"};

// Fills a device buffer of n elements with values uniform in [-1, 1): one random
// host chunk copied over and over.
bool fill_device(void* dst, DType dtype, int64_t n, uint32_t seed) {
  const int64_t chunk = std::min<int64_t>(n, int64_t{1} << 22);
  std::vector<uint16_t> host(chunk);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& h : host) {
    h = dtype == DType::kBF16 ? from_float<BFloat16>(dist(rng)).bits
                              : from_float<Half>(dist(rng)).bits;
  }
  for (int64_t done = 0; done < n; done += chunk) {
    const int64_t count = std::min(chunk, n - done);
    if (cudaMemcpy(static_cast<uint16_t*>(dst) + done, host.data(), count * 2,
                   cudaMemcpyHostToDevice) != cudaSuccess) {
      return false;
    }
  }
  return true;
}

// Runs forward() (then backward_call() when `backward`) once, then times them
// with CUDA events around each iteration; `ok`: whether the buffers were set
// up. Reports `flops` a call as TFLOP/s, labelled `text`.
template <typename Forward, typename Backward>
void time_calls(benchmark::State& state, bool ok, bool backward, Forward forward,
                Backward backward_call, double flops, const std::string& text) {
  KernelStatus first = ok ? forward() : KernelStatus();
  if (first.ok() && ok && backward) first = backward_call();
  if (!first.ok()) {
    state.SkipWithError(first.message());  // e.g. the Hopper kernel off compute capability 9.0
    return;
  }
  if (!ok || cudaDeviceSynchronize() != cudaSuccess) {
    state.SkipWithError("no CUDA device, out of memory, or setup failed");
    return;
  }
  testing::CudaBenchTimer timer;
  for (auto _ : state) {
    const bool timed = timer.time(state, [&] {
      KernelStatus st = forward();
      if (st.ok() && backward) st = backward_call();
      return st;
    });
    if (!timed) break;
  }
  if (cudaDeviceSynchronize() != cudaSuccess) state.SkipWithError("CUDA error");
  state.counters["TFLOP/s"] =
      benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(text);
}

void BM_AttentionCuda(benchmark::State& state, bool backward) {
  const DType dtype = kTypes[state.range(0)];
  const Shape s = kShapes[state.range(1)];
  const ForwardPath path = kPaths[state.range(2)];
  const BackwardPath bwd_path = kBackwardPaths[state.range(2)];
  const int64_t C = s.H * s.D, CKV = s.KV * s.D, W = s.qkv_width();
  const size_t es = 2;
  const int64_t qkv_n = s.B * s.T * W, o_n = s.B * s.T * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  uint8_t *qkv = nullptr, *dqkv = nullptr, *o = nullptr, *d_o = nullptr;
  float* lse = nullptr;
  void* ws = nullptr;
  // Enough for every path (the fused dQ forced at head_dim 64 needs more than
  // attention_backward_workspace_bytes).
  const size_t ws_bytes = internal::fused_dq_workspace_bytes(s.B, s.H, s.T, s.D);
  const bool ok =
      cudaMalloc(&qkv, qkv_n * es) == cudaSuccess && cudaMalloc(&dqkv, qkv_n * es) == cudaSuccess &&
      cudaMalloc(&o, o_n * es) == cudaSuccess && cudaMalloc(&d_o, o_n * es) == cudaSuccess &&
      cudaMalloc(&lse, s.B * s.H * s.T * sizeof(float)) == cudaSuccess &&
      cudaMalloc(&ws, ws_bytes) == cudaSuccess && fill_device(qkv, dtype, qkv_n, 1) &&
      fill_device(d_o, dtype, o_n, 2);
  auto forward = [&]() {
    return internal::attention_forward_cuda_path(path, s.mask, o, lse, qkv, qkv + C * es,
                                                 qkv + (C + CKV) * es, s.B, s.H, s.KV, s.T, s.D,
                                                 W, C, dtype, scale, nullptr);
  };
  auto backward_call = [&]() {
    return internal::attention_backward_cuda_path(
        bwd_path, s.mask, dqkv, dqkv + C * es, dqkv + (C + CKV) * es, d_o, qkv, qkv + C * es,
        qkv + (C + CKV) * es, o, lse, ws, s.B, s.H, s.KV, s.T, s.D, W, C, dtype, scale, nullptr);
  };
  time_calls(state, ok, backward, forward, backward_call,
             forward_flops(s) * (backward ? 3.5 : 1.0),
             label(backward ? "fwd+bwd" : "fwd", dtype, s) + " path=" +
                 kPathNames[state.range(2)]);
  cudaFree(qkv);
  cudaFree(dqkv);
  cudaFree(o);
  cudaFree(d_o);
  cudaFree(lse);
  cudaFree(ws);
}
// Forward: every shape in bf16 and the first in fp16, through each path (2 =
// hopper, 1 = portable, 0 = auto); forward + backward: every shape in bf16
// through hopper with the fused dQ (4), hopper (2), hopper + portable backward
// (3), portable (1) and auto (0).
void forward_args(benchmark::internal::Benchmark* b) {
  for (int path : {2, 1, 0}) {
    b->Args({1, 0, path});
    for (int shape = 0; shape < kNumShapes; ++shape) b->Args({0, shape, path});
  }
}
void forward_backward_args(benchmark::internal::Benchmark* b) {
  for (int path : {4, 2, 3, 1, 0}) {
    for (int shape = 0; shape < kNumShapes; ++shape) b->Args({0, shape, path});
  }
}
BENCHMARK_CAPTURE(BM_AttentionCuda, forward, false)
    ->Apply(forward_args)
    ->ArgNames({"dtype", "shape", "path"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AttentionCuda, forward_backward, true)
    ->Apply(forward_backward_args)
    ->ArgNames({"dtype", "shape", "path"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// The varlen layout (packed sequences, cu_seqlens): 8 sequences of mixed
// lengths, 16384 tokens in all, H32 KV8 D128 bf16, causal, read from one
// packed qkv [16384, (32 + 2 * 8) * 128]; FLOPs summed over the sequences as
// the batch rows count them. path=auto (what attention_varlen_*_cuda run: the
// Hopper kernels on compute capability 9.0, the backward deterministic) and
// path=portable.
constexpr int32_t kVarlenLengths[] = {4096, 1024, 3072, 512, 2048, 1536, 2560, 1536};

void BM_AttentionVarlenCuda(benchmark::State& state, bool backward) {
  const bool automatic = state.range(0) == 0;
  const ForwardPath path = automatic ? ForwardPath::kAuto : ForwardPath::kPortable;
  const BackwardPath bwd_path = automatic ? BackwardPath::kAuto : BackwardPath::kPortable;
  const DType dtype = DType::kBF16;
  const int64_t H = 32, KV = 8, D = 128, C = H * D, CKV = KV * D, W = C + 2 * CKV;
  std::vector<int32_t> cu_h = {0};
  int64_t max_seqlen = 0;
  double flops = 0;
  std::string lengths;
  for (int32_t n : kVarlenLengths) {
    cu_h.push_back(cu_h.back() + n);
    max_seqlen = std::max<int64_t>(max_seqlen, n);
    flops += forward_flops({1, H, KV, n, D});
    lengths += (lengths.empty() ? "" : ",") + std::to_string(n);
  }
  const int64_t num_seqs = static_cast<int64_t>(cu_h.size()) - 1, total = cu_h.back();
  const size_t es = 2;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  uint8_t *qkv = nullptr, *dqkv = nullptr, *o = nullptr, *d_o = nullptr;
  float* lse = nullptr;
  int32_t* cu = nullptr;
  void* ws = nullptr;
  const bool ok =
      cudaMalloc(&qkv, total * W * es) == cudaSuccess &&
      cudaMalloc(&dqkv, total * W * es) == cudaSuccess &&
      cudaMalloc(&o, total * C * es) == cudaSuccess &&
      cudaMalloc(&d_o, total * C * es) == cudaSuccess &&
      cudaMalloc(&lse, H * total * sizeof(float)) == cudaSuccess &&
      cudaMalloc(&cu, cu_h.size() * sizeof(int32_t)) == cudaSuccess &&
      cudaMalloc(&ws, attention_varlen_backward_workspace_bytes(H, total)) == cudaSuccess &&
      cudaMemcpy(cu, cu_h.data(), cu_h.size() * sizeof(int32_t), cudaMemcpyHostToDevice) ==
          cudaSuccess &&
      fill_device(qkv, dtype, total * W, 1) && fill_device(d_o, dtype, total * C, 2);
  auto forward = [&]() {
    return internal::attention_varlen_forward_cuda_path(
        path, AttentionMask::kCausal, o, lse, qkv, qkv + C * es, qkv + (C + CKV) * es, cu,
        num_seqs, total, max_seqlen, H, KV, D, W, C, dtype, scale, nullptr);
  };
  auto backward_call = [&]() {
    return internal::attention_varlen_backward_cuda_path(
        bwd_path, AttentionMask::kCausal, dqkv, dqkv + C * es, dqkv + (C + CKV) * es, d_o, qkv,
        qkv + C * es, qkv + (C + CKV) * es, o, lse, ws, cu, num_seqs, total, max_seqlen, H, KV, D,
        W, C, dtype, scale, nullptr);
  };
  time_calls(state, ok, backward, forward, backward_call, flops * (backward ? 3.5 : 1.0),
             std::string(backward ? "fwd+bwd" : "fwd") + " bf16 varlen {" + lengths +
                 "} H=32 KV=8 D=128 path=" + (automatic ? "auto" : "portable"));
  cudaFree(qkv);
  cudaFree(dqkv);
  cudaFree(o);
  cudaFree(d_o);
  cudaFree(lse);
  cudaFree(cu);
  cudaFree(ws);
}
// path: 1 = portable, 0 = auto.
void varlen_args(benchmark::internal::Benchmark* b) {
  b->Arg(1)->Arg(0)->ArgNames({"path"})->UseManualTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK_CAPTURE(BM_AttentionVarlenCuda, forward, false)->Apply(varlen_args);
BENCHMARK_CAPTURE(BM_AttentionVarlenCuda, forward_backward, true)->Apply(varlen_args);
#endif

}  // namespace
}  // namespace colossal::kernels::attention

BENCHMARK_MAIN();
