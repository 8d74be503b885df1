#include "core/device/device.h"

#include <gtest/gtest.h>

#include "absl/container/flat_hash_set.h"
#include "tests/util/gpu_test.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace colossal::core {
namespace {

bool contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

TEST(DeviceTest, ValuesAndStrings) {
  EXPECT_EQ(Device(), Device::cpu());
  EXPECT_TRUE(Device::cpu().is_cpu());
  EXPECT_TRUE(Device::cuda(2).is_cuda());
  EXPECT_EQ(Device::cuda(2).index(), 2);
  EXPECT_EQ(Device::cuda().index(), 0);
  EXPECT_EQ(Device::cpu().to_string(), "cpu");
  EXPECT_EQ(Device::cuda(3).to_string(), "cuda:3");
  EXPECT_NE(Device::cuda(0), Device::cuda(1));
  EXPECT_NE(Device::cuda(0), Device::cpu());
  std::ostringstream out;
  out << Device::cuda(1);
  EXPECT_EQ(out.str(), "cuda:1");
}

TEST(DeviceTest, Parse) {
  EXPECT_EQ(*parse_device("cpu"), Device::cpu());
  EXPECT_EQ(*parse_device(" CPU "), Device::cpu());
  EXPECT_EQ(*parse_device("cuda"), Device::cuda(0));
  EXPECT_EQ(*parse_device("cuda:0"), Device::cuda(0));
  EXPECT_EQ(*parse_device("CUDA:12"), Device::cuda(12));
  for (Device d : {Device::cpu(), Device::cuda(0), Device::cuda(7)}) {
    EXPECT_EQ(*parse_device(d.to_string()), d);
  }
}

TEST(DeviceTest, ParseErrorsSayWhatIsAccepted) {
  for (const char* bad : {"cuda:", "cuda:x", "cuda:-1", "cuda:1.5", "cuda:99999999999"}) {
    absl::Status s = parse_device(bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(contains(s.message(), "non-negative integer")) << s.message();
  }
  absl::Status s = parse_device("cdua").status();
  EXPECT_EQ(s.message(),
            "unknown device \"cdua\"; did you mean \"cuda\"? (accepted: cpu, cuda, cuda:<index>)");
  EXPECT_TRUE(contains(parse_device("cpu:0").status().message(), "did you mean \"cpu\"?"));
  EXPECT_TRUE(contains(parse_device("gpu:0").status().message(), "written \"cuda\""));
  EXPECT_FALSE(contains(parse_device("tpu-v4").status().message(), "did you mean"));
  EXPECT_FALSE(parse_device("").ok());
}

TEST(DeviceTest, HashesAsAKey) {
  absl::flat_hash_set<Device> set = {Device::cpu(), Device::cuda(0), Device::cuda(1), Device::cpu()};
  EXPECT_EQ(set.size(), 3u);
  EXPECT_TRUE(set.contains(Device::cuda(1)));
}

TEST(DeviceTest, CpuIsAlwaysAvailable) {
  EXPECT_TRUE(check_device_available(Device::cpu()).ok());
  DeviceGuard guard(Device::cpu());  // a no-op
}

TEST(DeviceTest, CudaAvailabilityMatchesTheBuildAndMachine) {
  const absl::Status s = check_device_available(Device::cuda(0));
  if (!built_with_cuda()) {
    EXPECT_EQ(cuda_device_count(), 0);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(contains(s.message(), "device cuda:0 is not available: colossal was built without CUDA"))
        << s.message();
  } else if (cuda_device_count() == 0) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(contains(s.message(), "no usable CUDA device")) << s.message();
  } else {
    EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(DeviceCudaTest, IndexPastTheLastDevice) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const int count = cuda_device_count();
  ASSERT_GE(count, 1);
  const absl::Status s = check_device_available(Device::cuda(count));
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(contains(s.message(), "does not exist: this machine has")) << s.message();
  EXPECT_EQ(check_device_available(Device::cuda(-1)).code(), absl::StatusCode::kInvalidArgument);
#endif
}

TEST(DeviceCudaTest, GuardSetsAndRestoresTheCurrentDevice) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const int last = cuda_device_count() - 1;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  {
    DeviceGuard guard(Device::cuda(last));
    int current = -1;
    ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
    EXPECT_EQ(current, last);
    {
      DeviceGuard cpu_guard(Device::cpu());  // leaves the CUDA device alone
      ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
      EXPECT_EQ(current, last);
    }
  }
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);
#endif
}

}  // namespace
}  // namespace colossal::core
