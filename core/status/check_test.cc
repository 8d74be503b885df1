// Death tests: every check prints file:line and what failed, then aborts.
#include "core/status/check.h"

#include <gtest/gtest.h>

#include "core/status/cublas_check.h"
#include "core/status/cuda_check.h"

namespace colossal::core {
namespace {

int evaluations = 0;
int counted(int v) {
  ++evaluations;
  return v;
}

TEST(CheckTest, PassingChecksDoNothingAndEvaluateOnce) {
  evaluations = 0;
  COLOSSAL_CHECK(counted(1) == 1) << "never printed";
  COLOSSAL_CHECK_EQ(counted(2), 2);
  COLOSSAL_CHECK_NE(counted(2), 3);
  COLOSSAL_CHECK_LT(counted(2), 3);
  COLOSSAL_CHECK_LE(counted(3), 3);
  COLOSSAL_CHECK_GT(counted(4), 3);
  COLOSSAL_CHECK_GE(counted(3), 3);
  COLOSSAL_CHECK_OK(absl::OkStatus());
  EXPECT_EQ(evaluations, 7);
}

TEST(CheckTest, ChecksInsideIfElseBindCorrectly) {
  int branch = 0;
  if (evaluations >= 0)
    COLOSSAL_CHECK(true) << "x";
  else
    branch = 1;
  EXPECT_EQ(branch, 0);
}

TEST(CheckDeathTest, CheckPrintsFileLineConditionAndMessage) {
  const int n = -1;
  EXPECT_DEATH(COLOSSAL_CHECK(n > 0) << "n = " << n,
               "check_test\\.cc:[0-9]+: check failed: n > 0: n = -1");
  EXPECT_DEATH(COLOSSAL_CHECK(n > 0), "check_test\\.cc:[0-9]+: check failed: n > 0\n");
}

TEST(CheckDeathTest, ComparisonsPrintBothValues) {
  const int rank = 3;
  EXPECT_DEATH(COLOSSAL_CHECK_EQ(rank, 2) << "gemm operand",
               "check failed: rank == 2 \\(3 vs 2\\): gemm operand");
  EXPECT_DEATH(COLOSSAL_CHECK_LT(rank, 1), "check failed: rank < 1 \\(3 vs 1\\)");
  EXPECT_DEATH(COLOSSAL_CHECK_GE(rank, 4), "check failed: rank >= 4 \\(3 vs 4\\)");
}

TEST(CheckDeathTest, CheckOkPrintsTheStatus) {
  EXPECT_DEATH(COLOSSAL_CHECK_OK(absl::InvalidArgumentError("bad dtype")) << "while loading",
               "is OK: INVALID_ARGUMENT: bad dtype: while loading");
}

TEST(CheckDeathTest, FatalAlwaysAborts) {
  EXPECT_DEATH(COLOSSAL_FATAL() << "unreachable dtype " << 99,
               "check_test\\.cc:[0-9]+: fatal error: unreachable dtype 99");
}

// A stand-in library with its own error codes, as comm/ will check NCCL.
enum FakeResult { kFakeOk = 0, kFakeBusy = 5 };
const char* fake_error_string(FakeResult r) { return r == kFakeBusy ? "device busy" : "ok"; }
const char* fake_error_name(FakeResult r) { return r == kFakeBusy ? "kFakeBusy" : "kFakeOk"; }
FakeResult fake_call(FakeResult r) { return r; }

TEST(CheckDeathTest, LibraryCallPrintsCodeMessageAndExpression) {
  COLOSSAL_CHECK_LIBRARY_CALL("Fake", fake_call(kFakeOk), kFakeOk, fake_error_string);
  EXPECT_DEATH(COLOSSAL_CHECK_LIBRARY_CALL("Fake", fake_call(kFakeBusy), kFakeOk, fake_error_string),
               "check_test\\.cc:[0-9]+: Fake error 5: device busy in fake_call\\(kFakeBusy\\)");
  EXPECT_DEATH(COLOSSAL_CHECK_LIBRARY_CALL_NAMED("Fake", fake_call(kFakeBusy), kFakeOk,
                                                 fake_error_name, fake_error_string),
               "Fake error 5 \\(kFakeBusy\\): device busy in fake_call");
}

#if COLOSSAL_WITH_CUDA
// The error strings come from cudart and cuBLAS themselves; no device is needed.
TEST(CheckDeathTest, CudaCheckPrintsCudaErrorString) {
  CUDA_CHECK(cudaSuccess);
  EXPECT_DEATH(CUDA_CHECK(cudaErrorMemoryAllocation),
               "check_test\\.cc:[0-9]+: CUDA error 2 \\(cudaErrorMemoryAllocation\\): out of memory "
               "in cudaErrorMemoryAllocation");
}

TEST(CheckDeathTest, CudaCheckReleaseIgnoresOnlyTeardownErrors) {
  CUDA_CHECK_RELEASE(cudaErrorCudartUnloading);
  CUDA_CHECK_RELEASE(cudaErrorContextIsDestroyed);
  EXPECT_DEATH(CUDA_CHECK_RELEASE(cudaErrorInvalidValue),
               "CUDA error 1 \\(cudaErrorInvalidValue\\): invalid argument");
}

TEST(CheckDeathTest, CublasCheckPrintsCublasStatusString) {
  CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS);
  EXPECT_DEATH(CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE),
               "cuBLAS error 7 \\(CUBLAS_STATUS_INVALID_VALUE\\): .* in CUBLAS_STATUS_INVALID_VALUE");
}
#endif

}  // namespace
}  // namespace colossal::core
