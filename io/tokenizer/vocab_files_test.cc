#include "io/tokenizer/vocab_files.h"

#include <algorithm>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "io/common/absl_view.h"

namespace colossal::io {
namespace {

constexpr char kTinyTiktoken[] = "io/tokenizer/testdata/tiny.tiktoken";
constexpr char kTinyEncoderJson[] = "io/tokenizer/testdata/tiny_encoder.json";
constexpr char kTinyVocabBpe[] = "io/tokenizer/testdata/tiny_vocab.bpe";

// Expects an InvalidArgument error whose message contains `needle`.
void ExpectInvalid(const absl::StatusOr<BpeRanks>& result, std::string_view needle) {
  ASSERT_FALSE(result.ok()) << "expected an error containing: " << needle;
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_TRUE(absl::StrContains(result.status().message(), ToAbsl(needle))) << result.status();
}

TEST(TiktokenRanksTest, ParsesLinesAndSkipsBlankOnes) {
  absl::StatusOr<BpeRanks> ranks = ParseTiktokenRanks("IQ== 0\r\n\nIGhlbGxv 7\n", "mem");
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  EXPECT_EQ(*ranks, (BpeRanks{{"!", 0}, {" hello", 7}}));
}

TEST(TiktokenRanksTest, MalformedLinesNameFileAndLine) {
  ExpectInvalid(ParseTiktokenRanks("IQ== 0\nIg==\n", "r.tiktoken"), "r.tiktoken:2: expected '<base64 token> <rank>'");
  ExpectInvalid(ParseTiktokenRanks("IQ== 0 9\n", "r.tiktoken"), "r.tiktoken:1: expected");
  ExpectInvalid(ParseTiktokenRanks("IQ== 0\n\n!!!! 1\n", "r.tiktoken"), "r.tiktoken:3: token '!!!!' is not");
  ExpectInvalid(ParseTiktokenRanks("IQ== x1\n", "r.tiktoken"), "r.tiktoken:1: rank 'x1' is not an integer");
  ExpectInvalid(ParseTiktokenRanks("IQ== -1\n", "r.tiktoken"), "rank '-1'");
  ExpectInvalid(ParseTiktokenRanks("IQ== 99999999999\n", "r.tiktoken"), "rank '99999999999'");
  ExpectInvalid(ParseTiktokenRanks("", "r.tiktoken"), "r.tiktoken: no ranks");
  ExpectInvalid(ParseTiktokenRanks("\n\n", "r.tiktoken"), "no ranks");
}

TEST(TiktokenRanksTest, MissingFileIsNotFoundAndNamesIt) {
  absl::StatusOr<BpeRanks> ranks = ReadTiktokenRanks("/nonexistent/gpt2.tiktoken");
  ASSERT_FALSE(ranks.ok());
  EXPECT_EQ(ranks.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(ranks.status().message(), "/nonexistent/gpt2.tiktoken")) << ranks.status();
}

TEST(TiktokenRanksTest, ReadsTheTinyVocabulary) {
  absl::StatusOr<BpeRanks> ranks = ReadTiktokenRanks(kTinyTiktoken);
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  EXPECT_EQ(ranks->size(), 472u);
  EXPECT_EQ(ranks->front(), (std::pair<std::string, int32_t>{"!", 0}));
}

TEST(DataGymRanksTest, GivesTheSameRanksAsTheTiktokenFile) {
  absl::StatusOr<BpeRanks> gym = ReadDataGymRanks(kTinyEncoderJson, kTinyVocabBpe);
  ASSERT_TRUE(gym.ok()) << gym.status();
  absl::StatusOr<BpeRanks> tiktoken = ReadTiktokenRanks(kTinyTiktoken);
  ASSERT_TRUE(tiktoken.ok()) << tiktoken.status();
  std::sort(gym->begin(), gym->end());
  std::sort(tiktoken->begin(), tiktoken->end());
  EXPECT_EQ(*gym, *tiktoken);
}

// A minimal consistent pair: the 256 bytes, then merges "h e" -> 256 and
// "Ġ he" -> 257 (" he").
std::string EncoderJsonWith(const std::string& extra) {
  std::string json = "{";
  int rank = 0;  // base ranks follow the stand-ins' order: printable bytes first
  for (char32_t cp = 0; cp < 0x144; ++cp) {
    std::optional<uint8_t> byte = Gpt2UnicodeToByte(cp);
    if (!byte) continue;
    std::string key = Gpt2ByteEncode(std::string(1, static_cast<char>(*byte)));
    if (key == "\"" || key == "\\") key = "\\" + key;
    json += "\"" + key + "\": " + std::to_string(rank++) + ", ";
  }
  return json + "\"he\": 256, \"\xC4\xA0he\": 257, \"<|endoftext|>\": 258" + extra + "}";
}
constexpr char kVocabBpe[] = "#version: 0.2\nh e\n\xC4\xA0 he\n";

TEST(DataGymRanksTest, BuildsRanksFromMerges) {
  absl::StatusOr<BpeRanks> ranks = ParseDataGymRanks(EncoderJsonWith(""), "encoder.json", kVocabBpe, "vocab.bpe");
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  ASSERT_EQ(ranks->size(), 258u);
  EXPECT_EQ((*ranks)[0], (std::pair<std::string, int32_t>{"!", 0}));
  EXPECT_EQ((*ranks)[256], (std::pair<std::string, int32_t>{"he", 256}));
  EXPECT_EQ((*ranks)[257], (std::pair<std::string, int32_t>{" he", 257}));
}

TEST(DataGymRanksTest, ReportsBadMergesWithLineNumbers) {
  const std::string json = EncoderJsonWith("");
  ExpectInvalid(ParseDataGymRanks(json, "e.json", "#version: 0.2\nh e x\n", "v.bpe"),
                "v.bpe:2: expected a merge '<left> <right>'");
  ExpectInvalid(ParseDataGymRanks(json, "e.json", "#version: 0.2\nh\n", "v.bpe"), "v.bpe:2: expected a merge");
  ExpectInvalid(ParseDataGymRanks(json, "e.json", "#version: 0.2\nh \xE4\xB8\xAD\n", "v.bpe"),
                "v.bpe:2: U+4E2D");
  ExpectInvalid(ParseDataGymRanks(json, "e.json", "#version: 0.2\nh e\nh e\n", "v.bpe"),
                "v.bpe:3: merge \"h e\" makes the same token as line 2");
}

TEST(DataGymRanksTest, EncoderJsonMustAgreeWithMerges) {
  ExpectInvalid(ParseDataGymRanks("{\"a\": 1,\n \"b\" 2}", "e.json", kVocabBpe, "v.bpe"), "e.json:2: invalid JSON");
  ExpectInvalid(ParseDataGymRanks("[1, 2]", "e.json", kVocabBpe, "v.bpe"), "e.json: expected a JSON object");
  // One merge fewer than encoder.json lists.
  ExpectInvalid(ParseDataGymRanks(EncoderJsonWith(""), "e.json", "#version: 0.2\nh e\n", "v.bpe"),
                "\"\xC4\xA0he\" has id 257 but no merge makes it");
  // One merge more.
  ExpectInvalid(ParseDataGymRanks(EncoderJsonWith(""), "e.json", "#version: 0.2\nh e\n\xC4\xA0 he\nx y\n", "v.bpe"),
                "e.json has 258 tokens but v.bpe makes 259");
  // Swapped ids.
  std::string swapped = EncoderJsonWith("");
  swapped.replace(swapped.find("\"he\": 256"), 9, "\"he\": 999");
  ExpectInvalid(ParseDataGymRanks(swapped, "e.json", kVocabBpe, "v.bpe"), "\"he\" has id 999 but rank 256");
  ExpectInvalid(ParseDataGymRanks(EncoderJsonWith(", \"zz\": \"x\""), "e.json", kVocabBpe, "v.bpe"),
                "the id of \"zz\" is not an integer");
}

TEST(DataGymRanksTest, MissingFilesAreNamed) {
  absl::StatusOr<BpeRanks> ranks = ReadDataGymRanks("/nonexistent/encoder.json", kTinyVocabBpe);
  ASSERT_FALSE(ranks.ok());
  EXPECT_EQ(ranks.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(ranks.status().message(), "/nonexistent/encoder.json"));
}

TEST(ByteEncoderTest, MatchesGpt2) {
  EXPECT_EQ(Gpt2ByteToUnicode(' '), U'\u0120');   // 'Ġ'
  EXPECT_EQ(Gpt2ByteToUnicode('\n'), U'\u010A');  // 'Ċ'
  EXPECT_EQ(Gpt2ByteToUnicode(0x00), U'\u0100');
  EXPECT_EQ(Gpt2ByteToUnicode('!'), U'!');
  EXPECT_EQ(Gpt2ByteToUnicode('~'), U'~');
  EXPECT_EQ(Gpt2ByteToUnicode(0x7F), U'\u0121');
  EXPECT_EQ(Gpt2ByteToUnicode(0xA0), U'\u0142');
  EXPECT_EQ(Gpt2ByteToUnicode(0xAD), U'\u0143');
  EXPECT_EQ(Gpt2ByteToUnicode(0xFF), U'\u00FF');
  EXPECT_EQ(Gpt2ByteEncode(" hello\n"), "\xC4\xA0hello\xC4\x8A");
}

TEST(ByteEncoderTest, RoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) {
    all += static_cast<char>(b);
    EXPECT_EQ(Gpt2UnicodeToByte(Gpt2ByteToUnicode(static_cast<uint8_t>(b))), b);
  }
  absl::StatusOr<std::string> back = Gpt2ByteDecode(Gpt2ByteEncode(all));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, all);
}

TEST(ByteEncoderTest, DecodeRejectsWhatNoByteStandsFor) {
  EXPECT_FALSE(Gpt2UnicodeToByte(U' ').has_value());  // space itself stands for nothing
  EXPECT_FALSE(Gpt2UnicodeToByte(U'\u0144').has_value());
  absl::StatusOr<std::string> bad = Gpt2ByteDecode("x\xE4\xB8\xAD");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "U+4E2D")) << bad.status();
  EXPECT_FALSE(Gpt2ByteDecode("x\xFF").ok());
}

}  // namespace
}  // namespace colossal::io
