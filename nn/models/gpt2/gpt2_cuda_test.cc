// GPT-2 on CUDA against the CPU reference: initialisation, logits, loss,
// dlogits and every parameter gradient. Skips without a GPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "core/status/status.h"
#include "nn/models/causal_lm/cuda_parity.h"
#include "nn/models/gpt2/gpt2.h"
#include "tests/util/gpu_test.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Tensor;

#if COLOSSAL_WITH_CUDA
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

ModelFactory gpt2(const GPT2Config& c) {
  return [c]() -> absl::StatusOr<std::unique_ptr<CausalLM>> {
    COLOSSAL_ASSIGN_OR_RETURN(std::unique_ptr<GPT2> model, GPT2::declare(c, DType::kF32));
    return std::unique_ptr<CausalLM>(std::move(model));
  };
}
#endif

TEST(GPT2CudaTest, MatchesCpuForwardAndBackward) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  CpuAndCuda m;
  ASSERT_NO_FATAL_FAILURE(set_up(gpt2(small_config()), 11, m));
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
  ASSERT_NO_FATAL_FAILURE(set_up(gpt2(c), 11, m));
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
