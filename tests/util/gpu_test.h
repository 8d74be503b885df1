// Test helpers for code with a CUDA path.
//
// A GPU test case starts with COLOSSAL_REQUIRE_GPU() (or COLOSSAL_REQUIRE_GPUS(n)),
// which skips it with a reason when the build has no CUDA (--config=cpu) or the
// machine has no usable device. Tag such tests `gpu` (or `multi_gpu`) in BUILD,
// e.g. colossal_cc_test(..., gpu = True), so tools/gpu/bundle.sh picks them up.
//
//   TEST(ReduceCudaTest, MatchesCpu) {
//     COLOSSAL_REQUIRE_GPU();
//   #if COLOSSAL_WITH_CUDA
//     ...
//   #endif
//   }
#ifndef COLOSSAL_TESTS_UTIL_GPU_TEST_H_
#define COLOSSAL_TESTS_UTIL_GPU_TEST_H_

#include <gtest/gtest.h>

#include <string>

namespace colossal::testing {

// Empty when at least `count` usable CUDA devices exist; otherwise why not.
std::string cuda_devices_unavailable(int count);

}  // namespace colossal::testing

#define COLOSSAL_REQUIRE_GPUS(count)                                                \
  do {                                                                              \
    const std::string colossal_skip_reason =                                        \
        ::colossal::testing::cuda_devices_unavailable(count);                       \
    if (!colossal_skip_reason.empty()) GTEST_SKIP() << colossal_skip_reason;        \
  } while (0)

#define COLOSSAL_REQUIRE_GPU() COLOSSAL_REQUIRE_GPUS(1)

#endif  // COLOSSAL_TESTS_UTIL_GPU_TEST_H_
