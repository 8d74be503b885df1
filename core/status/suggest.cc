#include "core/status/suggest.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace colossal::core {

size_t edit_distance(absl::string_view a, absl::string_view b) {
  // Optimal string alignment distance over three rows of the DP table.
  const size_t n = a.size(), m = b.size();
  std::vector<size_t> prev2(m + 1), prev(m + 1), cur(m + 1);
  for (size_t j = 0; j <= m; ++j) prev[j] = j;
  for (size_t i = 1; i <= n; ++i) {
    cur[0] = i;
    const char ai = absl::ascii_tolower(static_cast<unsigned char>(a[i - 1]));
    for (size_t j = 1; j <= m; ++j) {
      const char bj = absl::ascii_tolower(static_cast<unsigned char>(b[j - 1]));
      size_t best = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ai == bj ? 0 : 1)});
      if (i > 1 && j > 1 && ai == absl::ascii_tolower(static_cast<unsigned char>(b[j - 2])) &&
          absl::ascii_tolower(static_cast<unsigned char>(a[i - 2])) == bj) {
        best = std::min(best, prev2[j - 2] + 1);
      }
      cur[j] = best;
    }
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

std::string closest_match(absl::string_view input, absl::Span<const absl::string_view> candidates) {
  const size_t limit = std::max<size_t>(1, input.size() / 3);
  absl::string_view best;
  size_t best_distance = limit + 1;
  for (absl::string_view c : candidates) {
    const size_t d = edit_distance(input, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return std::string(best);
}

std::string did_you_mean(absl::string_view input, absl::Span<const absl::string_view> candidates) {
  const std::string match = closest_match(input, candidates);
  if (match.empty()) return "";
  return absl::StrCat("; did you mean \"", match, "\"?");
}

}  // namespace colossal::core
