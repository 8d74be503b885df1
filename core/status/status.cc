#include "core/status/status.h"

#include "absl/strings/str_cat.h"

namespace colossal::core {

absl::Status annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok() || context.empty()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

absl::Status from_kernel_status(const kernels::KernelStatus& status, absl::string_view context) {
  using Code = kernels::KernelStatus::Code;
  const std::string prefix = context.empty() ? std::string() : absl::StrCat(context, ": ");
  switch (status.code()) {
    case Code::kOk:
      return absl::OkStatus();
    case Code::kInvalidArgument:
      return absl::InvalidArgumentError(absl::StrCat(prefix, status.message()));
    case Code::kUnsupported:
      return absl::UnimplementedError(absl::StrCat(prefix, status.message()));
    case Code::kCudaError:
      return absl::InternalError(
          absl::StrCat(prefix, "CUDA error ", status.cuda_code(), ": ", status.message()));
  }
  return absl::UnknownError(absl::StrCat(prefix, "unknown kernel status code ",
                                         static_cast<int>(status.code()), ": ", status.message()));
}

}  // namespace colossal::core
