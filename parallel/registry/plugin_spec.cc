#include "parallel/registry/plugin_spec.h"

#include "absl/strings/cord.h"

namespace colossal::parallel {
namespace {
constexpr char kOptionKeyUrl[] = "colossal.dev/option_key";
}

absl::Status option_error(absl::string_view key, absl::string_view message) {
  absl::Status s = absl::InvalidArgumentError(message);
  s.SetPayload(kOptionKeyUrl, absl::Cord(key));
  return s;
}

std::optional<std::string> option_key(const absl::Status& status) {
  absl::optional<absl::Cord> key = status.GetPayload(kOptionKeyUrl);
  if (!key.has_value()) return std::nullopt;
  return std::string(*key);
}

}  // namespace colossal::parallel
