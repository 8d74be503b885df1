// The dynamic loss scaler's state machine against Colossal-AI's
// DynamicGradScaler: sequences of overflow / good steps with expected scales,
// hysteresis, growth intervals, clamping, state round trips, option checks.
#include "nn/amp/loss_scaler.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace colossal::nn {
namespace {

// Runs `steps` ('x' overflow, '.' good) and checks the scale after each.
void run(DynamicLossScaler& s, const std::string& steps, const std::vector<float>& scales) {
  ASSERT_EQ(steps.size(), scales.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    s.update(steps[i] == 'x');
    ASSERT_EQ(s.scale(), scales[i]) << "after step " << i << " of \"" << steps << "\"";
  }
}

TEST(DynamicLossScalerTest, DefaultsAreColossalAis) {
  DynamicLossScaler s = DynamicLossScaler::create().value();
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.inv_scale(), 1.0f / 65536.0f);
  EXPECT_EQ(s.options().growth_interval, 1000);
  EXPECT_EQ(s.options().hysteresis, 2);
  EXPECT_EQ(s.options().min_scale, 1.0);
  EXPECT_EQ(s.options().max_scale, 4294967296.0);
}

TEST(DynamicLossScalerTest, HysteresisCountsOverflowsSinceTheLastGrowth) {
  DynamicLossScaler s = DynamicLossScaler::create().value();
  // 1st overflow tolerated; 2nd backs off; every later one too (no reset);
  // good steps in between reset neither.
  run(s, "xx.x..x", {65536, 32768, 32768, 16384, 16384, 16384, 8192});
  EXPECT_EQ(s.hysteresis_step(), 4);
  EXPECT_EQ(s.growth_step(), 0);

  DynamicLossScaler t = DynamicLossScaler::create().value();
  run(t, "x.x", {65536, 65536, 32768});  // two overflows apart still add up
}

TEST(DynamicLossScalerTest, GrowsAfterGrowthIntervalConsecutiveGoodSteps) {
  DynamicLossScalerOptions o;
  o.growth_interval = 4;
  DynamicLossScaler s = DynamicLossScaler::create(o).value();
  run(s, "...", {65536, 65536, 65536});
  EXPECT_EQ(s.growth_step(), 3);
  run(s, ".", {131072});
  EXPECT_EQ(s.growth_step(), 0);
  // An overflow restarts the count (tolerated by hysteresis: no back-off).
  run(s, "..x...", {131072, 131072, 131072, 131072, 131072, 131072});
  EXPECT_EQ(s.hysteresis_step(), 1);
  run(s, ".", {262144});
  // Growth reset the hysteresis count: one overflow is tolerated again.
  EXPECT_EQ(s.hysteresis_step(), 0);
  run(s, "xx", {262144, 131072});
}

TEST(DynamicLossScalerTest, ThousandStepsToGrow) {
  DynamicLossScaler s = DynamicLossScaler::create().value();
  for (int i = 0; i < 999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 65536.0f);
  s.update(false);
  EXPECT_EQ(s.scale(), 131072.0f);
}

TEST(DynamicLossScalerTest, ClampsToMinAndMaxScale) {
  DynamicLossScalerOptions o;
  o.initial_scale = 4;
  o.hysteresis = 1;
  DynamicLossScaler lo = DynamicLossScaler::create(o).value();
  run(lo, "xxxx", {2, 1, 1, 1});

  o = DynamicLossScalerOptions();
  o.initial_scale = 1073741824.0;  // 2^30
  o.growth_interval = 1;
  DynamicLossScaler hi = DynamicLossScaler::create(o).value();
  run(hi, "....", {2147483648.0f, 4294967296.0f, 4294967296.0f, 4294967296.0f});

  o = DynamicLossScalerOptions();  // no bounds
  o.initial_scale = 1;
  o.hysteresis = 0;
  o.min_scale = 0;
  o.max_scale = 0;
  o.growth_interval = 2;
  DynamicLossScaler none = DynamicLossScaler::create(o).value();
  run(none, "xx....", {0.5f, 0.25f, 0.25f, 0.5f, 0.5f, 1.0f});

  o = DynamicLossScalerOptions();  // an initial scale outside [min, max] is kept
  o.initial_scale = 0.5;
  o.hysteresis = 1;
  DynamicLossScaler below = DynamicLossScaler::create(o).value();
  EXPECT_EQ(below.scale(), 0.5f);
  run(below, "x", {1.0f});  // back-off clamps up to min_scale, as Colossal-AI's max()
}

TEST(DynamicLossScalerTest, Float32Arithmetic) {
  DynamicLossScalerOptions o;
  o.initial_scale = 1000;
  o.backoff_factor = 0.3;
  o.growth_factor = 1.7;
  o.hysteresis = 1;
  o.growth_interval = 1;
  DynamicLossScaler s = DynamicLossScaler::create(o).value();
  run(s, "x.", {1000.0f * 0.3f, 1000.0f * 0.3f * 1.7f});
}

TEST(DynamicLossScalerTest, StateRoundTripContinuesIdentically) {
  DynamicLossScalerOptions o;
  o.growth_interval = 5;
  DynamicLossScaler a = DynamicLossScaler::create(o).value();
  run(a, "x..", {65536, 65536, 65536});
  const std::string json = loss_scaler_state_to_json(a.state());
  EXPECT_EQ(json, "{\"growth_step\":2,\"hysteresis_step\":1,\"scale\":65536.0}");
  DynamicLossScaler b = DynamicLossScaler::create(o).value();
  ASSERT_TRUE(b.load_state(loss_scaler_state_from_json(json).value()).ok());
  EXPECT_EQ(b.state(), a.state());
  for (const char c : std::string("...x.x..")) {
    a.update(c == 'x');
    b.update(c == 'x');
    ASSERT_EQ(a.state(), b.state());
  }
  EXPECT_FALSE(b.load_state(LossScalerState{0.0f, 0, 0}).ok());
  EXPECT_FALSE(b.load_state(LossScalerState{1.0f, -1, 0}).ok());
  EXPECT_FALSE(loss_scaler_state_from_json("{\"scale\": 2}").ok());
  EXPECT_FALSE(loss_scaler_state_from_json("{\"scale\": -2, \"growth_step\": 0, \"hysteresis_step\": 0}").ok());
  EXPECT_FALSE(loss_scaler_state_from_json("[").ok());
}

void expect_bad(const DynamicLossScalerOptions& o, const std::string& needle) {
  const absl::Status s = DynamicLossScaler::create(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(needle), std::string::npos) << "\"" << needle << "\" not in: " << s;
}

TEST(DynamicLossScalerTest, RejectsBadOptions) {
  DynamicLossScalerOptions o;
  o.initial_scale = 0;
  expect_bad(o, "initial_scale");
  o = {};
  o.initial_scale = 1e300;
  expect_bad(o, "initial_scale");
  o = {};
  o.growth_factor = 1;
  expect_bad(o, "growth_factor");
  o = {};
  o.backoff_factor = 1;
  expect_bad(o, "backoff_factor");
  o = {};
  o.growth_interval = 0;
  expect_bad(o, "growth_interval");
  o = {};
  o.hysteresis = -1;
  expect_bad(o, "hysteresis");
  o = {};
  o.min_scale = -1;
  expect_bad(o, "min_scale");
  o = {};
  o.min_scale = 8;
  o.max_scale = 4;
  expect_bad(o, "above max_scale");
}

}  // namespace
}  // namespace colossal::nn
