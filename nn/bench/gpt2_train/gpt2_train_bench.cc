// One full GPT-2 training step on CUDA (issue #6): train_step (forward, fused
// cross-entropy, backward, global-norm clip at 1.0) and the fused AdamW step
// (lr 6e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on 2-D weights, none on
// biases and LayerNorm: nanoGPT's recipe). The PyTorch reference is
// tools/bench/torch_gpt2_train.py (same model, batch, sequence and optimizer).
//
//   bazel run -c opt //nn/bench/gpt2_train:gpt2_train_bench          # GPU host
//   gpt2_train_bench --cpu_smoke   # tiny model on the CPU: checks the code path only
// Without a GPU (and without --cpu_smoke) it prints why and exits 0.
//
// Precision (args `bf16`): 1 = the model in bfloat16 (weights, activations and
// gradients; GEMMs accumulate in fp32, softmax/LayerNorm/loss math in fp32)
// with fp32 master weights and Adam states owned by the optimizer, which
// rewrites the bf16 weights after each step (nn/optim/module_params.h,
// DESIGN principle 6). 0 = everything float32 (no TF32).
//
// Timing: 3 warm-up steps (cuBLASLt algorithm choice, pool growth), then 10
// timed steps, each from the host call to a device synchronisation (a step
// synchronises twice by itself: the loss and the gradient norm come back to
// the host). Counters (plus the last loss and the count of skipped steps,
// which must be 0: a step skipped for a non-finite gradient is cheaper):
//   ms/step, tokens/s = B*T / step time;
//   peak_GiB: the CUDA pool's peak allocated bytes over the timed steps
//     (weights, gradients, masters, Adam states and activations; the pool's
//     reserved memory is larger);
//   TFLOP/s and MFU, with the nanoGPT/PaLM count per step:
//     flops = (6 N + 12 L C T) * B * T
//   N = parameters without wpe (the tied wte counts once, as the LM-head GEMM
//   over the padded vocabulary), 6 = forward 2 + backward 4 per weight and
//   token; 12 L C T = attention scores and p*v GEMMs (2 GEMMs * 2 flops * T * C
//   per layer and token, times 3 for forward + backward, the full T x T square
//   as PaLM counts it although half is masked). MFU = TFLOP/s / 989, the H100
//   SXM dense bf16 peak, for both precisions (fp32 runs without tensor cores).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/context/context.h"
#include "core/device/device.h"
#include "core/status/status.h"
#include "core/tensor/tensor.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/optim/adam.h"
#include "nn/optim/module_params.h"
#include "nn/optim/param.h"
#include "nn/train/train_step.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Tensor;

constexpr const char* kPresets[] = {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "tiny"};
constexpr int kTinyPreset = 4;
constexpr double kPeakFlops = 989e12;  // H100 SXM dense bf16
constexpr int kWarmupSteps = 3;

// Everything one step needs; the optimizer holds the model's gradient views.
struct Setup {
  std::unique_ptr<core::Context> ctx;
  std::unique_ptr<GPT2> model;
  std::unique_ptr<Adam> opt;
  MicroBatch batch;
};

absl::StatusOr<GPT2Config> config_of(int preset) {
  if (preset != kTinyPreset) return GPT2Config::preset(kPresets[preset]);
  // The parity case's shape (nn/models/gpt2/export_parity_case.cc).
  GPT2Config c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  c.vocab_size = 97;
  c.max_seq_len = 16;
  return c;
}

// Uniform random tokens in [0, vocab) (an LCG: the data only has to be valid).
absl::StatusOr<Tensor> random_tokens(core::Context& ctx, int64_t B, int64_t T, int64_t vocab,
                                     uint64_t seed) {
  COLOSSAL_ASSIGN_OR_RETURN(Tensor host, Tensor::empty({B, T}, DType::kI32, core::Stream::cpu()));
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t i = 0; i < B * T; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    host.data<int32_t>()[i] = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(vocab));
  }
  return host.to(ctx.device(), ctx.compute_stream());
}

absl::StatusOr<Setup> make_setup(core::Device device, DType dtype, const GPT2Config& config,
                                 int64_t B, int64_t T) {
  Setup s;
  COLOSSAL_ASSIGN_OR_RETURN(s.ctx, core::Context::create(device));
  const core::Stream& stream = s.ctx->compute_stream();
  COLOSSAL_ASSIGN_OR_RETURN(s.model, GPT2::create(config, dtype, stream));
  COLOSSAL_RETURN_IF_ERROR(s.model->init(1337, stream));
  COLOSSAL_ASSIGN_OR_RETURN(std::vector<ParamRef> params,
                            optimizer_params(s.model->store().parameters(), stream));
  AdamOptions o;
  o.lr = 6e-4;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.eps = 1e-8;
  COLOSSAL_ASSIGN_OR_RETURN(s.opt, make_adamw(split_decay_groups(std::move(params), 0.1), o, stream));
  COLOSSAL_ASSIGN_OR_RETURN(s.batch.tokens, random_tokens(*s.ctx, B, T, config.vocab_size, 1));
  COLOSSAL_ASSIGN_OR_RETURN(s.batch.targets, random_tokens(*s.ctx, B, T, config.vocab_size, 2));
  return s;
}

