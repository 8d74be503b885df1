// Llama on CUDA against the CPU reference (float32: logits, loss, dlogits and
// every gradient), and bfloat16 with the fused grouped-query attention kernel
// against the explicit attention path and the float32 CPU model. Skips
// without a GPU.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/ops/elementwise.h"
#include "core/status/status.h"
#include "gtest/gtest.h"
#include "nn/models/causal_lm/cuda_parity.h"
#include "nn/models/llama/llama.h"
#include "tests/util/gpu_test.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Tensor;

#if COLOSSAL_WITH_CUDA
// 2 layers, 256 wide (4 query / 2 key-value heads of 64, the fused kernel's
// head size), vocabulary 100, Llama-3 rope scaling with a short original
// context so every frequency band is exercised.
LlamaConfig small_config(bool tied) {
  LlamaConfig c;
  c.vocab_size = 100;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.rope_scaling = kernels::rope::Llama3RopeScaling{8.0, 1.0, 4.0, 8};
  c.tie_word_embeddings = tied;
  return c;
}

ModelFactory llama(const LlamaConfig& c, DType dtype = DType::kF32) {
  return [c, dtype]() -> absl::StatusOr<std::unique_ptr<CausalLM>> {
    COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<Llama> model, Llama::declare(c, dtype));
    return std::unique_ptr<CausalLM>(std::move(model));
  };
}

// logits of `model` (bf16 on cuda:0) for m's tokens, as float32 on the host.
Tensor bf16_logits(CausalLM& model, CpuAndCuda& m, const Tensor& gpu_tokens) {
  absl::StatusOr<ForwardResult> out = model.forward(*m.gpu_ctx, gpu_tokens);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return Tensor();
  Tensor wide = *core::Tensor::empty(out->output.shape(), DType::kF32, m.stream());
  EXPECT_TRUE(core::ops::cast(*m.gpu_ctx, wide, out->output).ok());
  Tensor host = *wide.to(core::Device::cpu(), m.stream());
  m.stream().synchronize();
  return host;
}
#endif

// Untied, tied, and a Mixtral (4 experts, 2 a token: kernels/moe's CUDA
// routing against the CPU's; in float32 the router picks the same experts).
TEST(LlamaCudaTest, Float32MatchesCpuForwardAndBackward) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  for (const char* kind : {"untied", "tied", "mixtral"}) {
    SCOPED_TRACE(kind);
    LlamaConfig config = small_config(std::string(kind) == "tied");
    if (std::string(kind) == "mixtral") {
      config.num_local_experts = 4;
      config.num_experts_per_tok = 2;
      config.intermediate_size = 128;
    }
    CpuAndCuda m;
    ASSERT_NO_FATAL_FAILURE(set_up(llama(config), 11, m));
    Steps s;
    ASSERT_NO_FATAL_FAILURE(forward_both(m, s));
    EXPECT_NEAR(s.gpu_ce.loss, s.cpu_ce.loss, 1e-4 * s.cpu_ce.loss);
    EXPECT_LT(relative_difference(s.gpu_ce.dlogits, s.cpu_ce.dlogits, m.stream()), 1e-4);
    ASSERT_NO_FATAL_FAILURE(backward_both(m, s));
    expect_same_gradients(m);
  }
#endif
}

// bfloat16 on the GPU: the fused grouped-query kernel against the explicit
// path (same weights, same bf16 rounding of q, k, v; the two differ in where
// P is rounded) and both against the float32 CPU model. bf16 keeps 8 bits of
// mantissa: after two layers the logits move by a few 1e-3 of their range.
TEST(LlamaCudaTest, Bfloat16FusedAttentionMatchesExplicitAndFloat32) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  CpuAndCuda m;
  ASSERT_NO_FATAL_FAILURE(set_up(llama(small_config(false)), 11, m));
  const Tensor gpu_tokens = *m.tokens.to(core::Device::cuda(0), m.stream());
  auto model = *Llama::declare(small_config(false), DType::kBF16);
  ASSERT_TRUE(model->store().allocate(m.stream()).ok());
  ASSERT_TRUE(model->init(11, m.stream()).ok());
  const Tensor fused = bf16_logits(*model, m, gpu_tokens);
  ASSERT_EQ(setenv("COLOSSAL_ATTENTION", "explicit", 1), 0);
  const Tensor explicit_path = bf16_logits(*model, m, gpu_tokens);
  ASSERT_EQ(unsetenv("COLOSSAL_ATTENTION"), 0);
  ASSERT_TRUE(fused.defined() && explicit_path.defined());
  const ForwardResult reference = *m.cpu_model->forward(*m.cpu_ctx, m.tokens);
  EXPECT_LT(relative_difference(fused, explicit_path, core::Stream::cpu()), 2e-2);
  EXPECT_LT(relative_difference(fused, reference.output, core::Stream::cpu()), 3e-2);
  EXPECT_GT(relative_difference(fused, reference.output, core::Stream::cpu()), 0.0)
      << "bf16 equal to float32 bit for bit: the model did not run in bf16";
