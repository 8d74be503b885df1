// Optimizer state save/load: a round trip through state_dict(), JSON and deep
// copies gives bit-identical next steps (Adam with fp32 and bf16-master
// parameters, SGD with momentum); Adam-family states load across flavours;
// bad states are rejected with the key named and nothing changed.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/optim/adam.h"
#include "nn/optim/sgd.h"
#include "nn/optim/state_dict.h"
#include "nn/optim/test_util.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Tensor;

// What a checkpoint holds: deep copies of the tensors and the JSON text.
struct Saved {
  std::string json;
  std::map<std::string, Tensor> tensors;
};

Saved save(const Optimizer& opt) {
  OptimizerStateDict sd = opt.state_dict().value();
  Saved s;
  s.json = optimizer_meta_to_json(sd.meta);
  for (const auto& [k, t] : sd.tensors) s.tensors[k] = testing::clone_cpu(t);
  return s;
}

OptimizerStateDict restore(const Saved& s) {
  OptimizerStateDict sd;
  sd.meta = optimizer_meta_from_json(s.json).value();
  sd.tensors = s.tensors;
  return sd;
}

// A model: fp32 parameters (their own masters) and bf16 ones (optimizer-owned
// masters), with gradients. `seed` varies the initial values.
struct Model {
  std::vector<Tensor> weights;
  std::vector<ParamRef> params;
  explicit Model(uint32_t seed) {
    const std::vector<std::pair<std::string, core::Shape>> spec = {
        {"wte.weight", {20, 6}}, {"h.0.ln_1.weight", {6}}, {"h.0.mlp.c_fc.weight", {6, 9}},
        {"h.0.mlp.c_fc.bias", {9}}};
    for (size_t i = 0; i < spec.size(); ++i) {
      const DType dt = i % 2 == 0 ? DType::kBF16 : DType::kF32;
      Tensor w = testing::random_cpu_tensor(spec[i].second, dt, seed + i);
      Tensor g = testing::random_cpu_tensor(spec[i].second, dt, seed + 100 + i);
      weights.push_back(w);
      params.push_back(make_master_param(spec[i].first, w, g, core::Stream::cpu()).value());
    }
  }
  void fill_grads(uint32_t seed) {
    for (size_t i = 0; i < params.size(); ++i) testing::refill(params[i].grad, seed + i);
  }
  // What loading a model checkpoint does: the model weights' values.
  void copy_weights_from(const Model& other) {
    for (size_t i = 0; i < weights.size(); ++i) {
      std::memcpy(weights[i].raw_data(), other.weights[i].raw_data(), weights[i].nbytes());
    }
  }
};

void expect_same(const Model& a, const Model& b, const Optimizer& oa, const Optimizer& ob,
                 const std::vector<std::string>& states) {
  for (size_t i = 0; i < a.params.size(); ++i) {
    const std::string& n = a.params[i].name;
    EXPECT_EQ(testing::to_bytes(a.params[i].master), testing::to_bytes(b.params[i].master)) << n;
    EXPECT_EQ(testing::to_bytes(a.weights[i]), testing::to_bytes(b.weights[i])) << n;
    EXPECT_EQ(oa.param_step(n).value(), ob.param_step(n).value()) << n;
    for (const std::string& s : states) {
      EXPECT_EQ(testing::to_bytes(oa.state_tensor(n, s).value()),
                testing::to_bytes(ob.state_tensor(n, s).value()))
          << n << " " << s;
    }
  }
}

