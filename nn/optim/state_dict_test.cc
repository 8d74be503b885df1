// Optimizer state JSON: round trips (doubles exactly), and errors naming the key.
#include "nn/optim/state_dict.h"

#include <gtest/gtest.h>

#include <cstring>
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

// A held state handed out as a stream and collected again is the same dict,
// bit for bit: step counts held, the rest streamed whole; a rank that does
// not write keeps the meta alone.
TEST(StreamHeldTest, CollectsBackToTheSameDict) {
  OptimizerStateDict sd;
  sd.meta = adam_meta();
  auto filled = [](core::Shape shape, core::DType dtype, float first) {
    core::Tensor t = *core::Tensor::empty(shape, dtype, core::Stream::cpu());
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (dtype == core::DType::kI64) t.data<int64_t>()[i] = 7 + i;
      else t.data<float>()[i] = first + 0.37f * static_cast<float>(i);
    }
    return t;
  };
  sd.tensors[state_key("wte.weight", "exp_avg")] = filled(core::Shape({3, 4}), core::DType::kF32, -1.5f);
  sd.tensors[state_key("wte.weight", "exp_avg_sq")] = filled(core::Shape({3, 4}), core::DType::kF32, 2.25f);
  sd.tensors[state_key("wte.weight", "step")] = filled(core::Shape(), core::DType::kI64, 0);
  sd.tensors[state_key("h.0.ln_1.weight", "exp_avg")] = filled(core::Shape({5}), core::DType::kF32, 0.5f);

  StreamedOptimizerState streamed = *stream_held(sd, /*mine=*/true, core::Stream::cpu());
  EXPECT_EQ(streamed.held.tensors.size(), 1u);  // the step count
  EXPECT_EQ(streamed.streamed.size(), 3u);
  absl::StatusOr<OptimizerStateDict> back = collect_streamed(std::move(streamed), /*hold=*/true);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->meta, sd.meta);
  ASSERT_EQ(back->tensors.size(), sd.tensors.size());
  for (const auto& [key, t] : sd.tensors) {
    auto it = back->tensors.find(key);
    ASSERT_NE(it, back->tensors.end()) << key;
    EXPECT_EQ(it->second.shape(), t.shape()) << key;
    ASSERT_EQ(it->second.nbytes(), t.nbytes()) << key;
    EXPECT_EQ(std::memcmp(it->second.raw_data(), t.raw_data(), t.nbytes()), 0) << key;
  }

  StreamedOptimizerState other = *stream_held(sd, /*mine=*/false, core::Stream::cpu());
  EXPECT_TRUE(other.held.tensors.empty());
  EXPECT_TRUE(other.streamed.empty());
  int pieces = 0;
  ASSERT_TRUE(other.write([&](size_t, int64_t, const core::Tensor&) { ++pieces; }).ok());
  EXPECT_EQ(pieces, 0);
}

}  // namespace
}  // namespace colossal::nn
