// Optimizer state JSON: round trips (doubles exactly), and errors naming the key.
#include "nn/optim/state_dict.h"

#include <gtest/gtest.h>

#include <string>

namespace colossal::nn {
namespace {

OptimizerMeta adam_meta() {
  OptimizerMeta m;
  m.type = "hybrid_adam";
  GroupState g0;
  g0.hyper.lr = 6e-4;
  g0.hyper.weight_decay = 0.1;
  g0.hyper.beta2 = 0.95;
  g0.hyper.eps = 1.0 / 3.0;  // not representable in short decimal: must round-trip
  g0.params = {"wte.weight", "h.0.attn.c_attn.weight"};
  GroupState g1;
  g1.hyper.bias_correction = false;
  g1.hyper.adamw_mode = false;
  g1.params = {"h.0.ln_1.weight"};
  m.groups = {g0, g1, GroupState{}};
  return m;
}

TEST(OptimizerMetaJsonTest, AdamRoundTripsExactly) {
  const OptimizerMeta m = adam_meta();
  const std::string json = optimizer_meta_to_json(m);
  EXPECT_NE(json.find("\"param_groups\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"betas\":[0.9,0.95]"), std::string::npos) << json;
  EXPECT_EQ(json.find("momentum"), std::string::npos) << json;
  absl::StatusOr<OptimizerMeta> back = optimizer_meta_from_json(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, m);
}

TEST(OptimizerMetaJsonTest, SgdRoundTrips) {
  OptimizerMeta m;
  m.type = "sgd";
  GroupState g;
  g.hyper.lr = 0.1;
  g.hyper.momentum = 0.9;
  g.hyper.dampening = 0.1;
  g.hyper.nesterov = true;
  g.params = {"w"};
  m.groups = {g};
  const std::string json = optimizer_meta_to_json(m);
  EXPECT_EQ(json.find("betas"), std::string::npos) << json;
  absl::StatusOr<OptimizerMeta> back = optimizer_meta_from_json(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, m);
}

void expect_error(absl::string_view json, const std::string& needle) {
  const absl::Status s = optimizer_meta_from_json(json).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << json;
  EXPECT_NE(s.message().find(needle), std::string::npos) << "\"" << needle << "\" not in: " << s;
}

TEST(OptimizerMetaJsonTest, ErrorsNameTheKey) {
  expect_error("{", "parse error");
  expect_error("[]", "expected an object");
  expect_error(R"({"type": "adamw", "param_groups": []})", "missing key \"version\"");
  expect_error(R"({"version": 2, "type": "adamw", "param_groups": []})", "\"version\"");
  expect_error(R"({"version": 1, "type": "hybrid_adma", "param_groups": []})",
               "did you mean \"hybrid_adam\"");
  expect_error(R"({"version": 1, "type": "adamw"})", "\"param_groups\"");
  expect_error(R"({"version": 1, "type": "adamw", "param_groups": [{"lr": "x"}]})",
               "param_groups[0]: \"lr\" has the wrong type");
  expect_error(R"({"version": 1, "type": "adamw", "param_groups": [{"lr": 1, "weight_decay": 0,
                 "betas": [0.9], "eps": 1e-8, "bias_correction": true, "adamw_mode": true,
                 "params": []}]})",
               "\"betas\"");
  expect_error(R"({"version": 1, "type": "sgd", "param_groups": [{"lr": 1, "weight_decay": 0,
                 "momentum": 0, "dampening": 0, "params": []}]})",
               "missing key \"nesterov\"");
  expect_error(R"({"version": 1, "type": "sgd", "param_groups": [{"lr": 1, "weight_decay": 0,
                 "momentum": 0, "dampening": 0, "nesterov": false, "params": [3]}]})",
               "\"params\"");
}

TEST(StateKeyTest, Format) {
  EXPECT_EQ(state_key("h.0.attn.bias", "exp_avg"), "state.h.0.attn.bias.exp_avg");
  EXPECT_TRUE(is_adam_type("cpu_adam"));
  EXPECT_FALSE(is_adam_type("sgd"));
}

}  // namespace
}  // namespace colossal::nn
