#include "io/tokenizer/nfc.h"

#include <string>
#include <string_view>

#include "gtest/gtest.h"

namespace colossal::io {
namespace {

std::string Nfc(std::string_view text) {
  std::string scratch = "poison";
  return std::string(ToNfc(text, &scratch));
}

TEST(NfcTest, ComposesWhatDecomposes) {
  EXPECT_EQ(Nfc("cafe\u0301"), "caf\u00e9");
  EXPECT_EQ(Nfc("E\u0301TE\u0301"), "\u00c9T\u00c9");
  // Hangul jamo compose to syllables (algorithmically, not by table).
  EXPECT_EQ(Nfc("\u1100\u1161\u11a8"), "\uac01");
  // Singletons map to their canonical equivalents.
  EXPECT_EQ(Nfc("\u212b"), "\u00c5");
  EXPECT_EQ(Nfc("\u2126"), "\u03a9");
  // Combining marks of different classes reorder, then compose.
  EXPECT_EQ(Nfc("a\u0302\u0323"), "\u1ead");
  EXPECT_EQ(Nfc("a\u0323\u0302"), "\u1ead");
}

TEST(NfcTest, LeavesNfcTextAndCompatibilityCharactersAlone) {
  for (std::string_view text : {"caf\u00e9", "\ufb01 \u2460 \uff21 \u00b2", "\u65e5\u672c\u8a9e \U0001F642",
                                "\u0301 lone mark first"}) {
    EXPECT_EQ(Nfc(text), std::string(text));
  }
}

TEST(NfcTest, TextWithNothingFromU0300IsTheSameView) {
  // Latin-1 letters and stray bytes below 0xCC (0xFF would take the slow path).
  const std::string text = "plain ASCII, Latin-1 \u00e9\u00fc\u00df, and bytes \x80\xC3";
  std::string scratch = "untouched";
  const std::string_view out = ToNfc(text, &scratch);
  EXPECT_EQ(out.data(), text.data());
  EXPECT_EQ(out.size(), text.size());
  EXPECT_EQ(scratch, "untouched");
}

TEST(NfcTest, InvalidBytesStayAndTextAroundThemIsNormalized) {
  // A stray continuation byte, a lead byte cut short, and 0xFF around
  // decomposed letters; the NUL byte is text like any other.
  const std::string text = std::string("e\u0301\x80") + "o\u0308\xE2\x82" + std::string("\0", 1) + "\xFFu\u0308";
  const std::string expected = std::string("\u00e9\x80") + "\u00f6\xE2\x82" + std::string("\0", 1) + "\xFF\u00fc";
  EXPECT_EQ(Nfc(text), expected);
}

TEST(NfcTest, IsIdempotent) {
  const std::string once = Nfc("a\u0323\u0302 \u1100\u1161\u11a8 cafe\u0301 \u212b\x80");
  EXPECT_EQ(Nfc(once), once);
}

}  // namespace
}  // namespace colossal::io
