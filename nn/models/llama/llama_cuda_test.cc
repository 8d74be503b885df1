// Llama on CUDA against the CPU reference (float32: logits, loss, dlogits and
// every gradient), and bfloat16 with the fused grouped-query attention kernel
// against the explicit attention path and the float32 CPU model. Skips
// without a GPU.
#include <cstdlib>
#include <memory>

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

TEST(LlamaCudaTest, Float32MatchesCpuForwardAndBackward) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    CpuAndCuda m;
    ASSERT_NO_FATAL_FAILURE(set_up(llama(small_config(tied)), 11, m));
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

}  // namespace
}  // namespace colossal::nn
