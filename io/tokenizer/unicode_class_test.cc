#include "io/tokenizer/unicode_class.h"

#include <string>
#include <string_view>

#include "gtest/gtest.h"

namespace colossal::io {
namespace {

std::string EncodeUtf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// The usage example of unicode_class.h.
TEST(UnicodeClassTest, HeaderExample) {
  std::string_view s = "日本 42";
  Utf8Char ch = DecodeUtf8(s, 0);
  EXPECT_EQ(ch.codepoint, 0x65E5u);
  EXPECT_EQ(ch.length, 3u);
  EXPECT_EQ(ClassifyCodepoint(ch.codepoint), CharClass::kLetter);
}

TEST(UnicodeClassTest, TablesAreUnicode16WithExpectedSizes) {
  EXPECT_STREQ(UnicodeTablesVersion(), "16.0.0");
  int64_t letters = 0, numbers = 0, spaces = 0;
  for (const CodepointRange& r : UnicodeClassRanges()) {
    const int64_t n = static_cast<int64_t>(r.last) - r.first + 1;
    ASSERT_GT(n, 0);
    ASSERT_NE(r.cls, CharClass::kOther);
    (r.cls == CharClass::kLetter ? letters : r.cls == CharClass::kNumber ? numbers : spaces) += n;
  }
  // Counts for Unicode 16.0.0, as tiktoken 0.14's regex engine sees them.
  EXPECT_EQ(letters, 141028);
  EXPECT_EQ(numbers, 1911);
  EXPECT_EQ(spaces, 25);
}

TEST(UnicodeClassTest, AsciiClasses) {
  for (char32_t c = 0; c < 128; ++c) {
    CharClass want = CharClass::kOther;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) want = CharClass::kLetter;
    if (c >= '0' && c <= '9') want = CharClass::kNumber;
    if (c == ' ' || (c >= 0x09 && c <= 0x0D)) want = CharClass::kSpace;
    EXPECT_EQ(ClassifyCodepoint(c), want) << "U+" << std::hex << static_cast<uint32_t>(c);
  }
}

TEST(UnicodeClassTest, SelectedCodepoints) {
  struct Case {
    char32_t cp;
    CharClass cls;
    const char* what;
  };
  const Case cases[] = {
      {0x00AA, CharClass::kLetter, "feminine ordinal (Lo)"},
      {0x00B5, CharClass::kLetter, "micro sign (Ll)"},
      {0x00C9, CharClass::kLetter, "E acute"},
      {0x00DF, CharClass::kLetter, "sharp s"},
      {0x01C5, CharClass::kLetter, "Dz digraph (Lt)"},
      {0x02B0, CharClass::kLetter, "modifier h (Lm)"},
      {0x03BB, CharClass::kLetter, "lambda"},
      {0x0416, CharClass::kLetter, "Cyrillic Zhe"},
      {0x05D0, CharClass::kLetter, "Hebrew alef"},
      {0x0627, CharClass::kLetter, "Arabic alef"},
      {0x0915, CharClass::kLetter, "Devanagari ka"},
      {0x0E01, CharClass::kLetter, "Thai ko kai"},
      {0x3042, CharClass::kLetter, "hiragana a"},
      {0x30AB, CharClass::kLetter, "katakana ka"},
      {0x4E2D, CharClass::kLetter, "CJK zhong"},
      {0xAC00, CharClass::kLetter, "Hangul ga"},
      {0x20000, CharClass::kLetter, "CJK extension B"},
      {0x31350, CharClass::kLetter, "CJK extension H (Unicode 15.0)"},
      {0x10D50, CharClass::kLetter, "Garay capital A (Unicode 16.0)"},
      {0x11380, CharClass::kLetter, "Tulu-Tigalari A (Unicode 16.0)"},
      {0x00B2, CharClass::kNumber, "superscript two (No)"},
      {0x00BD, CharClass::kNumber, "one half (No)"},
      {0x0660, CharClass::kNumber, "Arabic-Indic zero (Nd)"},
      {0x0966, CharClass::kNumber, "Devanagari zero"},
      {0x2160, CharClass::kNumber, "Roman numeral one (Nl)"},
      {0x2460, CharClass::kNumber, "circled one"},
      {0x3007, CharClass::kNumber, "ideographic zero (Nl)"},
      {0x1D7D8, CharClass::kNumber, "mathematical double-struck zero"},
      {0x1CCF0, CharClass::kNumber, "outlined digit zero (Unicode 16.0)"},
      {0x0085, CharClass::kSpace, "next line"},
      {0x00A0, CharClass::kSpace, "no-break space"},
      {0x1680, CharClass::kSpace, "Ogham space"},
      {0x2000, CharClass::kSpace, "en quad"},
      {0x200A, CharClass::kSpace, "hair space"},
      {0x2028, CharClass::kSpace, "line separator"},
      {0x2029, CharClass::kSpace, "paragraph separator"},
      {0x202F, CharClass::kSpace, "narrow no-break space"},
      {0x205F, CharClass::kSpace, "medium mathematical space"},
      {0x3000, CharClass::kSpace, "ideographic space"},
      {0x001C, CharClass::kOther, "file separator (isspace() in Python, not White_Space)"},
      {0x00AD, CharClass::kOther, "soft hyphen (Cf)"},
      {0x00D7, CharClass::kOther, "multiplication sign (Sm)"},
      {0x0301, CharClass::kOther, "combining acute (Mn)"},
      {0x0903, CharClass::kOther, "Devanagari visarga (Mc)"},
      {0x094D, CharClass::kOther, "Devanagari virama (Mn)"},
      {0x180E, CharClass::kOther, "Mongolian vowel separator (no longer White_Space)"},
      {0x200B, CharClass::kOther, "zero width space (Cf)"},
      {0x200D, CharClass::kOther, "zero width joiner"},
      {0x20AC, CharClass::kOther, "euro sign"},
      {0xFEFF, CharClass::kOther, "byte order mark"},
      {0x1F642, CharClass::kOther, "slightly smiling face"},
      {0xE000, CharClass::kOther, "private use"},
      {0xD800, CharClass::kOther, "surrogate"},
      {0x10FFFF, CharClass::kOther, "last code point"},
      {0x110000, CharClass::kOther, "beyond Unicode"},
      {0xFFFFFFFF, CharClass::kOther, "far beyond Unicode"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ClassifyCodepoint(c.cp), c.cls) << c.what;
  }
}

TEST(UnicodeClassTest, LookupAgreesWithLinearScanEverywhere) {
  const auto ranges = UnicodeClassRanges();
  size_t next = 0;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    while (next < ranges.size() && ranges[next].last < cp) ++next;
    const CharClass want =
        next < ranges.size() && ranges[next].first <= cp ? ranges[next].cls : CharClass::kOther;
    if (ClassifyCodepoint(cp) != want) {
      FAIL() << "U+" << std::hex << static_cast<uint32_t>(cp);
    }
  }
}

