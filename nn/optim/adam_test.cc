// Adam optimizers: AdamW on CPU tensors over several steps against a float64
// reference of torch's AdamW formula, with parameter groups and the no-decay
// rule; CPUAdam's L2 mode; bf16 model copies; unscaling and found_inf skips;
// HybridAdam on a mix of CPU and CUDA parameters equal to all-CPU AdamW bit for
// bit (GPU); errors naming the parameter or group.
#include "nn/optim/adam.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/alloc/default_allocator.h"
#include "core/device/device.h"
#include "core/device/stream.h"
#include "nn/optim/test_util.h"
#include "tests/util/gpu_test.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Shape;
using core::Tensor;
using testing::random_param;
using testing::to_floats;

// torch.optim.AdamW / Adam (L2) in float64, one parameter.
struct RefAdam {
  std::vector<double> p, m, v;
  int64_t t = 0;
  explicit RefAdam(const std::vector<float>& p0) : p(p0.begin(), p0.end()), m(p0.size()), v(p0.size()) {}
  void step(const std::vector<float>& grad, const GroupHyperParams& h, double grad_scale = 1.0) {
    ++t;
    const double bc1 = h.bias_correction ? 1 - std::pow(h.beta1, t) : 1;
    const double bc2 = h.bias_correction ? 1 - std::pow(h.beta2, t) : 1;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i] / grad_scale;
      if (h.adamw_mode) {
        p[i] *= 1 - h.lr * h.weight_decay;
      } else {
        g += h.weight_decay * p[i];
      }
      m[i] = h.beta1 * m[i] + (1 - h.beta1) * g;
      v[i] = h.beta2 * v[i] + (1 - h.beta2) * g * g;
      p[i] -= h.lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + h.eps);
    }
  }
};

void expect_near(const std::vector<float>& got, const std::vector<double>& want, double tol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol) << what << " element " << i;
  }
}

// A small GPT-like parameter set: 2-D weights, biases, 1-D norm gains.
std::vector<ParamRef> gpt_like_params(DType grad_dtype = DType::kF32) {
  std::vector<ParamRef> ps;
  ps.push_back(random_param("wte.weight", {33, 8}, 1, grad_dtype));
  ps.push_back(random_param("h.0.ln_1.weight", {8}, 2, grad_dtype));
  ps.push_back(random_param("h.0.attn.c_attn.weight", {8, 24}, 3, grad_dtype));
  ps.push_back(random_param("h.0.attn.c_attn.bias", {24}, 4, grad_dtype));
  ps.push_back(random_param("h.0.mlp.c_fc.weight", {8, 37}, 5, grad_dtype));
  ps.push_back(random_param("lm_head.scale.bias", {1, 5}, 6, grad_dtype));  // 2-D, but ".bias"
  return ps;
}

TEST(AdamWTest, CpuMatchesFloat64ReferenceWithGroupsAndNoDecay) {
  for (const DType gt : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<ParamRef> params = gpt_like_params(gt);
    std::vector<ParamGroup> groups = split_decay_groups(params, /*weight_decay=*/0.1);
    ASSERT_EQ(groups[0].params.size(), 3u);  // wte, c_attn.weight, c_fc.weight
    ASSERT_EQ(groups[1].params.size(), 3u);
    groups[1].lr = 3e-3;       // the no-decay group with its own lr
    groups[1].beta2 = 0.95;    // and betas
    AdamOptions o = AdamOptions::adamw_defaults();
    o.lr = 1e-2;
    auto opt = make_adamw(std::move(groups), o).value();
    ASSERT_EQ(opt->type(), "adamw");
    EXPECT_EQ(opt->group_hyper(0).weight_decay, 0.1);
    EXPECT_EQ(opt->group_hyper(1).weight_decay, 0.0);
    EXPECT_EQ(opt->group_hyper(1).lr, 3e-3);
    EXPECT_EQ(opt->group_hyper(0).lr, 1e-2);

    std::vector<RefAdam> refs;
    std::vector<GroupHyperParams> hypers;
    std::vector<ParamRef> order;
    for (int g = 0; g < opt->num_groups(); ++g) {
      for (const ParamRef& p : opt->group_params(g)) {
        refs.emplace_back(to_floats(p.master));
        hypers.push_back(opt->group_hyper(g));
        order.push_back(p);
      }
    }
    for (int step = 0; step < 6; ++step) {
      for (size_t i = 0; i < order.size(); ++i) {
        testing::refill(order[i].grad, 100 * step + i);
        refs[i].step(to_floats(order[i].grad), hypers[i]);
      }
      StepResult r = opt->step().value();
      EXPECT_FALSE(r.skipped);
    }
    for (size_t i = 0; i < order.size(); ++i) {
      expect_near(to_floats(order[i].master), refs[i].p, 2e-6, order[i].name);
      expect_near(to_floats(opt->state_tensor(order[i].name, "exp_avg").value()), refs[i].m, 1e-6,
                  order[i].name + " exp_avg");
      expect_near(to_floats(opt->state_tensor(order[i].name, "exp_avg_sq").value()), refs[i].v,
                  3e-7, order[i].name + " exp_avg_sq");
      EXPECT_EQ(opt->param_step(order[i].name).value(), 6);
    }
  }
}

