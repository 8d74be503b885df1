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
#endif

TEST(GPT2CudaTest, MatchesCpuForwardAndBackward) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  auto cpu_ctx = std::move(*core::Context::create(core::Device::cpu()));
  absl::StatusOr<std::unique_ptr<core::Context>> gpu = core::Context::create(core::Device::cuda(0));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  core::Context& gpu_ctx = **gpu;
  const core::Stream& stream = gpu_ctx.compute_stream();

  GPT2Config c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  c.vocab_size = 100;
  c.max_seq_len = 16;
  auto cpu_model = *GPT2::create(c, DType::kF32, core::Stream::cpu());
  auto gpu_model = *GPT2::create(c, DType::kF32, stream);
  ASSERT_TRUE(cpu_model->init(11).ok());
  ASSERT_TRUE(gpu_model->init(11, stream).ok());
  Tensor cpu_w = cpu_model->store().flat_values(DType::kF32);
  Tensor gpu_w = *gpu_model->store().flat_values(DType::kF32).to(core::Device::cpu(), stream);
  EXPECT_EQ(std::memcmp(cpu_w.raw_data(), gpu_w.raw_data(), cpu_w.nbytes()), 0)
      << "CUDA initialisation differs from the CPU's";

  const int64_t B = 2, T = 16;
  Tensor tokens = *Tensor::empty({B, T}, DType::kI32, core::Stream::cpu());
  Tensor targets = *Tensor::empty({B, T}, DType::kI32, core::Stream::cpu());
  for (int64_t i = 0; i < B * T; ++i) {
    tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 37 + 5) % c.vocab_size);
    targets.data<int32_t>()[i] = static_cast<int32_t>((i * 53 + 1) % c.vocab_size);
  }
  Tensor gpu_tokens = *tokens.to(core::Device::cuda(0), stream);
  Tensor gpu_targets = *targets.to(core::Device::cuda(0), stream);

  ForwardResult cpu_out = *cpu_model->forward(*cpu_ctx, tokens);
  absl::StatusOr<ForwardResult> gpu_out = gpu_model->forward(gpu_ctx, gpu_tokens);
  ASSERT_TRUE(gpu_out.ok()) << gpu_out.status();
  EXPECT_LT(relative_difference(gpu_out->output, cpu_out.output, stream), 1e-4) << "logits";

  CrossEntropyResult cpu_ce = *cross_entropy(*cpu_ctx, cpu_out.output, targets, c.vocab_size, {});
  absl::StatusOr<CrossEntropyResult> gpu_ce =
      cross_entropy(gpu_ctx, gpu_out->output, gpu_targets, c.vocab_size, {});
  ASSERT_TRUE(gpu_ce.ok()) << gpu_ce.status();
  EXPECT_NEAR(gpu_ce->loss, cpu_ce.loss, 1e-4 * cpu_ce.loss);
  EXPECT_LT(relative_difference(gpu_ce->dlogits, cpu_ce.dlogits, stream), 1e-4) << "dlogits";

  ASSERT_TRUE(cpu_model->backward(*cpu_ctx, *cpu_out.saved, cpu_ce.dlogits).ok());
  absl::StatusOr<Tensor> gpu_dx = gpu_model->backward(gpu_ctx, *gpu_out->saved, gpu_ce->dlogits);
  ASSERT_TRUE(gpu_dx.ok()) << gpu_dx.status();
  gpu_ctx.synchronize();
  const std::vector<Parameter>& cpu_params = cpu_model->store().parameters();
  const std::vector<Parameter>& gpu_params = gpu_model->store().parameters();
  ASSERT_EQ(cpu_params.size(), gpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    EXPECT_LT(relative_difference(gpu_params[i].grad, cpu_params[i].grad, stream), 1e-3)
        << cpu_params[i].name;
  }
#endif
}

// Dropout on (embd_pdrop, resid_pdrop) and checkpointing half the blocks: the
// same RNG state gives the same masks on both devices (a different mask would
// change the logits by O(1), far above the 1e-4 tolerance), and the CUDA
// context draws the same numbers as the CPU one.
TEST(GPT2CudaTest, DropoutMasksMatchCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  auto cpu_ctx = std::move(*core::Context::create(core::Device::cpu()));
  absl::StatusOr<std::unique_ptr<core::Context>> gpu = core::Context::create(core::Device::cuda(0));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  core::Context& gpu_ctx = **gpu;
  const core::Stream& stream = gpu_ctx.compute_stream();

  GPT2Config c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  c.vocab_size = 100;
  c.max_seq_len = 16;
  c.embd_pdrop = 0.1;
  c.resid_pdrop = 0.2;
  c.checkpoint_ratio = 0.5;
  auto cpu_model = *GPT2::create(c, DType::kF32, core::Stream::cpu());
  auto gpu_model = *GPT2::create(c, DType::kF32, stream);
  ASSERT_TRUE(cpu_model->init(11).ok());
  ASSERT_TRUE(gpu_model->init(11, stream).ok());
  const int64_t B = 2, T = 16;
  Tensor tokens = *Tensor::empty({B, T}, DType::kI32, core::Stream::cpu());
  Tensor targets = *Tensor::empty({B, T}, DType::kI32, core::Stream::cpu());
  for (int64_t i = 0; i < B * T; ++i) {
    tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 37 + 5) % c.vocab_size);
    targets.data<int32_t>()[i] = static_cast<int32_t>((i * 53 + 1) % c.vocab_size);
  }
  cpu_ctx->manual_seed(314);
  gpu_ctx.manual_seed(314);
  ForwardResult cpu_out = *cpu_model->forward(*cpu_ctx, tokens);
  absl::StatusOr<ForwardResult> gpu_out =
      gpu_model->forward(gpu_ctx, *tokens.to(core::Device::cuda(0), stream));
  ASSERT_TRUE(gpu_out.ok()) << gpu_out.status();
  EXPECT_LT(relative_difference(gpu_out->output, cpu_out.output, stream), 1e-4) << "logits";
  CrossEntropyResult cpu_ce = *cross_entropy(*cpu_ctx, cpu_out.output, targets, c.vocab_size, {});
  absl::StatusOr<CrossEntropyResult> gpu_ce = cross_entropy(
      gpu_ctx, gpu_out->output, *targets.to(core::Device::cuda(0), stream), c.vocab_size, {});
  ASSERT_TRUE(gpu_ce.ok()) << gpu_ce.status();
  ASSERT_TRUE(cpu_model->backward(*cpu_ctx, *cpu_out.saved, cpu_ce.dlogits).ok());
  absl::StatusOr<Tensor> gpu_dx = gpu_model->backward(gpu_ctx, *gpu_out->saved, gpu_ce->dlogits);
  ASSERT_TRUE(gpu_dx.ok()) << gpu_dx.status();
  gpu_ctx.synchronize();
  EXPECT_EQ(cpu_ctx->rng_state(), gpu_ctx.rng_state());
  const std::vector<Parameter>& cpu_params = cpu_model->store().parameters();
  const std::vector<Parameter>& gpu_params = gpu_model->store().parameters();
  ASSERT_EQ(cpu_params.size(), gpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    EXPECT_LT(relative_difference(gpu_params[i].grad, cpu_params[i].grad, stream), 1e-3)
        << cpu_params[i].name;
  }
#endif
}

}  // namespace
}  // namespace colossal::nn
