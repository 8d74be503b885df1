// Bandwidth of kernels/layernorm in decimal GB/s, at GPT-2 activation shapes
// (rows = 8 x 1024 tokens, C = 768 / 1600 / 4096). Bytes per call count each
// tensor once (tools/bench/torch_layernorm.py counts the same way):
//   layernorm fwd: x + gamma + beta + out + mean + rstd (float32)
//   rmsnorm fwd:   x + gamma + out + rstd
//   residual fwd:  x + residual + gamma + beta + residual_out + out + mean + rstd
//   layernorm bwd: dout + x + mean + rstd + gamma + dx + dgamma and dbeta read and written
//   rmsnorm bwd:   dout + x + rstd + gamma + dx + dgamma read and written
//   layernorm fwd+bwd: the sum of the two.
// The backward's float32 scratch partials are not counted (an implementation
// cost). CUDA: each timed iteration enqueues kBatch = 20 calls back to back
// between two events (Time is per iteration; the us/call counter per call),
// rotating over enough copies of the activations (>= 256 MB) that none is
// still in the 50 MB L2 when it is read again.
//   bazel run -c opt //kernels/layernorm:layernorm_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/half.h"
#include "kernels/layernorm/layernorm.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>

#include "tests/util/cuda_bench_timer.h"
#endif

namespace colossal::kernels::layernorm {
namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kBF16};
constexpr int64_t kRows = 8 * 1024;

// kCopy: cudaMemcpyAsync of x to out, the same-size ceiling for the forward.
enum class Op {
  kLayerNormFwd,
  kLayerNormBwd,
  kLayerNormFwdBwd,
  kRmsNormFwd,
  kRmsNormBwd,
  kResidualFwd,
  kCopy,
};

double bytes_moved(Op op, DType d, int64_t rows, int64_t C) {
  const double act = double(rows) * C * dtype_size(d), par = double(C) * dtype_size(d);
  const double stat = double(rows) * sizeof(float);
  const double ln_fwd = 2 * act + 2 * par + 2 * stat;
  const double ln_bwd = 3 * act + 2 * stat + par + 4 * par;
  switch (op) {
    case Op::kLayerNormFwd: return ln_fwd;
    case Op::kLayerNormBwd: return ln_bwd;
    case Op::kLayerNormFwdBwd: return ln_fwd + ln_bwd;
    case Op::kRmsNormFwd: return 2 * act + par + stat;
    case Op::kRmsNormBwd: return 3 * act + stat + par + 2 * par;
    case Op::kResidualFwd: return 4 * act + 2 * par + 2 * stat;
    case Op::kCopy: return 2 * act;
  }
  return 0;
}

std::string case_label(DType d, int64_t rows, int64_t C) {
  return std::string(dtype_name(d)) + " rows=" + std::to_string(rows) + " C=" + std::to_string(C);
}

// n values of dtype d, uniform-ish in [lo, hi), from a fast LCG (never zero
// data: timings on zeros can flatter).
std::vector<uint8_t> random_bytes(DType d, int64_t n, uint32_t seed, float lo, float hi) {
  std::vector<uint8_t> out(n * dtype_size(d));
  uint32_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    const float v = lo + (hi - lo) * static_cast<float>(s >> 8) * (1.0f / 16777216.0f);
    if (d == DType::kF32) {
      reinterpret_cast<float*>(out.data())[i] = v;
    } else if (d == DType::kBF16) {
      reinterpret_cast<BFloat16*>(out.data())[i] = float_to_bfloat16(v);
    } else {
      reinterpret_cast<Half*>(out.data())[i] = float_to_half(v);
    }
  }
  return out;
}

void BM_LayerNormCpu(benchmark::State& state) {
  const bool backward = state.range(0) != 0;
  const int64_t rows = 1024, C = state.range(1);
  const DType d = DType::kF32;
  const auto x = random_bytes(d, rows * C, 1, -2.0f, 2.0f),
             dy = random_bytes(d, rows * C, 2, -1.0f, 1.0f);
  const auto g = random_bytes(d, C, 3, 0.5f, 1.5f), b = random_bytes(d, C, 4, -0.5f, 0.5f);
  std::vector<uint8_t> out(x.size()), dx(x.size()), dg(g.size()), db(b.size());
  std::vector<float> mean(rows), rstd(rows);
  KernelStatus s = layernorm_forward_cpu(out.data(), mean.data(), rstd.data(), x.data(), g.data(),
                                         b.data(), rows, C, d, {});
  for (auto _ : state) {
    if (backward) {
      s = layernorm_backward_cpu(dx.data(), dg.data(), db.data(), dy.data(), x.data(), mean.data(),
                                 rstd.data(), g.data(), rows, C, d, {});
    } else {
      s = layernorm_forward_cpu(out.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(),
                                rows, C, d, {});
    }
    if (!s.ok()) {
      state.SkipWithError(s.message());
      break;
    }
    benchmark::ClobberMemory();
  }
  const Op op = backward ? Op::kLayerNormBwd : Op::kLayerNormFwd;
  state.counters["GB/s"] = benchmark::Counter(bytes_moved(op, d, rows, C) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(backward ? "bwd " : "fwd ") + case_label(d, rows, C));
}
BENCHMARK(BM_LayerNormCpu)->ArgsProduct({{0, 1}, {768}})->Unit(benchmark::kMillisecond);