TEST(CpuAdamTest, L2ModeWithoutBiasCorrectionMatchesReference) {
  std::vector<ParamRef> params = {random_param("a", {100}, 7), random_param("b", {10, 10}, 8)};
  ParamGroup g;
  g.params = params;
  AdamOptions o;
  o.lr = 5e-3;
  o.weight_decay = 0.05;
  o.adamw_mode = false;
  o.bias_correction = false;
  o.eps = 1e-6;
  auto opt = make_cpu_adam({g}, o).value();
  EXPECT_EQ(opt->type(), "cpu_adam");
  std::vector<RefAdam> refs = {RefAdam(to_floats(params[0].master)),
                               RefAdam(to_floats(params[1].master))};
  for (int step = 0; step < 4; ++step) {
    for (size_t i = 0; i < 2; ++i) {
      testing::refill(params[i].grad, 50 + 10 * step + i);
      refs[i].step(to_floats(params[i].grad), opt->group_hyper(0));
    }
    ASSERT_TRUE(opt->step().ok());
  }
  for (size_t i = 0; i < 2; ++i) expect_near(to_floats(params[i].master), refs[i].p, 2e-6, params[i].name);
}

TEST(AdamWTest, Bf16ModelCopyFollowsTheMaster) {
  Tensor weight = testing::random_cpu_tensor({64, 3}, DType::kBF16, 9);
  Tensor grad = testing::random_cpu_tensor({64, 3}, DType::kBF16, 10);
  ParamRef p = make_master_param("w", weight, grad, core::Stream::cpu()).value();
  ASSERT_EQ(p.master.dtype(), DType::kF32);
  ASSERT_EQ(p.model_copy.raw_data(), weight.raw_data());
  EXPECT_EQ(to_floats(p.master), to_floats(weight));  // bf16 -> fp32 is exact
  ParamGroup g;
  g.params = {p};
  auto opt = make_adamw({g}).value();
  for (int step = 0; step < 3; ++step) ASSERT_TRUE(opt->step().ok());
  const std::vector<float> master = to_floats(p.master);
  for (int64_t i = 0; i < weight.numel(); ++i) {
    ASSERT_EQ(weight.data<kernels::BFloat16>()[i].bits, kernels::float_to_bfloat16(master[i]).bits);
  }
}

