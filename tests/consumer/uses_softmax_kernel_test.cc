// An outside repository calling colossal's fused causal softmax through its public header.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/softmax/softmax.h"

namespace {

using colossal::kernels::DType;

TEST(ConsumerTest, CausalSoftmaxOnCpu) {
  // One [2, 2] score matrix: row 0 sees only column 0; row 1 sees both.
  const std::vector<float> x = {0.3f, 7.0f, std::log(3.0f), 0.0f};
  std::vector<float> y(4, -1.0f);
  ASSERT_TRUE(colossal::kernels::softmax::scaled_causal_softmax_forward_cpu(
                  y.data(), x.data(), /*batches=*/1, /*sq=*/2, /*sk=*/2, DType::kF32, /*scale=*/1.0f)
                  .ok());
  EXPECT_FLOAT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 0.0f);  // excluded: exactly zero
  EXPECT_NEAR(y[2], 0.75f, 1e-6);
  EXPECT_NEAR(y[3], 0.25f, 1e-6);
}

}  // namespace
