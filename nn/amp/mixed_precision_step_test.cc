// The mixed-precision step: loss-scaled gradients give the unscaled step,
// overflows skip and back the scale off, clipping folds into the division,
// and without a scaler non-finite gradients still skip.
#include "nn/amp/mixed_precision_step.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "nn/amp/loss_scaler.h"
#include "nn/optim/adam.h"
#include "nn/optim/grad_clip.h"
#include "nn/optim/test_util.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Tensor;

std::vector<ParamRef> params(uint32_t seed) {
  return {testing::random_param("w", {40, 3}, seed), testing::random_param("b", {3}, seed + 1)};
}

void scale_grads(std::vector<ParamRef>& ps, float s) {
  for (ParamRef& p : ps) {
    for (int64_t i = 0; i < p.grad.numel(); ++i) p.grad.data<float>()[i] *= s;
  }
}

TEST(MixedPrecisionStepTest, LossScaledGradientsGiveTheUnscaledStep) {
  std::vector<ParamRef> a = params(1), b = params(1);
  auto oa = make_adamw({ParamGroup{a}}).value();
  auto ob = make_adamw({ParamGroup{b}}).value();
  DynamicLossScalerOptions so;
  so.initial_scale = 1024;
  DynamicLossScaler scaler = DynamicLossScaler::create(so).value();
  scale_grads(b, scaler.scale());
  const float plain_norm = grad_norm(oa->grads(), core::Stream::cpu()).value().norm;
  ASSERT_TRUE(oa->step().ok());
  MixedPrecisionStepResult r = mixed_precision_step(*ob, &scaler).value();
  EXPECT_FALSE(r.skipped);
  EXPECT_EQ(r.loss_scale, 1024.0f);
  EXPECT_EQ(r.clip_coef, 1.0f);
  EXPECT_FLOAT_EQ(r.grad_norm, plain_norm);
  EXPECT_EQ(scaler.growth_step(), 1);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(testing::to_bytes(a[i].master), testing::to_bytes(b[i].master)) << a[i].name;
  }
}

TEST(MixedPrecisionStepTest, OverflowSkipsAndBacksOff) {
  std::vector<ParamRef> ps = params(2);
  auto opt = make_adamw({ParamGroup{ps}}).value();
  DynamicLossScalerOptions so;
  so.hysteresis = 1;
  DynamicLossScaler scaler = DynamicLossScaler::create(so).value();
  ps[1].grad.data<float>()[2] = INFINITY;
  const auto before = testing::to_bytes(ps[0].master);
  MixedPrecisionStepResult r = mixed_precision_step(*opt, &scaler, {.max_norm = 1.0f}).value();
  EXPECT_TRUE(r.skipped);
  EXPECT_FALSE(std::isfinite(r.grad_norm));
  EXPECT_EQ(r.loss_scale, 65536.0f);
  EXPECT_EQ(scaler.scale(), 32768.0f);
  EXPECT_EQ(testing::to_bytes(ps[0].master), before);
  EXPECT_EQ(opt->param_step("w").value(), 0);
  // Without a scaler (bf16 / fp32) a NaN still skips.
  ps[1].grad.data<float>()[2] = NAN;
  EXPECT_TRUE(mixed_precision_step(*opt, nullptr).value().skipped);
  EXPECT_EQ(opt->param_step("w").value(), 0);
}

TEST(MixedPrecisionStepTest, ClippingFoldsIntoTheDivision) {
  std::vector<ParamRef> a = params(3), b = params(3);
  auto oa = make_adamw({ParamGroup{a}}).value();
  auto ob = make_adamw({ParamGroup{b}}).value();
  // Reference: clip the true gradients in place, then step.
  const ClipResult c = clip_grad_by_norm(oa->grads(), 0.25f, core::Stream::cpu()).value();
  ASSERT_TRUE(c.clipped);
  ASSERT_TRUE(oa->step().ok());
  DynamicLossScalerOptions so;
  so.initial_scale = 256;
  DynamicLossScaler scaler = DynamicLossScaler::create(so).value();
  scale_grads(b, 256.0f);
  MixedPrecisionStepResult r = mixed_precision_step(*ob, &scaler, {.max_norm = 0.25f}).value();
  EXPECT_FALSE(r.skipped);
  EXPECT_NEAR(r.grad_norm, c.total_norm, 1e-6 * c.total_norm);
  EXPECT_NEAR(r.clip_coef, c.clip_coef, 1e-6 * c.clip_coef);
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<float> x = testing::to_floats(a[i].master), y = testing::to_floats(b[i].master);
    for (size_t k = 0; k < x.size(); ++k) ASSERT_NEAR(x[k], y[k], 1e-6) << a[i].name << " " << k;
  }
  EXPECT_EQ(mixed_precision_step(*ob, &scaler, {.max_norm = -1.0f}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace colossal::nn
