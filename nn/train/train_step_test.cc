// Gradient accumulation: N micro-batches with dloss = 1/N equal one batch of
// N times the rows (float32 tolerance: summation order differs), through
// train_step with clipping by norm (same reported norm), by value, and fp16
// loss scaling; composes with activation checkpointing.
#include "nn/train/train_step.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "nn/amp/loss_scaler.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/optim/grad_clip.h"
#include "nn/optim/module_params.h"
#include "nn/optim/sgd.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Stream;
using core::Tensor;

// Tolerance for "accumulated equals one batch" in float32, from the
// computation rather than from a run: both sides evaluate the same sums in
// another order (rows split into micro-batches, OpenBLAS kernels and thread
// counts that block their dot products differently), and two orders of a
// float32 sum of n terms differ by at most 2 * gamma_n = 2 n u / (1 - n u)
// (u = 2^-24) relative to the sum of the terms' magnitudes. The longest chain
// of sums a gradient element goes through here: the B * T = 16 rows of a
// weight gradient, plus per layer a forward and a backward dot product of at
// most 4 * n_embd = 32 terms, plus the padded vocabulary (16) of the head:
// n = 16 + 2 * 2 * 32 + 16 = 160, so 2 * gamma_160 = 1.9e-5. Compared
// against the tensor's largest magnitude (the terms here are of its order). A
// lost micro-batch or a wrong 1/N scale is off by O(1). Each step starts both
// models from the same weights, so rounding does not compound over steps.
constexpr double kUnitRoundoff = 0x1p-24;
constexpr double kLongestSum = 16 + 2 * 2 * 32 + 16;
constexpr double kRelTol = 2 * kLongestSum * kUnitRoundoff / (1 - kLongestSum * kUnitRoundoff);

GPT2Config tiny_config(double checkpoint_ratio = 0.0) {
  GPT2Config c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.vocab_size = 11;
  c.max_seq_len = 4;
  c.padded_vocab_multiple = 8;
  c.checkpoint_ratio = checkpoint_ratio;
  return c;
}

Tensor tokens_of(const std::vector<int32_t>& ids, int64_t B, int64_t T) {
  Tensor t = *Tensor::empty({B, T}, DType::kI32, Stream::cpu());
  std::copy(ids.begin(), ids.begin() + B * T, t.data<int32_t>());
  return t;
}

std::vector<float> floats_of(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::abs(x));
  return m;
}

// Largest |a - b| relative to the largest |b|.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(double(a[i]) - b[i]));
  return d / std::max(1e-30, double(max_abs(b)));
}

class TrainStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_ = std::move(*core::Context::create(core::Device::cpu()));
    // 4 sequences of 5 tokens: inputs are the first 4, targets the last 4.
    const std::vector<int32_t> seq = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4};
    for (int b = 0; b < 4; ++b) {
      for (int t = 0; t < 4; ++t) {
        in_.push_back(seq[b * 5 + t]);
        target_.push_back(seq[b * 5 + t + 1]);
      }
    }
  }

  std::unique_ptr<GPT2> make(double checkpoint_ratio = 0.0) {
    auto model = *GPT2::create(tiny_config(checkpoint_ratio), DType::kF32, Stream::cpu());
    EXPECT_TRUE(model->init(21).ok());
    Tensor w = model->store().flat_values(DType::kF32);
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] *= 10.0f;  // more signal
    return model;
  }

  // The 4 rows as n micro-batches of 4 / n rows.
  std::vector<MicroBatch> split(int n) const {
    std::vector<MicroBatch> out;
    const int rows = 4 / n;
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> a(in_.begin() + i * rows * 4, in_.begin() + (i + 1) * rows * 4);
      std::vector<int32_t> b(target_.begin() + i * rows * 4, target_.begin() + (i + 1) * rows * 4);
      out.push_back({tokens_of(a, rows, 4), tokens_of(b, rows, 4), nullptr});
    }
    return out;
  }

  std::unique_ptr<Sgd> sgd(GPT2& model, double lr) {
    std::vector<ParamRef> params = *optimizer_params(model.store().parameters(), Stream::cpu());
    SgdOptions o;
    o.lr = lr;
    return *Sgd::create({ParamGroup{std::move(params)}}, o);
  }

  std::unique_ptr<core::Context> ctx_;
  std::vector<int32_t> in_, target_;
};

