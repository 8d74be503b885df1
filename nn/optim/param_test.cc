// Parameters: masters made from fp32/bf16/fp16 weights, group overrides, and
// the decay / no-decay split by name and rank.
#include "nn/optim/param.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "nn/optim/test_util.h"
#include "tests/util/gpu_test.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Tensor;

TEST(MakeMasterParamTest, Fp32WeightIsItsOwnMaster) {
  Tensor w = testing::random_cpu_tensor({3, 4}, DType::kF32, 1);
  Tensor g = testing::random_cpu_tensor({3, 4}, DType::kF32, 2);
  ParamRef p = make_master_param("w", w, g, core::Stream::cpu()).value();
  EXPECT_EQ(p.name, "w");
  EXPECT_EQ(p.master.raw_data(), w.raw_data());
  EXPECT_FALSE(p.model_copy.defined());
  EXPECT_EQ(p.grad.raw_data(), g.raw_data());
}

TEST(MakeMasterParamTest, HalfWeightsGetAnExactFp32Master) {
  for (const DType dt : {DType::kBF16, DType::kF16}) {
    Tensor w = testing::random_cpu_tensor({5, 7}, dt, 3);
    Tensor g = testing::random_cpu_tensor({5, 7}, dt, 4);
    ParamRef p = make_master_param("h.0.w", w, g, core::Stream::cpu()).value();
    EXPECT_EQ(p.master.dtype(), DType::kF32);
    EXPECT_EQ(p.master.shape(), w.shape());
    EXPECT_NE(p.master.raw_data(), w.raw_data());
    EXPECT_EQ(p.model_copy.raw_data(), w.raw_data());
    EXPECT_EQ(testing::to_floats(p.master), testing::to_floats(w));
  }
}

TEST(MakeMasterParamTest, ErrorsNameTheParameter) {
  Tensor w = testing::random_cpu_tensor({4}, DType::kBF16, 1);
  Tensor g = testing::random_cpu_tensor({5}, DType::kBF16, 2);
  absl::Status s = make_master_param("blocks.3.w", w, g, core::Stream::cpu()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("\"blocks.3.w\""), std::string::npos) << s;
  Tensor i = core::Tensor::empty({4}, DType::kI32, core::Stream::cpu()).value();
  EXPECT_EQ(make_master_param("i", i, i, core::Stream::cpu()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(make_master_param("u", Tensor(), g, core::Stream::cpu()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ResolveGroupTest, OverridesOnlyWhatIsSet) {
  GroupHyperParams d;
  d.lr = 1e-3;
  d.beta2 = 0.999;
  ParamGroup g;
  g.lr = 5e-4;
  g.nesterov = true;
  const GroupHyperParams h = resolve_group(g, d);
  EXPECT_EQ(h.lr, 5e-4);
  EXPECT_TRUE(h.nesterov);
  EXPECT_EQ(h.beta2, 0.999);
  EXPECT_EQ(h.weight_decay, 0.0);
}

std::vector<std::string> names(const ParamGroup& g) {
  std::vector<std::string> out;
  for (const ParamRef& p : g.params) out.push_back(p.name);
  return out;
}

TEST(SplitDecayGroupsTest, OneDimAndBiasesGetNoDecay) {
  std::vector<ParamRef> ps = {
      testing::random_param("wte.weight", {50, 8}, 1),
      testing::random_param("h.0.ln_1.weight", {8}, 2),
      testing::random_param("h.0.attn.c_attn.weight", {8, 24}, 3),
      testing::random_param("h.0.attn.c_attn.bias", {24}, 4),
      testing::random_param("h.0.attn.bias", {1, 1, 4, 4}, 5),  // a buffer-like 4-D ".bias"
      testing::random_param("scalar", {}, 6),
  };
  std::vector<ParamGroup> g = split_decay_groups(ps, 0.1);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(names(g[0]), (std::vector<std::string>{"wte.weight", "h.0.attn.c_attn.weight"}));
  EXPECT_EQ(names(g[1]), (std::vector<std::string>{"h.0.ln_1.weight", "h.0.attn.c_attn.bias",
                                                   "h.0.attn.bias", "scalar"}));
  EXPECT_EQ(*g[0].weight_decay, 0.1);
  EXPECT_EQ(*g[1].weight_decay, 0.0);
  EXPECT_FALSE(g[0].lr.has_value());

  // Colossal-AI's BERT examples: substrings, and 2-D norm weights by name.
  NoDecayRule rule;
  rule.low_rank = false;
  rule.name_substrings = {"LayerNorm.weight"};
  std::vector<ParamRef> bert = {testing::random_param("encoder.LayerNorm.weight", {1, 8}, 1),
                                testing::random_param("encoder.dense.weight", {8, 8}, 2),
                                testing::random_param("encoder.gain", {8}, 3)};
  g = split_decay_groups(bert, 0.01, rule);
  EXPECT_EQ(names(g[0]), (std::vector<std::string>{"encoder.dense.weight", "encoder.gain"}));
  EXPECT_EQ(names(g[1]), (std::vector<std::string>{"encoder.LayerNorm.weight"}));
  EXPECT_TRUE(is_no_decay(bert[0], rule));
  EXPECT_FALSE(is_no_decay(bert[2], rule));
  EXPECT_TRUE(is_no_decay(bert[2]));  // the default rule: 1-D
}

TEST(MakeMasterParamCudaTest, DeviceWeightGetsDeviceMaster) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  auto owned = core::OwnedStream::create(core::Device::cuda(0)).value();
  const core::Stream& s = owned.get();
  Tensor w = testing::random_cpu_tensor({9, 3}, DType::kBF16, 1).to(s.device(), s).value();
  Tensor g = testing::random_cpu_tensor({9, 3}, DType::kBF16, 2).to(s.device(), s).value();
  ParamRef p = make_master_param("w", w, g, s).value();
  EXPECT_EQ(p.master.device(), s.device());
  EXPECT_EQ(testing::to_floats(p.master, s), testing::to_floats(w, s));
  // The CPU stream for a CUDA weight is an error naming the parameter.
  absl::Status e = make_master_param("w", w, g, core::Stream::cpu()).status();
  EXPECT_EQ(e.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(e.message().find("\"w\" is on cuda:0"), std::string::npos) << e;
#endif
}

}  // namespace
}  // namespace colossal::nn
