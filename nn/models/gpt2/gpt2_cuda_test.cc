// GPT-2 on CUDA against the CPU reference: initialisation, logits, loss,
// dlogits and every parameter gradient. Skips without a GPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "nn/layers/cross_entropy.h"
#include "nn/models/gpt2/gpt2.h"
#include "tests/util/gpu_test.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Tensor;

#if COLOSSAL_WITH_CUDA
// max |a - b| / max(1e-6, max |b|), a on any device, b on the host.
double relative_difference(const Tensor& a, const Tensor& b, const core::Stream& stream) {
  Tensor ha = *a.to(core::Device::cpu(), stream);
  double diff = 0, scale = 1e-6;
  for (int64_t i = 0; i < b.numel(); ++i) {
    diff = std::max(diff, double(std::abs(ha.data<float>()[i] - b.data<float>()[i])));
    scale = std::max(scale, double(std::abs(b.data<float>()[i])));
  }
  return diff / scale;
}

// The tests' model: 2 layers, 4 heads, 64 wide, vocabulary 100, 16 positions.
GPT2Config small_config() {
  GPT2Config c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  c.vocab_size = 100;
  c.max_seq_len = 16;
  return c;
}

// One GPT-2 on the CPU (the reference) and on cuda:0, both initialised with
// seed 11, their contexts, and a B x T batch of tokens and targets on the host.
struct CpuAndCuda {
  static constexpr int64_t B = 2, T = 16;
  GPT2Config config;
  std::unique_ptr<core::Context> cpu_ctx, gpu_ctx;
  std::unique_ptr<GPT2> cpu_model, gpu_model;
  Tensor tokens, targets;
  const core::Stream& stream() const { return gpu_ctx->compute_stream(); }
};

void set_up(const GPT2Config& c, CpuAndCuda& m) {
  m.config = c;
  m.cpu_ctx = std::move(*core::Context::create(core::Device::cpu()));
  absl::StatusOr<std::unique_ptr<core::Context>> gpu = core::Context::create(core::Device::cuda(0));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  m.gpu_ctx = std::move(*gpu);
  m.cpu_model = *GPT2::create(c, DType::kF32, core::Stream::cpu());
  m.gpu_model = *GPT2::create(c, DType::kF32, m.stream());
  ASSERT_TRUE(m.cpu_model->init(11).ok());
  ASSERT_TRUE(m.gpu_model->init(11, m.stream()).ok());
  m.tokens = *Tensor::empty({m.B, m.T}, DType::kI32, core::Stream::cpu());
  m.targets = *Tensor::empty({m.B, m.T}, DType::kI32, core::Stream::cpu());
  for (int64_t i = 0; i < m.B * m.T; ++i) {
    m.tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 37 + 5) % c.vocab_size);
    m.targets.data<int32_t>()[i] = static_cast<int32_t>((i * 53 + 1) % c.vocab_size);
  }
}

// A forward, cross-entropy and backward on each device (and the batch on cuda:0).
struct Steps {
  Tensor gpu_tokens, gpu_targets;
  ForwardResult cpu_out, gpu_out;
  CrossEntropyResult cpu_ce, gpu_ce;
};

// Forward and cross-entropy on both models; expects the logits to match.
void forward_both(CpuAndCuda& m, Steps& s) {
  const core::Stream& stream = m.stream();
  s.gpu_tokens = *m.tokens.to(core::Device::cuda(0), stream);
  s.gpu_targets = *m.targets.to(core::Device::cuda(0), stream);
  s.cpu_out = std::move(*m.cpu_model->forward(*m.cpu_ctx, m.tokens));
  absl::StatusOr<ForwardResult> gpu_out = m.gpu_model->forward(*m.gpu_ctx, s.gpu_tokens);
  ASSERT_TRUE(gpu_out.ok()) << gpu_out.status();
  s.gpu_out = std::move(*gpu_out);
  EXPECT_LT(relative_difference(s.gpu_out.output, s.cpu_out.output, stream), 1e-4) << "logits";
  const int64_t v = m.config.vocab_size;
  s.cpu_ce = *cross_entropy(*m.cpu_ctx, s.cpu_out.output, m.targets, v, {});
  absl::StatusOr<CrossEntropyResult> gpu_ce =
      cross_entropy(*m.gpu_ctx, s.gpu_out.output, s.gpu_targets, v, {});
  ASSERT_TRUE(gpu_ce.ok()) << gpu_ce.status();
  s.gpu_ce = std::move(*gpu_ce);
}

// Backward on both models from their dlogits (the CUDA one synchronised).
void backward_both(CpuAndCuda& m, Steps& s) {
  ASSERT_TRUE(m.cpu_model->backward(*m.cpu_ctx, *s.cpu_out.saved, s.cpu_ce.dlogits).ok());
  absl::StatusOr<Tensor> gpu_dx =
      m.gpu_model->backward(*m.gpu_ctx, *s.gpu_out.saved, s.gpu_ce.dlogits);
  ASSERT_TRUE(gpu_dx.ok()) << gpu_dx.status();
  m.gpu_ctx->synchronize();
}