TEST(Utf8Test, DecodesEveryScalarValue) {
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string s = EncodeUtf8(cp);
    const Utf8Char ch = DecodeUtf8(s, 0);
    if (!ch.valid || ch.codepoint != cp || ch.length != s.size()) {
      FAIL() << "U+" << std::hex << static_cast<uint32_t>(cp);
    }
  }
}

TEST(Utf8Test, RejectsInvalidSequencesOneByteAtATime) {
  const std::string_view invalid[] = {
      "\x80",              // stray continuation
      "\xBF",              //
      "\xC0\x80",          // overlong NUL
      "\xC1\xBF",          // overlong
      "\xE0\x80\x80",      // overlong 3-byte
      "\xE0\x9F\xBF",      // overlong (U+07FF)
      "\xED\xA0\x80",      // surrogate U+D800
      "\xED\xBF\xBF",      // surrogate U+DFFF
      "\xF0\x8F\xBF\xBF",  // overlong 4-byte
      "\xF4\x90\x80\x80",  // U+110000
      "\xF5\x80\x80\x80",  // lead byte beyond Unicode
      "\xFF",              //
      "\xE4\xB8",          // cut short by the end
      "\xF0\x9F\x99",      // cut short by the end
      "\xE4\x41\x41",      // bad continuation
      "\xC3",              // lone lead byte
  };
  for (std::string_view s : invalid) {
    const Utf8Char ch = DecodeUtf8(s, 0);
    EXPECT_FALSE(ch.valid) << testing::PrintToString(std::string(s));
    EXPECT_EQ(ch.length, 1u);
    EXPECT_EQ(ch.codepoint, 0xFFFDu);
  }
}

TEST(Utf8Test, DecodesAtAnOffset) {
  const std::string_view s = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x99\x82";
  EXPECT_EQ(DecodeUtf8(s, 1).codepoint, 0xE9u);
  EXPECT_EQ(DecodeUtf8(s, 3).codepoint, 0x4E2Du);
  EXPECT_EQ(DecodeUtf8(s, 6).codepoint, 0x1F642u);
  EXPECT_EQ(DecodeUtf8(s, 6).length, 4u);
  EXPECT_FALSE(DecodeUtf8(s, 2).valid);  // inside é
}

}  // namespace
}  // namespace colossal::io