TEST(OptimizerStateTest, AdamRoundTripGivesIdenticalNextSteps) {
  Model a(1);
  AdamOptions o;
  o.lr = 1e-2;
  o.beta2 = 0.95;
  auto oa = make_hybrid_adam(split_decay_groups(a.params, 0.1), o).value();
  for (int step = 0; step < 3; ++step) {
    a.fill_grads(10 * step);
    ASSERT_TRUE(oa->step().ok());
  }
  ASSERT_TRUE(oa->set_lrs({5e-3, 7e-3}).ok());  // as a scheduler would
  const Saved saved = save(*oa);
  EXPECT_EQ(saved.tensors.count("state.wte.weight.exp_avg"), 1u);
  EXPECT_EQ(saved.tensors.count("state.wte.weight.master"), 1u);        // bf16: optimizer-owned
  EXPECT_EQ(saved.tensors.count("state.h.0.ln_1.weight.master"), 0u);   // fp32: the model's
  EXPECT_EQ(saved.tensors.at("state.h.0.mlp.c_fc.bias.step").data<int64_t>()[0], 3);

  // A fresh model and optimizer (other initial values and hyper-parameters).
  Model b(77);
  b.copy_weights_from(a);  // the model checkpoint: restores fp32 weights and bf16 copies
  auto ob = make_hybrid_adam(split_decay_groups(b.params, 0.0)).value();
  ASSERT_TRUE(ob->load_state_dict(restore(saved)).ok());
  EXPECT_EQ(ob->lrs(), (std::vector<double>{5e-3, 7e-3}));
  EXPECT_EQ(ob->group_hyper(0).weight_decay, 0.1);
  EXPECT_EQ(ob->group_hyper(0).beta2, 0.95);
  expect_same(a, b, *oa, *ob, {"exp_avg", "exp_avg_sq"});
  for (int step = 3; step < 6; ++step) {
    a.fill_grads(10 * step);
    b.fill_grads(10 * step);
    ASSERT_TRUE(oa->step().ok());
    ASSERT_TRUE(ob->step().ok());
  }
  expect_same(a, b, *oa, *ob, {"exp_avg", "exp_avg_sq"});
}

// A plugin that keeps its own shard (parallel/zero) drops the optimizer's
// masters and releases its state: no full-size copies stay, step() refuses,
// and loading a saved master still rewrites the model copy with its rounding.
TEST(OptimizerStateTest, DroppedMastersAndReleasedState) {
  Model a(1);
  auto oa = make_hybrid_adam(split_decay_groups(a.params, 0.1)).value();
  a.fill_grads(3);
  ASSERT_TRUE(oa->step().ok());
  const Saved saved = save(*oa);

  Model b(77);
  auto ob = make_hybrid_adam(split_decay_groups(b.params, 0.1)).value();
  ob->drop_masters();
  for (int g = 0; g < ob->num_groups(); ++g) {
    for (const ParamRef& p : ob->group_params(g)) {
      EXPECT_EQ(p.master.defined(), !p.model_copy.defined()) << p.name;  // fp32: the weight
    }
  }
  EXPECT_EQ(ob->step().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ob->state_dict().value().tensors.count("state.wte.weight.master"), 0u);
  ASSERT_TRUE(ob->load_state_dict(restore(saved)).ok());
  // The bf16 weight is the saved master's rounding, the fp32 one untouched
  // (fp32 weights are restored with the model, not the optimizer).
  EXPECT_EQ(testing::to_bytes(b.weights[0]), testing::to_bytes(a.weights[0]));
  EXPECT_EQ(testing::to_bytes(ob->state_tensor("wte.weight", "exp_avg").value()),
            testing::to_bytes(saved.tensors.at("state.wte.weight.exp_avg")));
  ob->release_state();
  // Allocated again on use, zeroed.
  const Tensor m = ob->state_tensor("wte.weight", "exp_avg").value();
  for (int64_t i = 0; i < m.numel(); ++i) ASSERT_EQ(m.data<float>()[i], 0.0f);
}