// One step, ended by a device synchronisation. Counts skipped (non-finite) steps.
absl::Status step(Setup& s, int64_t vocab, TrainStepResult& last, int& skipped) {
  absl::StatusOr<TrainStepResult> r =
      train_step(*s.ctx, *s.model, *s.opt, vocab, {&s.batch, 1}, {.max_norm = 1.0f});
  s.ctx->synchronize();
  if (!r.ok()) return r.status();
  last = *r;
  skipped += r->step.skipped ? 1 : 0;
  return absl::OkStatus();
}

// Parameters counted in 6N (see the file comment): all but wpe.
double counted_params(const GPT2& model) {
  double n = 0;
  for (const ParameterEntry& e : model.table().entries()) {
    if (e.name != "transformer.wpe.weight") n += static_cast<double>(e.numel());
  }
  return n;
}

// Args: bf16 (0/1), preset (index into kPresets), B, T.
void BM_Gpt2TrainStep(benchmark::State& state, core::Device device) {
  const DType dtype = state.range(0) ? DType::kBF16 : DType::kF32;
  const int preset = static_cast<int>(state.range(1));
  const int64_t B = state.range(2), T = state.range(3);
  absl::StatusOr<GPT2Config> config = config_of(preset);
  absl::StatusOr<Setup> setup =
      config.ok() ? make_setup(device, dtype, *config, B, T) : absl::StatusOr<Setup>(config.status());
  absl::Status status = setup.status();
  TrainStepResult last;
  int skipped = 0;
  for (int i = 0; i < kWarmupSteps && status.ok(); ++i) {
    status = step(*setup, config->vocab_size, last, skipped);
  }
  skipped = 0;
  if (status.ok()) setup->ctx->allocator()->reset_peak_stats();
  double seconds = 0;
  for (auto _ : state) {
    if (!status.ok()) break;
    const auto start = std::chrono::steady_clock::now();
    status = step(*setup, config->vocab_size, last, skipped);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    seconds += s;
    state.SetIterationTime(s);
  }
  if (!status.ok()) {
    state.SkipWithError(status.ToString().c_str());
    return;
  }
  const GPT2Config& c = *config;
  const double step_s = seconds / static_cast<double>(state.iterations());
  const double tokens = static_cast<double>(B * T);
  const double flops = (6.0 * counted_params(*setup->model) +
                        12.0 * c.n_layer * c.n_embd * static_cast<double>(T)) * tokens;
  state.counters["ms/step"] = step_s * 1e3;
  state.counters["tokens/s"] = tokens / step_s;
  state.counters["TFLOP/s"] = flops / step_s * 1e-12;
  state.counters["MFU_%"] = 100.0 * flops / step_s / kPeakFlops;
  // Sanity: a sensible loss (ln 50257 = 10.8 at first) and no skipped steps.
  state.counters["loss"] = last.loss;
  state.counters["skipped"] = skipped;
  state.counters["peak_GiB"] =
      static_cast<double>(setup->ctx->allocator()->stats().peak_allocated_bytes) / (1 << 30);
  state.SetLabel(absl::StrCat(kPresets[preset], dtype == DType::kBF16 ? " bf16+fp32master" : " fp32",
                              " B=", B, " T=", T, " ", device.is_cpu() ? "cpu" : "cuda"));
}

void register_cases(bool cuda) {
  const core::Device device = cuda ? core::Device::cuda(0) : core::Device::cpu();
  auto* b = benchmark::RegisterBenchmark(cuda ? "BM_Gpt2TrainStepCuda" : "BM_Gpt2TrainStepCpu",
                                         BM_Gpt2TrainStep, device);
  b->ArgNames({"bf16", "preset", "B", "T"})->UseManualTime()->Unit(benchmark::kMillisecond);
  if (cuda) {
    b->Args({1, 0, 16, 1024})   // the case: gpt2 124M, bf16 + fp32 masters
        ->Args({0, 0, 16, 1024})  // the same in fp32
        ->Iterations(10);
  } else {
    b->Args({0, kTinyPreset, 2, 16})->Args({1, kTinyPreset, 2, 16})->Iterations(2);
  }
}

}  // namespace
}  // namespace colossal::nn

int main(int argc, char** argv) {
  // Our one flag, taken out before Google Benchmark sees the arguments.
  bool cpu_smoke = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cpu_smoke") == 0) {
      cpu_smoke = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const absl::Status gpu = colossal::core::check_device_available(colossal::core::Device::cuda(0));
  if (!gpu.ok() && !cpu_smoke) {
    std::printf("gpt2_train_bench: skipped, no usable GPU (%s); --cpu_smoke runs a tiny model on the CPU\n",
                gpu.ToString().c_str());
    return 0;
  }
  colossal::nn::register_cases(/*cuda=*/!cpu_smoke);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
