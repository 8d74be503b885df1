// nn::Dropout: mask statistics, scaling, backward = the same mask, eval =
// identity, determinism per RNG state, fresh masks per call, a float64
// finite-difference check with a fixed mask, activation checkpointing
// replaying the mask; CUDA against the CPU bit for bit (skips without a GPU).
#include "nn/layers/dropout.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/dropout/dropout.h"
#include "nn/layers/gelu.h"
#include "nn/layers/linear.h"
#include "nn/module/gradcheck.h"
#include "tests/util/gpu_test.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Tensor;

Tensor random_tensor(const core::Shape& shape, uint64_t seed, DType dtype = DType::kF32) {
  Tensor t = *Tensor::empty(shape, dtype, core::Stream::cpu());
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::kF64) {
      t.data<double>()[i] = normal(rng);
    } else {
      t.data<float>()[i] = static_cast<float>(normal(rng));
    }
  }
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

class DropoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_ = std::move(*core::Context::create(core::Device::cpu()));
    ctx_->manual_seed(1234);
  }
  std::unique_ptr<core::Context> ctx_;
};

TEST_F(DropoutTest, FractionDroppedIsBinomialAndKeptAreScaled) {
  const int64_t n = 1 << 18;
  Tensor ones = *Tensor::empty({n}, DType::kF32, core::Stream::cpu());
  for (int64_t i = 0; i < n; ++i) ones.data<float>()[i] = 1.0f;
  for (double p : {0.05, 0.1, 0.5, 0.9}) {
    Dropout drop("drop", p);
    ForwardResult r = *drop.forward(*ctx_, ones);
    const float scale = static_cast<float>(1.0 / (1.0 - p));
    int64_t dropped = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float v = r.output.data<float>()[i];
      if (v == 0.0f) {
        ++dropped;
      } else {
        ASSERT_EQ(v, scale) << "p=" << p << " i=" << i;
      }
    }
    const double sd = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(static_cast<double>(dropped), n * p, 5 * sd) << "p=" << p;
    // The mean is preserved (inverted dropout): E[y] = 1.
    EXPECT_NEAR((n - dropped) * static_cast<double>(scale) / n, 1.0, 5 * sd / n / (1 - p));
  }
}

TEST_F(DropoutTest, OutputIsInputTimesScaleOnTheKernelsMask) {
  const double p = 0.3;
  Tensor x = random_tensor({7, 33}, 5);
  Dropout drop("drop", p);
  const core::RngState before = ctx_->rng_state();
  ForwardResult r = *drop.forward(*ctx_, x);
  // Reserved exactly numel numbers of the stream.
  EXPECT_EQ(ctx_->rng_state().offset, before.offset + static_cast<uint64_t>(x.numel()));
  std::vector<uint8_t> mask(x.numel());
  ASSERT_TRUE(kernels::dropout::dropout_mask_cpu(mask.data(), p, before.seed, before.offset,
                                                 x.numel())
                  .ok());
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float want = mask[i] ? x.data<float>()[i] * scale : 0.0f;
    ASSERT_EQ(r.output.data<float>()[i], want) << i;
  }
  EXPECT_EQ(r.saved->stats().tensors, 0) << "the mask is regenerated, not stored";
  EXPECT_EQ(r.saved->stats().bytes, 0);
}

TEST_F(DropoutTest, BackwardAppliesTheSameMask) {
  const double p = 0.4;
  Tensor x = random_tensor({4, 8, 16}, 1);
  Tensor dy = random_tensor({4, 8, 16}, 2);
  Dropout drop("drop", p);
  ForwardResult r = *drop.forward(*ctx_, x);
  // Other random draws between forward and backward do not change the mask.
  ASSERT_TRUE(drop.forward(*ctx_, x).ok());
  Tensor dx = *drop.backward(*ctx_, *r.saved, dy);
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  int64_t kept = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const bool dropped = r.output.data<float>()[i] == 0.0f;  // x is never exactly 0 here
    ASSERT_EQ(dx.data<float>()[i], dropped ? 0.0f : dy.data<float>()[i] * scale) << i;
    kept += !dropped;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, x.numel());
}