// A plugin that keeps only its shard of the gradients (low_level_zero stage
// 2) drops the optimizer's gradient views: none stays, zero_grad() leaves the
// memory alone, step() refuses, and the state still saves and loads.
TEST(OptimizerStateTest, DroppedGradients) {
  Model a(1);
  auto oa = make_hybrid_adam(split_decay_groups(a.params, 0.1)).value();
  a.fill_grads(3);
  ASSERT_TRUE(oa->step().ok());
  const Saved saved = save(*oa);
  const std::vector<uint8_t> grad = testing::to_bytes(a.params[0].grad);
  oa->drop_grads();
  for (int g = 0; g < oa->num_groups(); ++g) {
    for (const ParamRef& p : oa->group_params(g)) EXPECT_FALSE(p.grad.defined()) << p.name;
  }
  ASSERT_TRUE(oa->zero_grad().ok());
  EXPECT_EQ(testing::to_bytes(a.params[0].grad), grad);  // not zeroed: the plugin's now
  absl::StatusOr<StepResult> step = oa->step();
  EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(step.status().message().find("gradients were dropped"), std::string::npos)
      << step.status();
  ASSERT_TRUE(oa->load_state_dict(restore(saved)).ok());
}

// The same plugin's checkpoint load: check_state_dict() only checks;
// load_state_meta() restores hyper-parameters and step counts, and neither
// touches the state tensors, masters or model copies.
TEST(OptimizerStateTest, MetaOnlyLoadLeavesTensorsAlone) {
  Model a(1);
  AdamOptions o;
  o.beta2 = 0.95;
  auto oa = make_hybrid_adam(split_decay_groups(a.params, 0.1), o).value();
  for (int step = 0; step < 2; ++step) {
    a.fill_grads(7 * step);
    ASSERT_TRUE(oa->step().ok());
  }
  ASSERT_TRUE(oa->set_lrs({5e-3, 7e-3}).ok());
  const Saved saved = save(*oa);

  Model b(77);
  auto ob = make_hybrid_adam(split_decay_groups(b.params, 0.0)).value();
  b.fill_grads(3);
  ASSERT_TRUE(ob->step().ok());
  const std::vector<uint8_t> weight = testing::to_bytes(b.weights[0]);
  const std::vector<uint8_t> master = testing::to_bytes(b.params[0].master);
  const std::vector<uint8_t> moment =
      testing::to_bytes(ob->state_tensor("wte.weight", "exp_avg").value());

  OptimizerStateDict bad = restore(saved);
  bad.tensors.erase("state.wte.weight.exp_avg");
  EXPECT_TRUE(absl::IsInvalidArgument(ob->check_state_dict(bad)));
  EXPECT_TRUE(absl::IsInvalidArgument(ob->load_state_meta(bad)));
  EXPECT_EQ(ob->group_hyper(0).weight_decay, 0.0);  // nothing changed
  EXPECT_EQ(ob->param_step("wte.weight").value(), 1);

  ASSERT_TRUE(ob->check_state_dict(restore(saved)).ok());
  EXPECT_EQ(ob->group_hyper(0).weight_decay, 0.0);  // a check changes nothing
  ASSERT_TRUE(ob->load_state_meta(restore(saved)).ok());
  EXPECT_EQ(ob->lrs(), (std::vector<double>{5e-3, 7e-3}));
  EXPECT_EQ(ob->group_hyper(0).weight_decay, 0.1);
  EXPECT_EQ(ob->group_hyper(0).beta2, 0.95);
  EXPECT_EQ(ob->param_step("wte.weight").value(), 2);
  EXPECT_EQ(testing::to_bytes(b.weights[0]), weight);
  EXPECT_EQ(testing::to_bytes(b.params[0].master), master);
  EXPECT_EQ(testing::to_bytes(ob->state_tensor("wte.weight", "exp_avg").value()), moment);
}

TEST(OptimizerStateTest, AdamFamilyStatesLoadAcrossFlavours) {
  Model a(1);
  auto oa = make_cpu_adam({ParamGroup{a.params}}).value();
  a.fill_grads(5);
  ASSERT_TRUE(oa->step().ok());
  Model b(2);
  b.copy_weights_from(a);
  auto ob = make_adamw({ParamGroup{b.params}}).value();
  ASSERT_TRUE(ob->load_state_dict(restore(save(*oa))).ok());
  expect_same(a, b, *oa, *ob, {"exp_avg", "exp_avg_sq"});
}

