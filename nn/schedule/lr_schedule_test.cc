// LR schedules against hand-computed values; the scheduler's groups and state.
#include "nn/schedule/lr_schedule.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace colossal::nn {
namespace {

LrScheduleOptions opts(LrScheduleKind kind) {
  LrScheduleOptions o;
  o.kind = kind;
  o.warmup_steps = 4;
  o.total_steps = 12;
  o.eta_min = 0.1;
  return o;
}

TEST(LrAtTest, WarmupIsLinearFromTheFirstStep) {
  for (LrScheduleKind k : {LrScheduleKind::kConstant, LrScheduleKind::kCosine, LrScheduleKind::kLinear}) {
    const LrScheduleOptions o = opts(k);
    EXPECT_DOUBLE_EQ(lr_at(o, 1.0, 0), 0.25) << lr_schedule_name(k);
    EXPECT_DOUBLE_EQ(lr_at(o, 1.0, 1), 0.5);
    EXPECT_DOUBLE_EQ(lr_at(o, 1.0, 2), 0.75);
    EXPECT_DOUBLE_EQ(lr_at(o, 1.0, 3), 1.0);
    EXPECT_DOUBLE_EQ(lr_at(o, 2.0, 1), 1.0);  // scales with the base lr
    EXPECT_DOUBLE_EQ(lr_at(o, 1.0, -5), 0.25);
  }
}

TEST(LrAtTest, Constant) {
  const LrScheduleOptions o = opts(LrScheduleKind::kConstant);
  EXPECT_DOUBLE_EQ(lr_at(o, 3e-4, 4), 3e-4);
  EXPECT_DOUBLE_EQ(lr_at(o, 3e-4, 1000000), 3e-4);
  LrScheduleOptions none;  // no warmup
  EXPECT_DOUBLE_EQ(lr_at(none, 0.5, 0), 0.5);
}

TEST(LrAtTest, CosineToMinLr) {
  const LrScheduleOptions o = opts(LrScheduleKind::kCosine);
  EXPECT_DOUBLE_EQ(lr_at(o, 1.0, 4), 1.0);                 // progress 0
  EXPECT_NEAR(lr_at(o, 1.0, 6), 0.8681980515339464, 1e-15);  // 0.1 + 0.45 (1 + cos(pi/4))
  EXPECT_NEAR(lr_at(o, 1.0, 8), 0.55, 1e-15);               // progress 1/2
  EXPECT_NEAR(lr_at(o, 1.0, 10), 0.23180194846605365, 1e-15); // 0.1 + 0.45 (1 + cos(3pi/4))
  EXPECT_NEAR(lr_at(o, 1.0, 11), 0.13425421036992097, 1e-15);    // 0.1 + 0.45 (1 + cos(7pi/8))
  EXPECT_DOUBLE_EQ(lr_at(o, 1.0, 12), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(o, 1.0, 1000), 0.1);
}

TEST(LrAtTest, LinearToMinLr) {
  const LrScheduleOptions o = opts(LrScheduleKind::kLinear);
  EXPECT_DOUBLE_EQ(lr_at(o, 1.0, 4), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(o, 1.0, 8), 0.55);   // 0.1 + 0.9 * 4/8
  EXPECT_DOUBLE_EQ(lr_at(o, 1.0, 10), 0.325); // 0.1 + 0.9 * 2/8
  EXPECT_DOUBLE_EQ(lr_at(o, 1.0, 12), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(o, 1.0, 13), 0.1);
  LrScheduleOptions c;  // Colossal-AI's LinearWarmupLR decay: to 0, no warmup
  c.kind = LrScheduleKind::kLinear;
  c.total_steps = 10;
  EXPECT_DOUBLE_EQ(lr_at(c, 1.0, 0), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 1.0, 3), 0.7);
  EXPECT_DOUBLE_EQ(lr_at(c, 1.0, 10), 0.0);
}

TEST(LrAtTest, WarmupEqualToTotalGoesStraightToMinLr) {
  LrScheduleOptions o = opts(LrScheduleKind::kCosine);
  o.total_steps = 4;
  EXPECT_DOUBLE_EQ(lr_at(o, 1.0, 3), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(o, 1.0, 4), 0.1);
}

TEST(LrScheduleTest, ParseAndValidate) {
  EXPECT_EQ(parse_lr_schedule(" Cosine ").value(), LrScheduleKind::kCosine);
  EXPECT_EQ(parse_lr_schedule("linear").value(), LrScheduleKind::kLinear);
  const absl::Status s = parse_lr_schedule("cosin").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("did you mean \"cosine\""), std::string::npos) << s;
  LrScheduleOptions o = opts(LrScheduleKind::kCosine);
  EXPECT_TRUE(validate_lr_schedule(o).ok());
  o.total_steps = 3;
  EXPECT_NE(validate_lr_schedule(o).message().find("total_steps"), std::string::npos);
  o = opts(LrScheduleKind::kLinear);
  o.eta_min = -1;
  EXPECT_NE(validate_lr_schedule(o).message().find("eta_min"), std::string::npos);
  o = opts(LrScheduleKind::kConstant);
  o.warmup_steps = -1;
  EXPECT_NE(validate_lr_schedule(o).message().find("warmup_steps"), std::string::npos);
}

TEST(LrSchedulerTest, GroupsStepAndState) {
  LrScheduler s = LrScheduler::create(opts(LrScheduleKind::kLinear), {1.0, 0.5}).value();
  EXPECT_EQ(s.lrs(), (std::vector<double>{0.25, 0.125}));
  for (int i = 0; i < 8; ++i) s.step();
  EXPECT_EQ(s.step_count(), 8);
  EXPECT_DOUBLE_EQ(s.lrs()[0], 0.55);
  EXPECT_DOUBLE_EQ(s.lrs()[1], 0.1 + 0.4 * 0.5);

  const std::string json = lr_scheduler_state_to_json(s.state());
  EXPECT_EQ(json, "{\"step\":8}");
  LrScheduler t = LrScheduler::create(opts(LrScheduleKind::kLinear), {1.0, 0.5}).value();
  ASSERT_TRUE(t.load_state(lr_scheduler_state_from_json(json).value()).ok());
  EXPECT_EQ(t.lrs(), s.lrs());
  EXPECT_EQ(t.state(), s.state());
  EXPECT_FALSE(t.load_state(LrSchedulerState{-1}).ok());
  EXPECT_FALSE(lr_scheduler_state_from_json("{\"step\": -2}").ok());
  EXPECT_FALSE(lr_scheduler_state_from_json("{\"step\": 1.5}").ok());
  EXPECT_FALSE(lr_scheduler_state_from_json("nope").ok());
}

TEST(LrSchedulerTest, RejectsBaseLrsBelowMinLr) {
  const absl::Status s = LrScheduler::create(opts(LrScheduleKind::kCosine), {1.0, 0.05}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("group 1"), std::string::npos) << s;
  EXPECT_FALSE(LrScheduler::create(opts(LrScheduleKind::kConstant), {-1.0}).ok());
  EXPECT_TRUE(LrScheduler::create(opts(LrScheduleKind::kConstant), {0.05}).ok());
}

}  // namespace
}  // namespace colossal::nn
