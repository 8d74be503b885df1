// colossal::io — reading small JSON files (configs, trainer state) with
// errors that name the file and the key.
#ifndef COLOSSAL_IO_COMMON_JSON_UTIL_H_
#define COLOSSAL_IO_COMMON_JSON_UTIL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace colossal::io {

// `text` parsed as a JSON object. InvalidArgument "<what>: not a JSON object"
// for malformed text or another JSON type.
absl::StatusOr<nlohmann::json> ParseJsonObject(absl::string_view text, absl::string_view what);

// Integer member `key` of object `j`. InvalidArgument naming `what` and the
// key when it is missing or not an integer in int64_t's range (the message shows a scalar's
// value, a structured value's type only: dump() recurses once per level).
absl::StatusOr<int64_t> JsonInt(const nlohmann::json& j, const char* key, absl::string_view what);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_COMMON_JSON_UTIL_H_
