#include "core/device/device.h"

#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status/cuda_check.h"
#include "core/status/suggest.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace colossal::core {

std::string Device::to_string() const {
  if (is_cpu()) return "cpu";
  return absl::StrCat("cuda:", index_);
}

std::ostream& operator<<(std::ostream& out, const Device& device) {
  return out << device.to_string();
}

absl::StatusOr<Device> parse_device(absl::string_view text) {
  const std::string key = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (key == "cpu") return Device::cpu();
  if (key == "cuda") return Device::cuda(0);
  if (absl::StartsWith(key, "cuda:")) {
    const absl::string_view digits = absl::string_view(key).substr(5);
    int index = -1;
    const bool all_digits =
        !digits.empty() && digits.find_first_not_of("0123456789") == absl::string_view::npos;
    if (!all_digits || !absl::SimpleAtoi(digits, &index)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad device \"", text, "\": the CUDA device index must be a non-negative ",
                       "integer, as in \"cuda:0\" or \"cuda:1\""));
    }
    return Device::cuda(index);
  }
  std::string hint;
  if (absl::StartsWith(key, "gpu")) {
    hint = "; CUDA devices are written \"cuda\" or \"cuda:<index>\"";
  } else {
    const std::vector<absl::string_view> names = {"cpu", "cuda"};
    const absl::string_view head = absl::string_view(key).substr(0, key.find(':'));
    hint = did_you_mean(head, names);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown device \"", text, "\"", hint,
                                                 " (accepted: cpu, cuda, cuda:<index>)"));
}

int cuda_device_count() {
#if COLOSSAL_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: not an error for the caller
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

absl::Status check_device_available(Device device) {
  if (device.is_cpu()) return absl::OkStatus();
#if COLOSSAL_WITH_CUDA
  if (device.index() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", device.to_string(), " has a negative index"));
  }
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat("device ", device.to_string(),
                                                      " is not available: no usable CUDA device (",
                                                      cudaGetErrorString(err), ")"));
  }
  if (device.index() >= count) {
    return absl::OutOfRangeError(absl::StrCat(
        "device ", device.to_string(), " does not exist: this machine has ", count,
        " CUDA device", count == 1 ? "" : "s",
        count > 0 ? absl::StrCat(" (cuda:0 .. cuda:", count - 1, ")") : std::string()));
  }
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError(
      absl::StrCat("device ", device.to_string(),
                   " is not available: colossal was built without CUDA (--config=cpu or no CUDA "
                   "toolkit found); use \"cpu\" or rebuild with a CUDA toolkit"));
#endif
}

DeviceGuard::DeviceGuard(Device device) {
#if COLOSSAL_WITH_CUDA
  if (!device.is_cuda()) return;
  int current = -1;
  CUDA_CHECK(cudaGetDevice(&current));
  if (current != device.index()) {
    CUDA_CHECK(cudaSetDevice(device.index()));
    previous_ = current;
  }
#else
  COLOSSAL_CHECK(device.is_cpu()) << "DeviceGuard(" << device
                                  << ") in a build without CUDA: check_device_available first";
#endif
}

DeviceGuard::~DeviceGuard() {
#if COLOSSAL_WITH_CUDA
  if (previous_ >= 0) CUDA_CHECK_RELEASE(cudaSetDevice(previous_));
#endif
}

}  // namespace colossal::core
