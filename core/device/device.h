// colossal::core — devices: the CPU and CUDA GPUs.
//
// A Device names where memory lives and work runs: the CPU, or CUDA device n.
// Users write devices as strings ("cpu", "cuda", "cuda:1"); parse_device turns
// them into a Device, and check_device_available says whether this build and
// machine can use it (a CPU-only build reports "built without CUDA").
//
//   COLOSSAL_ASSIGN_OR_RETURN(Device d, parse_device("cuda:1"));
//   COLOSSAL_RETURN_IF_ERROR(check_device_available(d));
//   d.to_string();                 // "cuda:1"
//   { DeviceGuard guard(d); ... }  // CUDA calls in this scope go to device 1
#ifndef COLOSSAL_CORE_DEVICE_DEVICE_H_
#define COLOSSAL_CORE_DEVICE_DEVICE_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bazel/cuda_config.h"

namespace colossal::core {

enum class DeviceType : int8_t { kCpu = 0, kCuda = 1 };

// A value type: the device kind and, for CUDA, the device ordinal. The CPU
// always has index 0. Default-constructed, it is the CPU.
class Device {
 public:
  constexpr Device() = default;
  static constexpr Device cpu() { return Device(DeviceType::kCpu, 0); }
  // CUDA device `index` (>= 0). Whether it exists is check_device_available's job.
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::kCuda, index); }

  constexpr DeviceType type() const { return type_; }
  constexpr int index() const { return index_; }
  constexpr bool is_cpu() const { return type_ == DeviceType::kCpu; }
  constexpr bool is_cuda() const { return type_ == DeviceType::kCuda; }

  // "cpu" or "cuda:<index>"; parse_device(d.to_string()) == d.
  std::string to_string() const;

  friend constexpr bool operator==(const Device& a, const Device& b) {
    return a.type_ == b.type_ && a.index_ == b.index_;
  }
  friend constexpr bool operator!=(const Device& a, const Device& b) { return !(a == b); }
  template <typename H>
  friend H AbslHashValue(H h, const Device& d) {
    return H::combine(std::move(h), static_cast<int>(d.type_), d.index_);
  }

 private:
  constexpr Device(DeviceType type, int index) : type_(type), index_(index) {}
  DeviceType type_ = DeviceType::kCpu;
  int index_ = 0;
};

std::ostream& operator<<(std::ostream& out, const Device& device);

// Parses "cpu", "cuda" (device 0) or "cuda:<n>", ASCII case-insensitive,
// surrounding whitespace ignored. Only the syntax is checked: a well-formed
// CUDA device parses even in a CPU-only build (check_device_available tells).
// Errors are InvalidArgumentError naming the input, with a suggestion.
absl::StatusOr<Device> parse_device(absl::string_view text);

// Whether this binary was built with CUDA (COLOSSAL_WITH_CUDA).
constexpr bool built_with_cuda() { return COLOSSAL_WITH_CUDA != 0; }

// The number of usable CUDA devices: 0 in a CPU-only build, or when there is no
// driver or no device.
int cuda_device_count();

// OK if `device` can be used here. Otherwise FailedPreconditionError for a CUDA
// device in a CPU-only build ("built without CUDA") or on a machine with no
// usable CUDA device (with the CUDA runtime's reason), and OutOfRangeError for
// an index past the last device (naming how many there are).
absl::Status check_device_available(Device device);

// Makes `device` the calling thread's current CUDA device for the guard's
// lifetime and restores the previous one after. A no-op for the CPU. The device
// must be available (check_device_available); a CUDA error aborts.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // the device to restore, or -1 when nothing was changed
};

}  // namespace colossal::core

#endif  // COLOSSAL_CORE_DEVICE_DEVICE_H_
