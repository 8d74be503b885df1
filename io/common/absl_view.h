// colossal::io — std::string_view <-> absl::string_view at calls into abseil.
//
// Debian's abseil is built with its own absl::string_view
// (ABSL_OPTION_USE_STD_STRING_VIEW is 0), which does not convert to or from
// std::string_view. io/ APIs take and return std::string_view; these two
// functions cross over where abseil is called (StrCat, StrSplit, flat_hash_map
// lookups, Status::message()). Both are free: a pointer and a length.
//
//   absl::StrCat(ToAbsl(path), ": ", ToAbsl(what));
//   std::string_view message = FromAbsl(status.message());
#ifndef COLOSSAL_IO_COMMON_ABSL_VIEW_H_
#define COLOSSAL_IO_COMMON_ABSL_VIEW_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace colossal::io {

inline absl::string_view ToAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view FromAbsl(absl::string_view s) { return std::string_view(s.data(), s.size()); }

}  // namespace colossal::io

#endif  // COLOSSAL_IO_COMMON_ABSL_VIEW_H_