TEST_F(DropoutTest, EvaluationModeIsTheIdentityAndDrawsNothing) {
  Sequential net("net");
  net.append(std::make_unique<Linear>("net.0", 8, 8, LinearOptions{.dtype = DType::kF32}));
  Dropout* drop = static_cast<Dropout*>(net.append(std::make_unique<Dropout>("net.1", 0.5)));
  EXPECT_TRUE(net.training());
  EXPECT_TRUE(drop->training());
  net.set_training(false);
  EXPECT_FALSE(drop->training()) << "set_training reaches the children";
  Tensor x = random_tensor({3, 8}, 3);
  const core::RngState before = ctx_->rng_state();
  ForwardResult r = *drop->forward(*ctx_, x);
  EXPECT_TRUE(same_bytes(r.output, x));
  Tensor dx = *drop->backward(*ctx_, *r.saved, x);
  EXPECT_TRUE(same_bytes(dx, x));
  EXPECT_EQ(ctx_->rng_state(), before);
  net.set_training(true);
  EXPECT_TRUE(drop->training());
  ForwardResult t = *drop->forward(*ctx_, x);
  EXPECT_FALSE(same_bytes(t.output, x));
}

TEST_F(DropoutTest, PZeroIsTheIdentityAndDrawsNothing) {
  Dropout drop("drop", 0.0);
  Tensor x = random_tensor({5, 5}, 3);
  const core::RngState before = ctx_->rng_state();
  ForwardResult r = *drop.forward(*ctx_, x);
  EXPECT_TRUE(same_bytes(r.output, x));
  EXPECT_EQ(ctx_->rng_state(), before);
}

TEST_F(DropoutTest, SameSeedSameMaskNewCallsNewMasks) {
  Tensor x = random_tensor({64, 64}, 9);
  Dropout drop("drop", 0.2);
  ctx_->manual_seed(77);
  Tensor a = drop.forward(*ctx_, x)->output;
  Tensor b = drop.forward(*ctx_, x)->output;  // next offsets
  EXPECT_FALSE(same_bytes(a, b)) << "successive calls must get fresh masks";
  ctx_->manual_seed(77);
  EXPECT_TRUE(same_bytes(drop.forward(*ctx_, x)->output, a)) << "same seed, same mask";
  EXPECT_TRUE(same_bytes(drop.forward(*ctx_, x)->output, b));
  ctx_->set_rng_state({.seed = 77, .offset = 4096});
  EXPECT_TRUE(same_bytes(drop.forward(*ctx_, x)->output, b)) << "offset 4096 is the second call";
  ctx_->manual_seed(78);
  EXPECT_FALSE(same_bytes(drop.forward(*ctx_, x)->output, a)) << "another seed";
}

TEST_F(DropoutTest, RejectsBadProbabilityAndIntegerInput) {
  Tensor x = random_tensor({4}, 1);
  const core::RngState before = ctx_->rng_state();
  for (double p : {1.0, -0.1, 2.0, std::nan("")}) {
    Dropout drop("drop", p);
    absl::StatusOr<ForwardResult> r = drop.forward(*ctx_, x);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("[0, 1)"), std::string::npos) << r.status();
  }
  Tensor ids = *Tensor::empty({4}, DType::kI32, core::Stream::cpu());
  EXPECT_FALSE(Dropout("drop", 0.1).forward(*ctx_, ids).ok());
  EXPECT_EQ(ctx_->rng_state(), before) << "a failing call reserves nothing";
}

// L = sum(net(x) * R) with the mask held fixed (the RNG state is reset before
// every forward), so it is a smooth function of x and the weights.
TEST_F(DropoutTest, FiniteDifferenceGradientWithAFixedMask) {
  Sequential net("net");
  net.append(std::make_unique<Linear>("net.0", 6, 10, LinearOptions{.dtype = DType::kF64}));
  net.append(std::make_unique<Dropout>("net.1", 0.3));
  net.append(std::make_unique<Gelu>("net.2"));
  net.append(std::make_unique<Dropout>("net.3", 0.5));
  net.append(std::make_unique<Linear>("net.4", 10, 3, LinearOptions{.dtype = DType::kF64}));
  const core::RngState fixed{.seed = 99, .offset = 12};
  net.add_forward_pre_hook([&](Module&, const Tensor&) {
    ctx_->set_rng_state(fixed);
    return absl::OkStatus();
  });
  ParameterTable table;
  ASSERT_TRUE(net.declare(table).ok());
  ParameterStore store = *ParameterStore::create(table, core::Stream::cpu());
  ASSERT_TRUE(net.bind(store).ok());
  std::mt19937_64 rng(4);
  std::normal_distribution<double> normal(0.0, 0.5);
  for (const Parameter& p : store.parameters()) {
    for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data<double>()[i] = normal(rng);
  }
  Tensor x = random_tensor({5, 6}, 8, DType::kF64);
  absl::StatusOr<GradCheckReport> r = gradcheck(*ctx_, net, store, x, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->checked, 0);
  EXPECT_LT(r->max_error, 1e-7) << r->worst;
  // The mask really drops something: some input gradient paths are cut.
  ForwardResult f = *net.forward(*ctx_, x);
  EXPECT_TRUE(f.output.defined());
}