#if COLOSSAL_WITH_CUDA
constexpr int kBatch = 20;
constexpr double kRotateBytes = 256e6;

// Device buffers for one benchmark: `sets` copies of every activation-sized
// tensor, one copy of the parameters, gradients and scratch.
struct DeviceSets {
  int sets = 0;
  std::vector<void*> x, residual, dout, out, residual_out, dx;
  std::vector<float*> mean, rstd;
  void *gamma = nullptr, *beta = nullptr, *dgamma = nullptr, *dbeta = nullptr, *scratch = nullptr;
  size_t scratch_bytes = 0;
  std::vector<void*> all;

  bool alloc(void** p, size_t bytes) {
    if (cudaMalloc(p, bytes) != cudaSuccess) return false;
    all.push_back(*p);
    return true;
  }
  ~DeviceSets() {
    for (void* p : all) cudaFree(p);
  }
};

// Allocates and fills the buffers; false (after SkipWithError) on failure.
bool make_sets(benchmark::State& state, DeviceSets& s, Op op, DType d, int64_t rows, int64_t C) {
  const size_t act = rows * C * dtype_size(d), par = C * dtype_size(d);
  s.sets = static_cast<int>(std::max<double>(1.0, kRotateBytes / bytes_moved(op, d, rows, C) + 1));
  const auto x = random_bytes(d, rows * C, 1, -2.0f, 2.0f),
             dy = random_bytes(d, rows * C, 2, -1.0f, 1.0f);
  const auto g = random_bytes(d, C, 3, 0.5f, 1.5f), b = random_bytes(d, C, 4, -0.5f, 0.5f);
  s.scratch_bytes = layernorm_backward_scratch_bytes(rows, C);
  bool ok = s.alloc(&s.gamma, par) && s.alloc(&s.beta, par) && s.alloc(&s.dgamma, par) &&
            s.alloc(&s.dbeta, par) && s.alloc(&s.scratch, s.scratch_bytes);
  ok = ok && cudaMemcpy(s.gamma, g.data(), par, cudaMemcpyHostToDevice) == cudaSuccess &&
       cudaMemcpy(s.beta, b.data(), par, cudaMemcpyHostToDevice) == cudaSuccess &&
       cudaMemcpy(s.dgamma, b.data(), par, cudaMemcpyHostToDevice) == cudaSuccess &&
       cudaMemcpy(s.dbeta, g.data(), par, cudaMemcpyHostToDevice) == cudaSuccess;
  const bool residual = op == Op::kResidualFwd;
  const bool backward =
      op == Op::kLayerNormBwd || op == Op::kRmsNormBwd || op == Op::kLayerNormFwdBwd;
  for (int i = 0; ok && i < s.sets; ++i) {
    void *xi = nullptr, *oi = nullptr, *ri = nullptr, *roi = nullptr, *dyi = nullptr,
         *dxi = nullptr;
    void *mi = nullptr, *si = nullptr;
    ok = s.alloc(&xi, act) && s.alloc(&oi, act) && s.alloc(&mi, rows * 4) &&
         s.alloc(&si, rows * 4) &&
         cudaMemcpy(xi, x.data(), act, cudaMemcpyHostToDevice) == cudaSuccess;
    if (ok && residual) {
      ok = s.alloc(&ri, act) && s.alloc(&roi, act) &&
           cudaMemcpy(ri, dy.data(), act, cudaMemcpyHostToDevice) == cudaSuccess;
    }
    if (ok && backward) {
      ok = s.alloc(&dyi, act) && s.alloc(&dxi, act) &&
           cudaMemcpy(dyi, dy.data(), act, cudaMemcpyHostToDevice) == cudaSuccess;
      // Real statistics for the backward to read.
      float* mf = static_cast<float*>(mi);
      float* sf = static_cast<float*>(si);
      ok = ok &&
           (op == Op::kRmsNormBwd
                ? rmsnorm_forward_cuda(oi, sf, xi, s.gamma, rows, C, d, {}, nullptr)
                : layernorm_forward_cuda(oi, mf, sf, xi, s.gamma, s.beta, rows, C, d, {}, nullptr))
               .ok();
    }
    s.x.push_back(xi), s.out.push_back(oi), s.residual.push_back(ri), s.residual_out.push_back(roi);
    s.dout.push_back(dyi), s.dx.push_back(dxi);
    s.mean.push_back(static_cast<float*>(mi)), s.rstd.push_back(static_cast<float*>(si));
  }
  ok = ok && cudaDeviceSynchronize() == cudaSuccess;
  if (!ok) state.SkipWithError("no CUDA device, out of memory, or a setup call failed");
  return ok;
}

