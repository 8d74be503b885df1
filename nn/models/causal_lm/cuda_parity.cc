#include "nn/models/causal_lm/cuda_parity.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "gtest/gtest.h"

namespace colossal::nn {

double relative_difference(const core::Tensor& a, const core::Tensor& b, const core::Stream& stream) {
  const core::Tensor ha = *a.to(core::Device::cpu(), stream);
  stream.synchronize();
  double diff = 0, scale = 1e-6;
  for (int64_t i = 0; i < b.numel(); ++i) {
    diff = std::max(diff, double(std::abs(ha.data<float>()[i] - b.data<float>()[i])));
    scale = std::max(scale, double(std::abs(b.data<float>()[i])));
  }
  return diff / scale;
}

void set_up(const ModelFactory& factory, uint64_t seed, CpuAndCuda& m) {
  m.cpu_ctx = std::move(*core::Context::create(core::Device::cpu()));
  absl::StatusOr<std::unique_ptr<core::Context>> gpu = core::Context::create(core::Device::cuda(0));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  m.gpu_ctx = std::move(*gpu);
  const core::Stream cpu = core::Stream::cpu();
  const std::pair<std::unique_ptr<CausalLM>*, const core::Stream*> models[] = {
      {&m.cpu_model, &cpu}, {&m.gpu_model, &m.stream()}};
  for (const auto& [model, stream] : models) {
    absl::StatusOr<std::unique_ptr<CausalLM>> made = factory();
    ASSERT_TRUE(made.ok()) << made.status();
    *model = *std::move(made);
    ASSERT_TRUE((*model)->store().allocate(*stream).ok());
    ASSERT_TRUE((*model)->init(seed, *stream).ok());
  }
  const int64_t v = m.cpu_model->vocab_size();
  m.tokens = *core::Tensor::empty({m.B, m.T}, core::DType::kI32, core::Stream::cpu());
  m.targets = *core::Tensor::empty({m.B, m.T}, core::DType::kI32, core::Stream::cpu());
  for (int64_t i = 0; i < m.B * m.T; ++i) {
    m.tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 37 + 5) % v);
    m.targets.data<int32_t>()[i] = static_cast<int32_t>((i * 53 + 1) % v);
  }
}

void forward_both(CpuAndCuda& m, Steps& s) {
  const core::Stream& stream = m.stream();
  s.gpu_tokens = *m.tokens.to(core::Device::cuda(0), stream);
  s.gpu_targets = *m.targets.to(core::Device::cuda(0), stream);
  s.cpu_out = std::move(*m.cpu_model->forward(*m.cpu_ctx, m.tokens));
  absl::StatusOr<ForwardResult> gpu_out = m.gpu_model->forward(*m.gpu_ctx, s.gpu_tokens);
  ASSERT_TRUE(gpu_out.ok()) << gpu_out.status();
  s.gpu_out = std::move(*gpu_out);
  EXPECT_LT(relative_difference(s.gpu_out.output, s.cpu_out.output, stream), 1e-4) << "logits";
  const int64_t v = m.cpu_model->vocab_size();
  s.cpu_ce = *cross_entropy(*m.cpu_ctx, s.cpu_out.output, m.targets, v, {});
  absl::StatusOr<CrossEntropyResult> gpu_ce =
      cross_entropy(*m.gpu_ctx, s.gpu_out.output, s.gpu_targets, v, {});
  ASSERT_TRUE(gpu_ce.ok()) << gpu_ce.status();
  s.gpu_ce = std::move(*gpu_ce);
}

void backward_both(CpuAndCuda& m, Steps& s) {
  ASSERT_TRUE(m.cpu_model->backward(*m.cpu_ctx, *s.cpu_out.saved, s.cpu_ce.dlogits).ok());
  absl::StatusOr<core::Tensor> gpu_dx =
      m.gpu_model->backward(*m.gpu_ctx, *s.gpu_out.saved, s.gpu_ce.dlogits);
  ASSERT_TRUE(gpu_dx.ok()) << gpu_dx.status();
  m.gpu_ctx->synchronize();
}

void expect_same_gradients(const CpuAndCuda& m, double tolerance) {
  const std::vector<Parameter>& cpu_params = m.cpu_model->store().parameters();
  const std::vector<Parameter>& gpu_params = m.gpu_model->store().parameters();
  ASSERT_EQ(cpu_params.size(), gpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    EXPECT_LT(relative_difference(gpu_params[i].grad, cpu_params[i].grad, m.stream()), tolerance)
        << cpu_params[i].name;
  }
}

}  // namespace colossal::nn
