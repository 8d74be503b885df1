#include "io/common/json_util.h"

#include "absl/strings/str_cat.h"

namespace colossal::io {

absl::StatusOr<nlohmann::json> ParseJsonObject(absl::string_view text, absl::string_view what) {
  nlohmann::json j =
      nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a JSON object"));
  }
  return j;
}

absl::StatusOr<int64_t> JsonInt(const nlohmann::json& j, const char* key, absl::string_view what) {
  auto it = j.find(key);
  if (it == j.end()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": missing key '", key, "'"));
  }
  // An unsigned value past int64_t's range is no integer of ours: get<int64_t>
  // would wrap 2^64 - 1 to -1.
  if (!it->is_number_integer() ||
      (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", key, "' must be an integer, got ",
                                                   it->is_structured() ? it->type_name()
                                                                       : it->dump()));
  }
  return it->get<int64_t>();
}

}  // namespace colossal::io