TEST_F(TrainStepTest, AccumulatedMicroBatchesEqualOneBatch) {
  auto model = make();
  ParameterStore& store = model->store();
  ASSERT_TRUE(store.zero_grad(Stream::cpu()).ok());
  AccumulateResult one = *accumulate_gradients(*ctx_, *model, 11, split(1));
  EXPECT_EQ(one.micro_batches, 1);
  const std::vector<float> g1 = floats_of(store.flat_grads(DType::kF32));
  ASSERT_GT(max_abs(g1), 0.01f);
  for (int n : {2, 4}) {
    ASSERT_TRUE(store.zero_grad(Stream::cpu()).ok());
    AccumulateResult acc = *accumulate_gradients(*ctx_, *model, 11, split(n));
    EXPECT_EQ(acc.micro_batches, n);
    EXPECT_NEAR(acc.loss, one.loss, kRelTol * one.loss) << n;
    const std::vector<float> gn = floats_of(store.flat_grads(DType::kF32));
    EXPECT_LT(rel_diff(gn, g1), kRelTol) << n;
    EXPECT_NE(gn, g1) << "expected rounding differences; is the test still meaningful?";
  }
  // Composes with activation checkpointing: bit-identical to the plain model.
  ASSERT_TRUE(store.zero_grad(Stream::cpu()).ok());
  ASSERT_TRUE(accumulate_gradients(*ctx_, *model, 11, split(2)).ok());
  const std::vector<float> plain = floats_of(store.flat_grads(DType::kF32));
  auto ckpt = make(/*checkpoint_ratio=*/0.5);
  ASSERT_TRUE(ckpt->blocks().at(0).checkpoint());
  ASSERT_TRUE(accumulate_gradients(*ctx_, *ckpt, 11, split(2)).ok());
  EXPECT_EQ(floats_of(ckpt->store().flat_grads(DType::kF32)), plain);
}

// Three SGD steps with clipping by global norm: 4 micro-batches track one
// batch (norm, coefficient, loss, weights).
TEST_F(TrainStepTest, TrainStepWithClipByNormMatchesOneBatch) {
  auto a = make(), b = make();
  auto oa = sgd(*a, 0.1), ob = sgd(*b, 0.1);
  // Clip at half the first step's norm so clipping is active.
  ASSERT_TRUE(b->store().zero_grad(Stream::cpu()).ok());
  ASSERT_TRUE(accumulate_gradients(*ctx_, *b, 11, split(1)).ok());
  const float norm0 = grad_norm(ob->grads(), Stream::cpu())->norm;
  TrainStepOptions o;
  o.max_norm = 0.5f * norm0;
  for (int step = 0; step < 3; ++step) {
    // The same starting weights for both (b's, which have taken b's steps).
    Tensor wa = a->store().flat_values(DType::kF32);
    const Tensor wb = b->store().flat_values(DType::kF32);
    std::memcpy(wa.data<float>(), wb.data<float>(), sizeof(float) * wb.numel());
    TrainStepResult ra = *train_step(*ctx_, *a, *oa, 11, split(4), o);
    TrainStepResult rb = *train_step(*ctx_, *b, *ob, 11, split(1), o);
    if (step == 0) {
      EXPECT_NEAR(rb.step.grad_norm, norm0, 1e-6 * norm0);
      EXPECT_LT(rb.step.clip_coef, 0.6f);
    }
    EXPECT_FALSE(ra.step.skipped);
    EXPECT_NEAR(ra.step.grad_norm, rb.step.grad_norm, kRelTol * rb.step.grad_norm) << step;
    EXPECT_NEAR(ra.step.clip_coef, rb.step.clip_coef, kRelTol) << step;
    EXPECT_NEAR(ra.loss, rb.loss, kRelTol * rb.loss) << step;
    EXPECT_LT(rel_diff(floats_of(a->store().flat_grads(DType::kF32)),
                       floats_of(b->store().flat_grads(DType::kF32))),
              kRelTol)
        << step;
    EXPECT_LT(rel_diff(floats_of(a->store().flat_values(DType::kF32)),
                       floats_of(b->store().flat_values(DType::kF32))),
              kRelTol)
        << step;
  }
}