TEST(OptimizerStateTest, SgdRoundTripGivesIdenticalNextSteps) {
  Model a(3);
  SgdOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  auto oa = Sgd::create({ParamGroup{a.params}}, o).value();
  for (int step = 0; step < 2; ++step) {
    a.fill_grads(step);
    ASSERT_TRUE(oa->step().ok());
  }
  const Saved saved = save(*oa);
  Model b(4);
  b.copy_weights_from(a);
  auto ob = Sgd::create({ParamGroup{b.params}}).value();  // no momentum: no buffers yet
  ASSERT_TRUE(ob->load_state_dict(restore(saved)).ok());
  EXPECT_EQ(ob->group_hyper(0).momentum, 0.9);
  for (int step = 2; step < 5; ++step) {
    a.fill_grads(step);
    b.fill_grads(step);
    ASSERT_TRUE(oa->step().ok());
    ASSERT_TRUE(ob->step().ok());
  }
  expect_same(a, b, *oa, *ob, {"momentum_buffer"});
}

void expect_load_error(Optimizer& opt, const OptimizerStateDict& sd, const std::string& needle) {
  const std::vector<double> lrs = opt.lrs();
  const absl::Status s = opt.load_state_dict(sd);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(needle), std::string::npos) << "\"" << needle << "\" not in: " << s;
  EXPECT_EQ(opt.lrs(), lrs);  // nothing changed
}

TEST(OptimizerStateTest, BadStatesAreRejectedNamingTheKey) {
  Model a(1);
  auto opt = make_adamw(split_decay_groups(a.params, 0.1)).value();
  ASSERT_TRUE(opt->step().ok());
  const OptimizerStateDict good = opt->state_dict().value();
  ASSERT_TRUE(opt->set_lrs({0.5, 0.25}).ok());
  {
    OptimizerStateDict sd = good;
    sd.meta.type = "sgd";
    expect_load_error(*opt, sd, "\"sgd\" optimizer");
  }
  {
    OptimizerStateDict sd = good;
    sd.meta.groups.pop_back();
    expect_load_error(*opt, sd, "1 parameter groups");
  }
  {
    OptimizerStateDict sd = good;
    sd.meta.groups[0].params[1] = "h.1.mlp.c_fc.weight";
    expect_load_error(*opt, sd, "\"h.1.mlp.c_fc.weight\" in the state but \"h.0.mlp.c_fc.weight\"");
  }
  {
    OptimizerStateDict sd = good;
    sd.tensors.erase("state.h.0.mlp.c_fc.bias.exp_avg_sq");
    expect_load_error(*opt, sd, "missing \"state.h.0.mlp.c_fc.bias.exp_avg_sq\"");
  }
  {
    OptimizerStateDict sd = good;
    sd.tensors["state.h.0.mlp.c_fc.bias.momentum_buffer"] = sd.tensors["state.h.0.mlp.c_fc.bias.exp_avg"];
    expect_load_error(*opt, sd, "unexpected key \"state.h.0.mlp.c_fc.bias.momentum_buffer\"");
  }
  {
    OptimizerStateDict sd = good;
    sd.tensors["state.wte.weight.exp_avg"] = testing::random_cpu_tensor({20, 5}, DType::kF32, 1);
    expect_load_error(*opt, sd, "\"state.wte.weight.exp_avg\" must be float32 [20, 6]");
  }
  {
    OptimizerStateDict sd = good;
    sd.tensors["state.wte.weight.step"] = testing::cpu_tensor({1}, DType::kF32, {1.0f});
    expect_load_error(*opt, sd, "\"state.wte.weight.step\" must be an int64");
  }
  {
    OptimizerStateDict sd = good;
    sd.meta.groups[1].hyper.eps = -1;
    expect_load_error(*opt, sd, "param group 1: eps");
  }
  ASSERT_TRUE(opt->load_state_dict(good).ok());  // its own views: a no-op copy
}

}  // namespace
}  // namespace colossal::nn
