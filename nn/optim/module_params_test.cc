// Optimizer parameters from a ParameterStore: fp32 views are their own
// masters, bf16 views get fp32 masters, and a step updates the store.
#include "nn/optim/module_params.h"

#include <gtest/gtest.h>

#include <vector>

#include "nn/module/parameter.h"
#include "nn/optim/adam.h"
#include "nn/optim/test_util.h"

namespace colossal::nn {
namespace {

using core::DType;

TEST(OptimizerParamsTest, StepUpdatesTheStoreViews) {
  ParameterTable table;
  ASSERT_TRUE(table.add("fc.weight", {4, 3}, DType::kBF16).ok());
  ASSERT_TRUE(table.add("fc.bias", {3}, DType::kF32).ok());
  ParameterStore store = ParameterStore::create(table, core::Stream::cpu()).value();
  for (const Parameter& p : store.parameters()) {
    testing::refill(p.value, 1);
    testing::refill(p.grad, 2);
  }
  std::vector<ParamRef> params = optimizer_params(store.parameters(), core::Stream::cpu()).value();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].name, "fc.weight");
  EXPECT_EQ(params[0].master.dtype(), DType::kF32);
  EXPECT_EQ(params[0].model_copy.raw_data(), store.parameters()[0].value.raw_data());
  EXPECT_EQ(params[1].master.raw_data(), store.parameters()[1].value.raw_data());
  EXPECT_FALSE(params[1].model_copy.defined());

  const std::vector<float> w0 = testing::to_floats(store.parameters()[0].value);
  const std::vector<float> b0 = testing::to_floats(store.parameters()[1].value);
  AdamOptions o;
  o.lr = 0.1;
  auto opt = make_hybrid_adam(split_decay_groups(params, 0.1), o).value();
  ASSERT_TRUE(opt->step().ok());
  EXPECT_NE(testing::to_floats(store.parameters()[0].value), w0);
  EXPECT_NE(testing::to_floats(store.parameters()[1].value), b0);
  EXPECT_EQ(testing::to_floats(store.parameters()[1].value), testing::to_floats(params[1].master));
}

}  // namespace
}  // namespace colossal::nn