// Clipping by value through train_step: the gradients left after the step are
// the accumulated ones clamped, the step used them, the norm is theirs.
TEST_F(TrainStepTest, TrainStepClipsByValue) {
  auto model = make();
  auto opt = sgd(*model, 0.5);
  ASSERT_TRUE(model->store().zero_grad(Stream::cpu()).ok());
  ASSERT_TRUE(accumulate_gradients(*ctx_, *model, 11, split(2)).ok());
  const std::vector<float> g = floats_of(model->store().flat_grads(DType::kF32));
  const std::vector<float> w0 = floats_of(model->store().flat_values(DType::kF32));
  const float clip = 0.25f * max_abs(g);
  TrainStepOptions o;
  o.clip_value = clip;
  TrainStepResult r = *train_step(*ctx_, *model, *opt, 11, split(2), o);
  const std::vector<float> gc = floats_of(model->store().flat_grads(DType::kF32));
  const std::vector<float> w1 = floats_of(model->store().flat_values(DType::kF32));
  double sq = 0;
  int clamped = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const float want = std::clamp(g[i], -clip, clip);
    clamped += want != g[i];
    ASSERT_EQ(gc[i], want) << i;
    ASSERT_NEAR(w1[i], w0[i] - 0.5f * want, 1e-6f * (1 + std::abs(w0[i]))) << i;
    sq += double(want) * want;
  }
  EXPECT_GT(clamped, 0);
  EXPECT_NEAR(r.step.grad_norm, std::sqrt(sq), 1e-6 * std::sqrt(sq));
  EXPECT_EQ(r.step.clip_coef, 1.0f);  // no max_norm
}

// fp16-style loss scaling: the gradients hold s * g, the step and the reported
// norm are those of g.
TEST_F(TrainStepTest, LossScalerGivesTheUnscaledStep) {
  auto a = make(), b = make();
  auto oa = sgd(*a, 0.1), ob = sgd(*b, 0.1);
  DynamicLossScalerOptions so;
  so.initial_scale = 1024;
  DynamicLossScaler scaler = *DynamicLossScaler::create(so);
  TrainStepOptions with;
  with.scaler = &scaler;
  with.max_norm = 1.0f;
  TrainStepOptions without;
  without.max_norm = 1.0f;
  TrainStepResult ra = *train_step(*ctx_, *a, *oa, 11, split(2), with);
  TrainStepResult rb = *train_step(*ctx_, *b, *ob, 11, split(2), without);
  EXPECT_EQ(ra.step.loss_scale, 1024.0f);
  EXPECT_FALSE(ra.step.skipped);
  EXPECT_NEAR(ra.step.grad_norm, rb.step.grad_norm, 1e-6 * rb.step.grad_norm);
  EXPECT_EQ(ra.loss, rb.loss);
  const std::vector<float> ga = floats_of(a->store().flat_grads(DType::kF32));
  const std::vector<float> gb = floats_of(b->store().flat_grads(DType::kF32));
  for (size_t i = 0; i < ga.size(); ++i) ASSERT_NEAR(ga[i], 1024.0f * gb[i], 1e-5f * std::abs(1024.0f * gb[i]) + 1e-12f) << i;
  EXPECT_LT(rel_diff(floats_of(a->store().flat_values(DType::kF32)),
                     floats_of(b->store().flat_values(DType::kF32))),
            1e-6);
}

TEST_F(TrainStepTest, Errors) {
  auto model = make();
  auto opt = sgd(*model, 0.1);
  EXPECT_EQ(accumulate_gradients(*ctx_, *model, 11, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  AccumulateOptions bad_scale;
  bad_scale.loss_scale = 0.0f;
  EXPECT_EQ(accumulate_gradients(*ctx_, *model, 11, split(1), bad_scale).status().code(),
            absl::StatusCode::kInvalidArgument);
  DynamicLossScaler scaler = *DynamicLossScaler::create();
  TrainStepOptions both;
  both.scaler = &scaler;
  both.clip_value = 1.0f;
  EXPECT_EQ(train_step(*ctx_, *model, *opt, 11, split(1), both).status().code(),
            absl::StatusCode::kInvalidArgument);
  TrainStepOptions negative;
  negative.clip_value = -1.0f;
  EXPECT_EQ(train_step(*ctx_, *model, *opt, 11, split(1), negative).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<MicroBatch> mbs = split(2);
  mbs[1].tokens = tokens_of({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 2, 5);  // T > max_seq_len
  absl::StatusOr<AccumulateResult> r = accumulate_gradients(*ctx_, *model, 11, mbs);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("micro-batch 1 of 2"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace colossal::nn