// Every parameter gradient of the CUDA model within 1e-3 (relative) of the CPU's.
void expect_same_gradients(const CpuAndCuda& m) {
  const std::vector<Parameter>& cpu_params = m.cpu_model->store().parameters();
  const std::vector<Parameter>& gpu_params = m.gpu_model->store().parameters();
  ASSERT_EQ(cpu_params.size(), gpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    EXPECT_LT(relative_difference(gpu_params[i].grad, cpu_params[i].grad, m.stream()), 1e-3)
        << cpu_params[i].name;
  }
}
#endif

TEST(GPT2CudaTest, MatchesCpuForwardAndBackward) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  CpuAndCuda m;
  ASSERT_NO_FATAL_FAILURE(set_up(small_config(), m));
  Tensor cpu_w = m.cpu_model->store().flat_values(DType::kF32);
  Tensor gpu_w =
      *m.gpu_model->store().flat_values(DType::kF32).to(core::Device::cpu(), m.stream());
  EXPECT_EQ(std::memcmp(cpu_w.raw_data(), gpu_w.raw_data(), cpu_w.nbytes()), 0)
      << "CUDA initialisation differs from the CPU's";

  Steps s;
  ASSERT_NO_FATAL_FAILURE(forward_both(m, s));
  EXPECT_NEAR(s.gpu_ce.loss, s.cpu_ce.loss, 1e-4 * s.cpu_ce.loss);
  EXPECT_LT(relative_difference(s.gpu_ce.dlogits, s.cpu_ce.dlogits, m.stream()), 1e-4)
      << "dlogits";
  ASSERT_NO_FATAL_FAILURE(backward_both(m, s));
  expect_same_gradients(m);
#endif
}

// Dropout on (embd_pdrop, resid_pdrop) and checkpointing half the blocks: the
// same RNG state gives the same masks on both devices (a different mask would
// change the logits by O(1), far above the 1e-4 tolerance), and the CUDA
// context draws the same numbers as the CPU one.
TEST(GPT2CudaTest, DropoutMasksMatchCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  GPT2Config c = small_config();
  c.embd_pdrop = 0.1;
  c.resid_pdrop = 0.2;
  c.checkpoint_ratio = 0.5;
  CpuAndCuda m;
  ASSERT_NO_FATAL_FAILURE(set_up(c, m));
  m.cpu_ctx->manual_seed(314);
  m.gpu_ctx->manual_seed(314);
  Steps s;
  ASSERT_NO_FATAL_FAILURE(forward_both(m, s));
  ASSERT_NO_FATAL_FAILURE(backward_both(m, s));
  EXPECT_EQ(m.cpu_ctx->rng_state(), m.gpu_ctx->rng_state());
  expect_same_gradients(m);
#endif
}

// A declared bfloat16 model materialized and initialised on the device holds
// the CPU's float32 initial values rounded to nearest even (the same Philox
// elements, by flat offset), and a model beyond the device is refused with
// its size before anything is allocated.
TEST(GPT2CudaTest, DeclaredModelsMaterializeOnTheDevice) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  absl::StatusOr<std::unique_ptr<core::Context>> gpu = core::Context::create(core::Device::cuda(0));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const core::Stream& stream = (*gpu)->compute_stream();
  auto cpu = *GPT2::create(small_config(), DType::kF32, core::Stream::cpu());
  ASSERT_TRUE(cpu->init(23).ok());
  auto bf16 = *GPT2::declare(small_config(), DType::kBF16);
  ASSERT_TRUE(bf16->store().allocate(stream).ok());
  ASSERT_TRUE(bf16->init(23, stream).ok());
  for (const ParameterEntry& e : cpu->table().entries()) {
    const Tensor want = cpu->store().find(e.name)->value;
    const Tensor got = *bf16->store().find(e.name)->value.to(core::Device::cpu(), stream);
    stream.synchronize();
    for (int64_t i = 0; i < e.numel(); ++i) {
      uint32_t bits = 0;
      std::memcpy(&bits, &want.data<float>()[i], 4);
      const uint16_t rounded = static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
      uint16_t g = 0;
      std::memcpy(&g, static_cast<const char*>(got.raw_data()) + 2 * i, 2);
      ASSERT_EQ(g, rounded) << e.name << "[" << i << "]";
    }
  }
  GPT2Config huge;
  huge.n_layer = 128;
  huge.n_head = 100;
  huge.n_embd = 25600;
  auto big = *GPT2::declare(huge, DType::kBF16);
  absl::Status s = big->store().allocate(stream);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("(3.67 TiB of values and gradients) on cuda:0"), std::string::npos) << s;
#endif
}

}  // namespace
}  // namespace colossal::nn
