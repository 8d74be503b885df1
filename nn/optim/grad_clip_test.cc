// Gradient clipping: the global norm over mixed dtypes against float64, clip
// by norm (pre-clip norm returned, coefficient applied or reported, loss-scaled
// gradients), non-finite gradients reported and left alone, clip by value;
// CUDA against CPU (GPU).
#include "nn/optim/grad_clip.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/device/device.h"
#include "core/device/stream.h"
#include "nn/optim/test_util.h"
#include "tests/util/gpu_test.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Tensor;
using testing::to_floats;

std::vector<Tensor> mixed_grads() {
  return {testing::random_cpu_tensor({100, 7}, DType::kF32, 1, -2.0f, 2.0f),
          testing::random_cpu_tensor({33}, DType::kBF16, 2, -2.0f, 2.0f),
          testing::random_cpu_tensor({5, 5}, DType::kF16, 3, -2.0f, 2.0f),
          testing::random_cpu_tensor({0}, DType::kF32, 4)};
}

double norm64(const std::vector<Tensor>& grads) {
  double s = 0;
  for (const Tensor& g : grads) {
    for (float x : to_floats(g)) s += static_cast<double>(x) * x;
  }
  return std::sqrt(s);
}

TEST(GradNormTest, MatchesFloat64OverMixedDtypes) {
  const std::vector<Tensor> grads = mixed_grads();
  GradNorm n = grad_norm(grads, core::Stream::cpu()).value();
  EXPECT_TRUE(n.finite);
  EXPECT_NEAR(n.norm, norm64(grads), 1e-5 * norm64(grads));
  GradNorm none = grad_norm({}, core::Stream::cpu()).value();
  EXPECT_EQ(none.norm, 0.0f);
  EXPECT_TRUE(none.finite);
}

TEST(ClipGradByNormTest, ClipsAndReturnsThePreClipNorm) {
  std::vector<Tensor> grads = mixed_grads();
  const double before = norm64(grads);
  std::vector<std::vector<float>> old;
  for (const Tensor& g : grads) old.push_back(to_floats(g));
  ClipResult r = clip_grad_by_norm(grads, 1.0f, core::Stream::cpu()).value();
  EXPECT_TRUE(r.finite);
  EXPECT_TRUE(r.clipped);
  EXPECT_NEAR(r.total_norm, before, 1e-5 * before);
  EXPECT_FLOAT_EQ(r.clip_coef, static_cast<float>(1.0 / (r.total_norm + 1e-6)));
  EXPECT_NEAR(norm64(grads), 1.0, 1e-2);  // 16-bit gradients round
  for (size_t i = 0; i < grads.size(); ++i) {
    const std::vector<float> now = to_floats(grads[i]);
    for (size_t k = 0; k < now.size(); ++k) {
      EXPECT_NEAR(now[k], old[i][k] * r.clip_coef, 4e-3 * std::fabs(old[i][k] * r.clip_coef) + 1e-7);
    }
  }
}

TEST(ClipGradByNormTest, BelowTheLimitNothingChanges) {
  std::vector<Tensor> grads = mixed_grads();
  std::vector<std::vector<uint8_t>> old;
  for (const Tensor& g : grads) old.push_back(testing::to_bytes(g));
  ClipResult r = clip_grad_by_norm(grads, 1e6f, core::Stream::cpu()).value();
  EXPECT_FALSE(r.clipped);
  EXPECT_EQ(r.clip_coef, 1.0f);
  for (size_t i = 0; i < grads.size(); ++i) EXPECT_EQ(testing::to_bytes(grads[i]), old[i]);
}

TEST(ClipGradByNormTest, LossScaledGradientsAndFoldedCoefficient) {
  std::vector<Tensor> grads = {testing::random_cpu_tensor({64}, DType::kF32, 5)};
  const double unscaled = norm64(grads);
  for (int64_t i = 0; i < 64; ++i) grads[0].data<float>()[i] *= 1024.0f;
  const std::vector<uint8_t> old = testing::to_bytes(grads[0]);
  ClipGradNormOptions o;
  o.grad_scale = 1024.0f;
  o.in_place = false;
  ClipResult r = clip_grad_by_norm(grads, 0.5f, core::Stream::cpu(), o).value();
  EXPECT_NEAR(r.total_norm, unscaled, 1e-5 * unscaled);
  EXPECT_NEAR(r.clip_coef, 0.5 / (unscaled + 1e-6), 1e-6);
  EXPECT_FALSE(r.clipped);
  EXPECT_EQ(testing::to_bytes(grads[0]), old);
}

