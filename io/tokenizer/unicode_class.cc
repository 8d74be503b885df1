#include "io/tokenizer/unicode_class.h"

#include <algorithm>
#include <iterator>

namespace colossal::io {
namespace {

#include "io/tokenizer/unicode_tables.inc"

constexpr bool TablesAreSortedAndDisjoint() {
  for (size_t i = 0; i < std::size(kTablesRanges); ++i) {
    if (kTablesRanges[i].first > kTablesRanges[i].last) return false;
    if (i > 0 && kTablesRanges[i - 1].last >= kTablesRanges[i].first) return false;
  }
  return true;
}
static_assert(TablesAreSortedAndDisjoint(), "unicode_tables.inc must be sorted and disjoint");

constexpr CharClass SlowClassify(char32_t cp) {
  for (const CodepointRange& r : kTablesRanges) {
    if (cp < r.first) break;
    if (cp <= r.last) return r.cls;
  }
  return CharClass::kOther;
}

}  // namespace

namespace unicode_internal {

#define COLOSSAL_ASCII_CLASS_ROW(base)                                                         \
  SlowClassify(base + 0), SlowClassify(base + 1), SlowClassify(base + 2), SlowClassify(base + 3), \
      SlowClassify(base + 4), SlowClassify(base + 5), SlowClassify(base + 6),                     \
      SlowClassify(base + 7)
constexpr CharClass kAsciiClass[128] = {
    COLOSSAL_ASCII_CLASS_ROW(0),   COLOSSAL_ASCII_CLASS_ROW(8),   COLOSSAL_ASCII_CLASS_ROW(16),
    COLOSSAL_ASCII_CLASS_ROW(24),  COLOSSAL_ASCII_CLASS_ROW(32),  COLOSSAL_ASCII_CLASS_ROW(40),
    COLOSSAL_ASCII_CLASS_ROW(48),  COLOSSAL_ASCII_CLASS_ROW(56),  COLOSSAL_ASCII_CLASS_ROW(64),
    COLOSSAL_ASCII_CLASS_ROW(72),  COLOSSAL_ASCII_CLASS_ROW(80),  COLOSSAL_ASCII_CLASS_ROW(88),
    COLOSSAL_ASCII_CLASS_ROW(96),  COLOSSAL_ASCII_CLASS_ROW(104), COLOSSAL_ASCII_CLASS_ROW(112),
    COLOSSAL_ASCII_CLASS_ROW(120),
};
#undef COLOSSAL_ASCII_CLASS_ROW

CharClass ClassifyNonAscii(char32_t cp) {
  // The last range whose first <= cp.
  const auto* end = std::end(kTablesRanges);
  const auto* it = std::upper_bound(std::begin(kTablesRanges), end, cp,
                                    [](char32_t v, const CodepointRange& r) { return v < r.first; });
  if (it == std::begin(kTablesRanges)) return CharClass::kOther;
  --it;
  return cp <= it->last ? it->cls : CharClass::kOther;
}

}  // namespace unicode_internal

const char* UnicodeTablesVersion() { return kTablesUnicodeVersion; }

std::span<const CodepointRange> UnicodeClassRanges() { return kTablesRanges; }

}  // namespace colossal::io