#endif
}

// Packed documents in bfloat16 on the GPU (rope by position and the fused
// varlen kernels, forward and backward) against the float32 CPU model over the
// same documents (CPU reference kernels; llama_test checks those against each
// document alone). Rows of 200 tokens hold documents of 1 to 150, across the
// kernels' 64- and 128-row tiles. Tolerances: bf16's, as above, and for the
// gradients (bf16 activations and products through two layers and back) 5e-2
// of each gradient's largest element.
TEST(LlamaCudaTest, Bfloat16PackedDocumentsMatchFloat32Cpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  LlamaConfig config = small_config(false);
  config.max_position_embeddings = 256;
  const int64_t B = 2, T = 200;
  const std::vector<std::vector<int64_t>> lengths = {{70, 130}, {1, 150, 49}};
  auto cpu_ctx = std::move(*core::Context::create(core::Device::cpu()));
  auto gpu_ctx = std::move(*core::Context::create(core::Device::cuda(0)));
  const core::Stream& stream = gpu_ctx->compute_stream();
  Tensor tokens = *Tensor::empty({B, T}, DType::kI32, core::Stream::cpu());
  Tensor targets = *Tensor::empty({B, T}, DType::kI32, core::Stream::cpu());
  Tensor positions = *Tensor::empty({B, T}, DType::kI32, core::Stream::cpu());
  for (int64_t i = 0; i < B * T; ++i) {
    tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 37 + 11) % config.vocab_size);
    targets.data<int32_t>()[i] = static_cast<int32_t>((i * 53 + 7) % config.vocab_size);
  }
  for (int64_t b = 0, at = 0; b < B; ++b) {
    for (int64_t n : lengths[b]) {
      for (int64_t t = 0; t < n; ++t) positions.data<int32_t>()[at++] = static_cast<int32_t>(t);
    }
  }
  auto cpu_model = *Llama::create(config, DType::kF32, core::Stream::cpu());
  ASSERT_TRUE(cpu_model->init(11).ok());
  auto gpu_model = *Llama::declare(config, DType::kBF16);
  ASSERT_TRUE(gpu_model->store().allocate(stream).ok());
  ASSERT_TRUE(gpu_model->init(11, stream).ok());
  ASSERT_TRUE(cpu_model->set_documents(*Documents::from_positions(*cpu_ctx, positions)).ok());
  ASSERT_TRUE(gpu_model->set_documents(*Documents::from_positions(*gpu_ctx, positions)).ok());

  auto cpu_out = cpu_model->forward(*cpu_ctx, tokens);
  ASSERT_TRUE(cpu_out.ok()) << cpu_out.status();
  const Tensor gpu_tokens = *tokens.to(core::Device::cuda(0), stream);
  const Tensor gpu_targets = *targets.to(core::Device::cuda(0), stream);
  auto gpu_out = gpu_model->forward(*gpu_ctx, gpu_tokens);
  ASSERT_TRUE(gpu_out.ok()) << gpu_out.status();
  Tensor wide = *Tensor::empty(gpu_out->output.shape(), DType::kF32, stream);
  ASSERT_TRUE(core::ops::cast(*gpu_ctx, wide, gpu_out->output).ok());
  const double logits = relative_difference(wide, cpu_out->output, stream);
  EXPECT_LT(logits, 3e-2);
  EXPECT_GT(logits, 0.0) << "bf16 equal to float32 bit for bit: the model did not run in bf16";

  CrossEntropyOptions ce;
  ce.in_place = true;
  auto cpu_ce = cpu_model->loss(*cpu_ctx, cpu_out->output, targets, ce);
  auto gpu_ce = gpu_model->loss(*gpu_ctx, gpu_out->output, gpu_targets, ce);
  ASSERT_TRUE(cpu_ce.ok() && gpu_ce.ok());
  EXPECT_NEAR(gpu_ce->loss, cpu_ce->loss, 2e-2 * cpu_ce->loss);
  ASSERT_TRUE(cpu_model->backward(*cpu_ctx, *cpu_out->saved, cpu_ce->dlogits).ok());
  ASSERT_TRUE(gpu_model->backward(*gpu_ctx, *gpu_out->saved, gpu_ce->dlogits).ok());
  const std::vector<Parameter> cpu_params = cpu_model->store().parameters();
  const std::vector<Parameter> gpu_params = gpu_model->store().parameters();
  ASSERT_EQ(cpu_params.size(), gpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    Tensor g = *Tensor::empty(gpu_params[i].grad.shape(), DType::kF32, stream);
    ASSERT_TRUE(core::ops::cast(*gpu_ctx, g, gpu_params[i].grad).ok());
    EXPECT_LT(relative_difference(g, cpu_params[i].grad, stream), 5e-2) << cpu_params[i].name;
  }
#endif
}

}  // namespace
}  // namespace colossal::nn