TEST(AdamWTest, GradScaleUnscalesAndFoundInfSkips) {
  // Gradients times 1024 with grad_scale 1024 give the very same bits.
  std::vector<ParamRef> a = {random_param("x", {257}, 11)};
  std::vector<ParamRef> b = {random_param("x", {257}, 11)};
  for (int64_t i = 0; i < 257; ++i) b[0].grad.data<float>()[i] *= 1024.0f;
  auto oa = make_adamw({ParamGroup{a}}).value();
  auto ob = make_adamw({ParamGroup{b}}).value();
  ASSERT_TRUE(oa->step().ok());
  StepOptions so;
  so.grad_scale = 1024.0f;
  ASSERT_TRUE(ob->step(so).ok());
  EXPECT_EQ(testing::to_bytes(a[0].master), testing::to_bytes(b[0].master));

  // A set flag skips: nothing changes, the step count included.
  Tensor flag = testing::cpu_tensor({1}, DType::kF32, {1.0f});
  const auto before = testing::to_bytes(a[0].master);
  StepOptions skip;
  skip.found_inf = &flag;
  StepResult r = oa->step(skip).value();
  EXPECT_TRUE(r.skipped);
  EXPECT_EQ(testing::to_bytes(a[0].master), before);
  EXPECT_EQ(oa->param_step("x").value(), 1);
  flag.data<float>()[0] = 0.0f;
  r = oa->step(skip).value();
  EXPECT_FALSE(r.skipped);
  EXPECT_EQ(oa->param_step("x").value(), 2);

  Tensor wrong = testing::cpu_tensor({2}, DType::kF32, {0.0f, 0.0f});
  skip.found_inf = &wrong;
  EXPECT_EQ(oa->step(skip).status().code(), absl::StatusCode::kInvalidArgument);
  so.grad_scale = 0.0f;
  EXPECT_EQ(oa->step(so).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AdamTest, HybridAndCpuAdamEqualAdamWOnCpuBitForBit) {
  std::vector<std::unique_ptr<Adam>> opts;
  std::vector<std::vector<ParamRef>> sets;
  for (AdamVariant v : {AdamVariant::kAdamW, AdamVariant::kHybridAdam, AdamVariant::kCpuAdam}) {
    sets.push_back(gpt_like_params(DType::kBF16));
    AdamOptions o;
    o.weight_decay = 0.1;
    opts.push_back(Adam::create(v, split_decay_groups(sets.back(), 0.1), o).value());
  }
  for (int step = 0; step < 3; ++step) {
    for (auto& set : sets) {
      for (size_t i = 0; i < set.size(); ++i) testing::refill(set[i].grad, 7 * step + i);
    }
    for (auto& o : opts) ASSERT_TRUE(o->step().ok());
  }
  for (size_t i = 0; i < sets[0].size(); ++i) {
    EXPECT_EQ(testing::to_bytes(sets[0][i].master), testing::to_bytes(sets[1][i].master)) << i;
    EXPECT_EQ(testing::to_bytes(sets[0][i].master), testing::to_bytes(sets[2][i].master)) << i;
  }
}

TEST(AdamTest, LearningRatesAndZeroGrad) {
  std::vector<ParamRef> ps = gpt_like_params();
  auto opt = make_hybrid_adam(split_decay_groups(ps, 0.1)).value();
  EXPECT_EQ(opt->lrs(), (std::vector<double>{1e-3, 1e-3}));
  ASSERT_TRUE(opt->set_lrs({2e-3, 4e-3}).ok());
  EXPECT_EQ(opt->lrs(), (std::vector<double>{2e-3, 4e-3}));
  EXPECT_EQ(opt->set_lrs({1.0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(opt->set_lr(2, 1.0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(opt->set_lr(0, -1.0).code(), absl::StatusCode::kInvalidArgument);
  // Finite as a double but not as the float the kernels take.
  EXPECT_EQ(opt->set_lr(0, 1e300).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(opt->set_lrs({1e-3, 1e39}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(opt->lrs(), (std::vector<double>{2e-3, 4e-3}));
  ASSERT_TRUE(opt->zero_grad().ok());
  for (const Tensor& g : opt->grads()) {
    for (float x : to_floats(g)) ASSERT_EQ(x, 0.0f);
  }
  EXPECT_EQ(opt->grads().size(), ps.size());
}

TEST(AdamTest, SetGradPointsAtNewMemory) {
  std::vector<ParamRef> ps = {random_param("w", {4, 4}, 1)};
  auto opt = make_adamw({ParamGroup{ps}}).value();
  Tensor g2 = testing::random_cpu_tensor({4, 4}, DType::kBF16, 2);
  ASSERT_TRUE(opt->set_grad("w", g2).ok());
  EXPECT_EQ(opt->grads()[0].raw_data(), g2.raw_data());
  EXPECT_EQ(opt->set_grad("nope", g2).code(), absl::StatusCode::kInvalidArgument);
  Tensor bad = testing::random_cpu_tensor({16}, DType::kF32, 3);
  const absl::Status s = opt->set_grad("w", bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("\"w\""), std::string::npos) << s;
}

void expect_error(const absl::Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(needle), std::string::npos) << "\"" << needle << "\" not in: " << s;
}

TEST(AdamTest, ErrorsNameTheParameterOrGroup) {
  {  // a name given twice
    std::vector<ParamRef> ps = {random_param("w", {4}, 1), random_param("w", {4}, 2)};
    expect_error(make_adamw({ParamGroup{ps}}).status(), "\"w\" is given twice");
  }
  {  // a float16 master
    ParamRef p{"h.0.w", testing::random_cpu_tensor({4}, DType::kF16, 1),
               testing::random_cpu_tensor({4}, DType::kF16, 2), {}};
    expect_error(make_adamw({ParamGroup{{p}}}).status(), "\"h.0.w\"");
  }
  {  // gradient shape
    ParamRef p = random_param("g", {4, 2}, 1);
    p.grad = testing::random_cpu_tensor({8}, DType::kF32, 2);
    expect_error(make_adamw({ParamGroup{{p}}}).status(), "\"g\"");
  }
  {  // a model copy aliasing the master
    ParamRef p = random_param("c", {8}, 1);
    p.model_copy = p.master;
    expect_error(make_adamw({ParamGroup{{p}}}).status(), "overlaps");
  }
  {  // one master under two names
    ParamRef p = random_param("m1", {8}, 1);
    ParamRef q = random_param("m2", {8}, 2);
    q.master = p.master;
    expect_error(make_adamw({ParamGroup{{p, q}}}).status(), "overlap");
  }
  {  // bad hyper-parameters name the group
    ParamGroup g0{{random_param("a", {2}, 1)}};
    ParamGroup g1{{random_param("b", {2}, 2)}};
    g1.beta1 = 1.0;
    expect_error(make_adamw({g0, g1}).status(), "param group 1: betas");
    g1.beta1.reset();
    g1.lr = -1.0;
    expect_error(make_hybrid_adam({g0, g1}).status(), "param group 1: lr");
    AdamOptions o;
    o.adamw_mode = false;
    expect_error(make_adamw({g0}, o).status(), "adamw_mode");
    o = AdamOptions();
    o.eps = -1;
    expect_error(make_cpu_adam({g0}, o).status(), "eps");
  }
  {  // an empty name
    ParamRef p = random_param("", {2}, 1);
    expect_error(make_adamw({ParamGroup{{p}}}).status(), "empty name");
  }
}

TEST(AdamTest, EmptyGroupsAndEmptyTensorsAreFine) {
  ParamGroup empty;
  ParamGroup one{{random_param("z", {0, 4}, 1), random_param("w", {3}, 2)}};
  auto opt = make_hybrid_adam({empty, one}).value();
  ASSERT_TRUE(opt->step().ok());
  EXPECT_EQ(opt->param_step("z").value(), 1);
  EXPECT_EQ(opt->param_step("w").value(), 1);
}

#if COLOSSAL_WITH_CUDA
// `p` moved to `stream`'s CUDA device (master, grad and model copy).
ParamRef to_cuda(const ParamRef& p, const core::Stream& stream) {
  ParamRef out{p.name, p.master.to(stream.device(), stream).value(),
               p.grad.to(stream.device(), stream).value(), {}};
  if (p.model_copy.defined()) out.model_copy = p.model_copy.to(stream.device(), stream).value();
  stream.synchronize();
  return out;
}
#endif

TEST(HybridAdamCudaTest, MixedCpuAndCudaEqualsAllCpuAdamWBitForBit) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  auto owned = core::OwnedStream::create(core::Device::cuda(0)).value();
  const core::Stream& stream = owned.get();
  // Reference: all on the CPU, bf16 gradients and bf16 model copies.
  std::vector<ParamRef> cpu_params;
  std::vector<ParamRef> mixed;
  int i = 0;
  for (ParamRef& p : gpt_like_params(DType::kBF16)) {
    const Tensor weight = testing::random_cpu_tensor(p.master.shape(), DType::kBF16, 500 + i);
    ParamRef a = make_master_param(p.name, weight, p.grad, core::Stream::cpu()).value();
    ParamRef b{a.name, testing::clone_cpu(a.master), testing::clone_cpu(a.grad),
               testing::clone_cpu(a.model_copy)};
    if (i % 2 == 0) b = to_cuda(b, stream);  // every other parameter on the GPU
    cpu_params.push_back(a);
    mixed.push_back(b);
    ++i;
  }
  AdamOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  auto ref = make_adamw(split_decay_groups(cpu_params, 0.1), o).value();
  auto hybrid = make_hybrid_adam(split_decay_groups(mixed, 0.1), o, stream).value();
  for (int step = 0; step < 4; ++step) {
    for (size_t k = 0; k < cpu_params.size(); ++k) {
      testing::refill(cpu_params[k].grad, 900 + 10 * step + k);
      ASSERT_TRUE(mixed[k].grad.copy_from(cpu_params[k].grad,
                                          mixed[k].grad.device().is_cuda() ? stream : core::Stream::cpu())
                      .ok());
    }
    stream.synchronize();
    StepOptions so;
    so.grad_scale = 2.0f;
    ASSERT_TRUE(ref->step(so).ok());
    ASSERT_TRUE(hybrid->step(so).ok());
  }
  stream.synchronize();
  for (size_t k = 0; k < cpu_params.size(); ++k) {
    const std::string& n = cpu_params[k].name;
    EXPECT_EQ(testing::to_bytes(cpu_params[k].master), testing::to_bytes(mixed[k].master, stream)) << n;
    EXPECT_EQ(testing::to_bytes(cpu_params[k].model_copy),
              testing::to_bytes(mixed[k].model_copy, stream)) << n;
    for (const char* s : {"exp_avg", "exp_avg_sq"}) {
      EXPECT_EQ(testing::to_bytes(ref->state_tensor(n, s).value()),
                testing::to_bytes(hybrid->state_tensor(n, s).value(), stream)) << n << " " << s;
    }
  }
  // A device flag skips the step.
  Tensor flag = testing::cpu_tensor({1}, DType::kF32, {1.0f}).to(stream.device(), stream).value();
  StepOptions skip;
  skip.found_inf = &flag;
  EXPECT_TRUE(hybrid->step(skip).value().skipped);
#endif
}

TEST(CpuAdamCudaTest, RejectsCudaParametersAndForeignStreams) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  auto owned = core::OwnedStream::create(core::Device::cuda(0)).value();
  ParamRef p = to_cuda(random_param("gpu.w", {4, 4}, 1), owned.get());
  expect_error(make_cpu_adam({ParamGroup{{p}}}).status(), "cpu_adam updates CPU-resident");
  // A CUDA parameter with the CPU stream.
  expect_error(make_hybrid_adam({ParamGroup{{p}}}).status(), "\"gpu.w\" is on cuda:0");
#endif
}

// The state is allocated on first use, not at creation: a plugin that takes
// the step over (low_level_zero) never pays for the full-size state.
TEST(AdamTest, StateIsAllocatedOnFirstUse) {
  ParamGroup g;
  g.params = {random_param("w", {1000, 16}, 3)};
  const int64_t state_bytes = 2 * 1000 * 16 * sizeof(float);
  const int64_t before = core::cpu_allocator()->stats().allocated_bytes;
  auto opt = make_adamw({g}).value();
  const int64_t created = core::cpu_allocator()->stats().allocated_bytes;
  EXPECT_LT(created - before, state_bytes);
  ASSERT_TRUE(opt->step().ok());
  EXPECT_GE(core::cpu_allocator()->stats().allocated_bytes - created, state_bytes);
  EXPECT_EQ(opt->param_step("w").value(), 1);
}

}  // namespace
}  // namespace colossal::nn
