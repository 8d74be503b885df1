// An outside repository calling colossal's reduce kernel through its public header.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/reduce/reduce.h"

namespace {

using colossal::kernels::DType;
using colossal::kernels::reduce::ReduceOp;

TEST(ConsumerTest, SumsOnCpu) {
  std::vector<float> dst = {1.5f, -2.0f, 3.25f};
  const std::vector<float> src = {0.5f, 4.0f, -0.25f};
  ASSERT_TRUE(colossal::kernels::reduce::reduce_into_cpu(dst.data(), src.data(), 3, DType::kF32,
                                                         ReduceOp::kSum)
                  .ok());
  EXPECT_EQ(dst, (std::vector<float>{2.0f, 2.0f, 3.0f}));
}

#if COLOSSAL_WITH_CUDA
TEST(ConsumerTest, CudaEntryPointIsLinked) {
  // A zero-length reduce needs no device; it proves the CUDA half links.
  EXPECT_TRUE(colossal::kernels::reduce::reduce_into_cuda(nullptr, nullptr, 0, DType::kF32,
                                                          ReduceOp::kSum, nullptr)
                  .ok());
}
#endif

}  // namespace