TEST(ClipGradByNormTest, NonFiniteGradientsAreReportedAndLeftAlone) {
  for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<Tensor> grads = mixed_grads();
    grads[0].data<float>()[17] = bad;
    std::vector<std::vector<uint8_t>> old;
    for (const Tensor& g : grads) old.push_back(testing::to_bytes(g));
    ClipResult r = clip_grad_by_norm(grads, 1.0f, core::Stream::cpu()).value();
    EXPECT_FALSE(r.finite);
    EXPECT_FALSE(r.clipped);
    EXPECT_EQ(r.clip_coef, 1.0f);
    EXPECT_FALSE(std::isfinite(r.total_norm));
    for (size_t i = 0; i < grads.size(); ++i) EXPECT_EQ(testing::to_bytes(grads[i]), old[i]);
  }
  // A bf16 inf, too.
  std::vector<Tensor> grads = {testing::cpu_tensor({2}, DType::kBF16, {1.0f, INFINITY})};
  EXPECT_FALSE(grad_norm(grads, core::Stream::cpu()).value().finite);
}

TEST(ClipGradByValueTest, ClampsEveryElement) {
  std::vector<Tensor> grads = {testing::cpu_tensor({4}, DType::kF32, {-3.0f, 0.5f, 2.0f, NAN}),
                               testing::cpu_tensor({3}, DType::kBF16, {-0.25f, 9.0f, -9.0f})};
  ASSERT_TRUE(clip_grad_by_value(grads, 1.0f, core::Stream::cpu()).ok());
  const std::vector<float> a = to_floats(grads[0]);
  EXPECT_EQ(a[0], -1.0f);
  EXPECT_EQ(a[1], 0.5f);
  EXPECT_EQ(a[2], 1.0f);
  EXPECT_TRUE(std::isnan(a[3]));
  EXPECT_EQ(to_floats(grads[1]), (std::vector<float>{-0.25f, 1.0f, -1.0f}));
}

void expect_error(const absl::Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(needle), std::string::npos) << "\"" << needle << "\" not in: " << s;
}

TEST(ClipGradTest, Errors) {
  std::vector<Tensor> grads = mixed_grads();
  expect_error(clip_grad_by_norm(grads, 0.0f, core::Stream::cpu()).status(), "max_norm");
  ClipGradNormOptions o;
  o.grad_scale = -1.0f;
  expect_error(clip_grad_by_norm(grads, 1.0f, core::Stream::cpu(), o).status(), "grad_scale");
  expect_error(clip_grad_by_value(grads, -1.0f, core::Stream::cpu()), "clip_value");
  grads.push_back(core::Tensor::empty({3}, DType::kI32, core::Stream::cpu()).value());
  expect_error(grad_norm(grads, core::Stream::cpu()).status(), "gradient 4");
  grads.back() = Tensor();
  expect_error(clip_grad_by_value(grads, 1.0f, core::Stream::cpu()), "gradient 4");
}

TEST(ClipGradCudaTest, CudaGradientsMatchCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  auto owned = core::OwnedStream::create(core::Device::cuda(0)).value();
  const core::Stream& stream = owned.get();
  std::vector<Tensor> cpu = mixed_grads();
  std::vector<Tensor> gpu;
  std::vector<Tensor> mixed;  // half on each device
  for (size_t i = 0; i < cpu.size(); ++i) {
    gpu.push_back(cpu[i].to(stream.device(), stream).value());
    mixed.push_back(i % 2 ? testing::clone_cpu(cpu[i]) : cpu[i].to(stream.device(), stream).value());
  }
  stream.synchronize();
  const GradNorm nc = grad_norm(cpu, stream).value();
  const GradNorm ng = grad_norm(gpu, stream).value();
  const GradNorm nm = grad_norm(mixed, stream).value();
  EXPECT_NEAR(ng.norm, nc.norm, 1e-5 * nc.norm);
  EXPECT_NEAR(nm.norm, nc.norm, 1e-5 * nc.norm);
  ASSERT_TRUE(clip_grad_by_value(cpu, 0.5f, stream).ok());
  ASSERT_TRUE(clip_grad_by_value(gpu, 0.5f, stream).ok());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_EQ(testing::to_bytes(cpu[i]), testing::to_bytes(gpu[i], stream)) << i;
  }
  const ClipResult rc = clip_grad_by_norm(cpu, 0.1f, stream).value();
  const ClipResult rg = clip_grad_by_norm(gpu, 0.1f, stream).value();
  EXPECT_TRUE(rg.clipped);
  EXPECT_NEAR(rg.clip_coef, rc.clip_coef, 1e-5 * rc.clip_coef);
  // A non-finite CUDA gradient.
  Tensor inf = testing::cpu_tensor({2}, DType::kF32, {1.0f, INFINITY}).to(stream.device(), stream).value();
  EXPECT_FALSE(clip_grad_by_norm({inf}, 1.0f, stream).value().finite);
#endif
}

}  // namespace
}  // namespace colossal::nn