KernelStatus run_op(Op op, DeviceSets& s, int i, DType d, int64_t rows, int64_t C) {
  const int64_t n = rows, c = C;
  switch (op) {
    case Op::kLayerNormFwd:
      return layernorm_forward_cuda(s.out[i], s.mean[i], s.rstd[i], s.x[i], s.gamma, s.beta, n, c,
                                    d, {}, nullptr);
    case Op::kRmsNormFwd:
      return rmsnorm_forward_cuda(s.out[i], s.rstd[i], s.x[i], s.gamma, n, c, d, {}, nullptr);
    case Op::kResidualFwd:
      return fused_residual_layernorm_forward_cuda(s.residual_out[i], s.out[i], s.mean[i],
                                                   s.rstd[i], s.x[i], s.residual[i], s.gamma,
                                                   s.beta, n, c, d, {}, nullptr);
    case Op::kLayerNormBwd:
      return layernorm_backward_cuda(s.dx[i], s.dgamma, s.dbeta, s.dout[i], s.x[i], s.mean[i],
                                     s.rstd[i], s.gamma, s.scratch, s.scratch_bytes, n, c, d, {},
                                     nullptr);
    case Op::kRmsNormBwd:
      return rmsnorm_backward_cuda(s.dx[i], s.dgamma, s.dout[i], s.x[i], s.rstd[i], s.gamma,
                                   s.scratch, s.scratch_bytes, n, c, d, {}, nullptr);
    case Op::kCopy: {
      const cudaError_t e = cudaMemcpyAsync(s.out[i], s.x[i], rows * C * dtype_size(d),
                                            cudaMemcpyDeviceToDevice, nullptr);
      return e == cudaSuccess ? KernelStatus() : KernelStatus::cuda_error(e, cudaGetErrorString(e));
    }
    case Op::kLayerNormFwdBwd: {
      const KernelStatus f = run_op(Op::kLayerNormFwd, s, i, d, rows, C);
      if (!f.ok()) return f;
      return run_op(Op::kLayerNormBwd, s, i, d, rows, C);
    }
  }
  return KernelStatus::invalid_argument("op");
}

void run_cuda(benchmark::State& state, Op op, const char* name) {
  const DType d = kTypes[state.range(0)];
  const int64_t rows = kRows, C = state.range(1);
  DeviceSets s;
  if (!make_sets(state, s, op, d, rows, C)) return;
  testing::CudaBenchTimer timer;  // one iteration = kBatch calls
  int next = 0;
  double total_ms = 0;
  int64_t calls = 0;
  for (auto _ : state) {
    const bool ok = timer.time(state, [&] {
      KernelStatus st;
      for (int k = 0; k < kBatch && st.ok(); ++k, next = (next + 1) % s.sets) {
        st = run_op(op, s, next, d, rows, C);
      }
      return st;
    });
    if (!ok) break;
    total_ms += timer.elapsed_ms();
    calls += kBatch;
  }
  state.counters["GB/s"] = benchmark::Counter(kBatch * bytes_moved(op, d, rows, C) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["us/call"] = calls > 0 ? total_ms * 1e3 / calls : 0.0;
  state.SetLabel(std::string(name) + " " + case_label(d, rows, C));
}

void BM_LayerNormForwardCuda(benchmark::State& state) {
  run_cuda(state, Op::kLayerNormFwd, "layernorm fwd");
}
void BM_LayerNormBackwardCuda(benchmark::State& state) {
  run_cuda(state, Op::kLayerNormBwd, "layernorm bwd");
}
void BM_LayerNormForwardBackwardCuda(benchmark::State& state) {
  run_cuda(state, Op::kLayerNormFwdBwd, "layernorm fwd+bwd");
}
void BM_RmsNormForwardCuda(benchmark::State& state) {
  run_cuda(state, Op::kRmsNormFwd, "rmsnorm fwd");
}
void BM_RmsNormBackwardCuda(benchmark::State& state) {
  run_cuda(state, Op::kRmsNormBwd, "rmsnorm bwd");
}
void BM_FusedResidualLayerNormForwardCuda(benchmark::State& state) {
  run_cuda(state, Op::kResidualFwd, "residual+layernorm fwd");
}
// Not a kernel of this family: a device-to-device copy of x (read x, write
// out), the bandwidth ceiling for a forward of this size.
void BM_DeviceCopyCuda(benchmark::State& state) { run_cuda(state, Op::kCopy, "copy x->out"); }

// dtype (float32, bfloat16) x C, rows = 8192.
void cuda_cases(benchmark::internal::Benchmark* b) {
  b->ArgsProduct({{0, 1}, {768, 1600, 4096}})->UseManualTime()->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_LayerNormForwardCuda)->Apply(cuda_cases);
BENCHMARK(BM_LayerNormBackwardCuda)->Apply(cuda_cases);
BENCHMARK(BM_LayerNormForwardBackwardCuda)->Apply(cuda_cases);
BENCHMARK(BM_RmsNormForwardCuda)->Apply(cuda_cases);
BENCHMARK(BM_RmsNormBackwardCuda)->Apply(cuda_cases);
BENCHMARK(BM_FusedResidualLayerNormForwardCuda)->Apply(cuda_cases);
BENCHMARK(BM_DeviceCopyCuda)->Apply(cuda_cases);
#endif

}  // namespace
}  // namespace colossal::kernels::layernorm

BENCHMARK_MAIN();
