#include "core/status/status.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace colossal::core {

namespace {
constexpr char kOptionKeyUrl[] = "colossal.dev/option_key";
}  // namespace

absl::Status annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok() || context.empty()) return status;
  absl::Status out(status.code(), absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

absl::Status option_error(absl::string_view key, absl::string_view why) {
  return with_option_key(absl::InvalidArgumentError(absl::StrCat(key, " ", why)), key);
}

absl::Status with_option_key(absl::Status status, absl::string_view key) {
  if (!status.ok()) status.SetPayload(kOptionKeyUrl, absl::Cord(key));
  return status;
}

std::optional<std::string> option_key(const absl::Status& status) {
  absl::optional<absl::Cord> key = status.GetPayload(kOptionKeyUrl);
  if (!key.has_value()) return std::nullopt;
  return std::string(*key);
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