// A checkpointed Sequential with dropout: same output, same input and weight
// gradients as without checkpointing, and the recomputation draws nothing new.
TEST_F(DropoutTest, CheckpointingReplaysTheMask) {
  auto make = [](Sequential& net) {
    net.append(std::make_unique<Linear>("net.0", 8, 16, LinearOptions{.dtype = DType::kF32}));
    net.append(std::make_unique<Dropout>("net.1", 0.5));
    net.append(std::make_unique<Gelu>("net.2"));
    net.append(std::make_unique<Dropout>("net.3", 0.25));
    net.append(std::make_unique<Linear>("net.4", 16, 8, LinearOptions{.dtype = DType::kF32}));
  };
  Tensor x = random_tensor({4, 8}, 21);
  Tensor dy = random_tensor({4, 8}, 22);
  Tensor grads[2], dxs[2], ys[2];
  core::RngState after[2];
  for (int ck = 0; ck < 2; ++ck) {
    Sequential net("net");
    make(net);
    ParameterTable table;
    ASSERT_TRUE(net.declare(table).ok());
    ParameterStore store = *ParameterStore::create(table, core::Stream::cpu());
    ASSERT_TRUE(net.bind(store).ok());
    std::mt19937_64 rng(4);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    for (const Parameter& p : store.parameters()) {
      for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] = normal(rng);
    }
    net.set_checkpoint(ck == 1);
    ctx_->manual_seed(555);
    ForwardResult f = *net.forward(*ctx_, x);
    // Another micro-batch's dropout between forward and backward.
    ASSERT_TRUE(Dropout("other", 0.5).forward(*ctx_, x).ok());
    absl::StatusOr<Tensor> dx = net.backward(*ctx_, *f.saved, dy);
    ASSERT_TRUE(dx.ok()) << dx.status();
    ys[ck] = f.output;
    dxs[ck] = *dx;
    grads[ck] = *store.flat_grads(DType::kF32).to(core::Device::cpu(), core::Stream::cpu());
    after[ck] = ctx_->rng_state();
  }
  EXPECT_TRUE(same_bytes(ys[0], ys[1]));
  EXPECT_TRUE(same_bytes(dxs[0], dxs[1])) << "input gradient";
  EXPECT_TRUE(same_bytes(grads[0], grads[1])) << "parameter gradients";
  EXPECT_EQ(after[0], after[1]) << "the recomputation must not consume random numbers";
}

TEST(DropoutCudaTest, MasksAndGradientsMatchTheCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  auto cpu_ctx = std::move(*core::Context::create(core::Device::cpu()));
  absl::StatusOr<std::unique_ptr<core::Context>> gpu = core::Context::create(core::Device::cuda(0));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  core::Context& gpu_ctx = **gpu;
  const core::Stream& stream = gpu_ctx.compute_stream();
  for (int64_t n : {1, 7, 1000, 65537}) {
    Tensor x = random_tensor({n}, 3);
    Tensor dy = random_tensor({n}, 4);
    Dropout drop("drop", 0.1);
    cpu_ctx->set_rng_state({.seed = 2024, .offset = 3});
    gpu_ctx.set_rng_state({.seed = 2024, .offset = 3});
    ForwardResult c = *drop.forward(*cpu_ctx, x);
    absl::StatusOr<ForwardResult> g = drop.forward(gpu_ctx, *x.to(core::Device::cuda(0), stream));
    ASSERT_TRUE(g.ok()) << g.status();
    Tensor cdx = *drop.backward(*cpu_ctx, *c.saved, dy);
    absl::StatusOr<Tensor> gdx =
        drop.backward(gpu_ctx, *g->saved, *dy.to(core::Device::cuda(0), stream));
    ASSERT_TRUE(gdx.ok()) << gdx.status();
    Tensor gy = *g->output.to(core::Device::cpu(), stream);
    Tensor gd = *gdx->to(core::Device::cpu(), stream);
    gpu_ctx.synchronize();
    EXPECT_TRUE(same_bytes(c.output, gy)) << "forward, n=" << n;
    EXPECT_TRUE(same_bytes(cdx, gd)) << "backward, n=" << n;
    EXPECT_EQ(cpu_ctx->rng_state(), gpu_ctx.rng_state());
  }
#endif
}

}  // namespace
}  // namespace colossal::nn
