// colossal::core — "did you mean" suggestions for misspelt user input.
//
// Parsers of user strings (dtypes, devices, later recipe keys and plugin names)
// name the closest accepted spelling in their error message:
//
//   std::vector<absl::string_view> names = {"float32", "bfloat16", "float16"};
//   closest_match("bfloat61", names);      // "bfloat16"
//   did_you_mean("bfloat61", names);       // "; did you mean \"bfloat16\"?"
//   did_you_mean("xyz", names);            // "" (nothing close enough)
#ifndef COLOSSAL_CORE_STATUS_SUGGEST_H_
#define COLOSSAL_CORE_STATUS_SUGGEST_H_

#include <cstddef>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/types/span.h"

namespace colossal::core {

// Levenshtein distance (insertions, deletions, substitutions, and swaps of two
// neighbouring characters each count 1), ASCII case-insensitive.
size_t edit_distance(absl::string_view a, absl::string_view b);

// The candidate closest to `input` by edit_distance, if it is close enough to be
// a plausible typo (distance <= max(1, input.size() / 3)); "" otherwise. Ties go
// to the earlier candidate.
std::string closest_match(absl::string_view input, absl::Span<const absl::string_view> candidates);

// "; did you mean \"<closest>\"?" for appending to an error message, or "" when
// no candidate is close enough.
std::string did_you_mean(absl::string_view input, absl::Span<const absl::string_view> candidates);

}  // namespace colossal::core

#endif  // COLOSSAL_CORE_STATUS_SUGGEST_H_
