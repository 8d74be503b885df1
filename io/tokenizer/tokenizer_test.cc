#include "io/tokenizer/tokenizer.h"

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "io/common/absl_view.h"
#include "io/tokenizer/vectors_check.h"

namespace colossal::io {
namespace {

constexpr char kTinyTiktoken[] = "io/tokenizer/testdata/tiny.tiktoken";
constexpr char kTinyEncoderJson[] = "io/tokenizer/testdata/tiny_encoder.json";
constexpr char kTinyVocabBpe[] = "io/tokenizer/testdata/tiny_vocab.bpe";
constexpr char kTinyVectors[] = "io/tokenizer/testdata/tiny_vectors.json";

Tokenizer LoadTiny(TokenizerOptions options = {}) {
  absl::StatusOr<Tokenizer> tok = Tokenizer::FromTiktokenFile(kTinyTiktoken, std::move(options));
  EXPECT_TRUE(tok.ok()) << tok.status();
  return std::move(tok).value();
}

// The tokens of `text` as their byte strings.
std::vector<std::string> TokenStrings(const Tokenizer& tok, std::string_view text) {
  std::vector<std::string> out;
  for (int32_t id : tok.EncodeOrdinary(text)) out.emplace_back(tok.TokenBytes(id).value());
  return out;
}

using Strings = std::vector<std::string>;

// The usage example of tokenizer.h, on the tiny vocabulary.
TEST(TokenizerTest, HeaderExample) {
  absl::StatusOr<Tokenizer> tok = Tokenizer::FromTiktokenFile(kTinyTiktoken);
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::vector<int32_t> ids = tok->EncodeOrdinary("hello the");
  EXPECT_EQ(ids, (std::vector<int32_t>{261, 258}));
  absl::StatusOr<std::vector<int32_t>> with_eot = tok->Encode("a<|endoftext|>b", SpecialTokens::kAllow);
  ASSERT_TRUE(with_eot.ok()) << with_eot.status();
  EXPECT_EQ(*with_eot, (std::vector<int32_t>{64, kGpt2EndOfTextId, 65}));
  absl::StatusOr<std::string> text = tok->Decode(ids);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "hello the");
}

TEST(TokenizerTest, MergesFollowRanks) {
  const Tokenizer tok = LoadTiny();
  EXPECT_EQ(TokenStrings(tok, "hello the"), (Strings{"hello", " the"}));
  EXPECT_EQ(TokenStrings(tok, " hello"), (Strings{" hello"}));
  EXPECT_EQ(TokenStrings(tok, "abc"), (Strings{"a", "bc"}));  // "bc" ranks below "ab"
  EXPECT_EQ(TokenStrings(tok, "aaa"), (Strings{"aa", "a"}));  // leftmost on a tie
  EXPECT_EQ(TokenStrings(tok, "aaaa"), (Strings{"aaaa"}));
  EXPECT_EQ(TokenStrings(tok, "aaaaa"), (Strings{"aaaa", "a"}));
  EXPECT_EQ(TokenStrings(tok, "1234"), (Strings{"123", "4"}));
  EXPECT_EQ(TokenStrings(tok, "sing  sing"), (Strings{"s", "ing", " ", " s", "ing"}));
  EXPECT_EQ(TokenStrings(tok, "a!!!b"), (Strings{"a", "!!", "!", "b"}));
  EXPECT_EQ(TokenStrings(tok, "x\n\n\ny"), (Strings{"x", "\n\n", "\n", "y"}));
  EXPECT_EQ(TokenStrings(tok, "it's"), (Strings{"i", "t", "'s"}));
}

TEST(TokenizerTest, BytesWithoutMergesFallBackToSingleByteTokens) {
  const Tokenizer tok = LoadTiny();
  EXPECT_EQ(TokenStrings(tok, "\xE4\xB8\xAD"), (Strings{"\xE4\xB8\xAD"}));  // 中, merged
  EXPECT_EQ(TokenStrings(tok, "\xE4\xB8\xAD\xE6\x96\x87"),                 // 中文: 文 in bytes
            (Strings{"\xE4\xB8\xAD", "\xE6", "\x96", "\x87"}));
  // 🙂: a partial-UTF-8 token then bytes; decoding joins them back.
  EXPECT_EQ(TokenStrings(tok, "\xF0\x9F\x99\x82"), (Strings{"\xF0\x9F", "\x99", "\x82"}));
  EXPECT_EQ(TokenStrings(tok, "\xFF\x80"), (Strings{"\xFF", "\x80"}));  // invalid UTF-8
  EXPECT_TRUE(tok.EncodeOrdinary("").empty());
}

TEST(TokenizerTest, LongPiecesTokenize) {
  const Tokenizer tok = LoadTiny();
  const std::vector<int32_t> ids = tok.EncodeOrdinary(std::string(1000, 'a'));
  ASSERT_EQ(ids.size(), 250u);
  for (int32_t id : ids) EXPECT_EQ(tok.TokenBytes(id), "aaaa");
}

TEST(TokenizerTest, SpecialTokenModes) {
  const Tokenizer tok = LoadTiny();
  const std::string text = "a<|endoftext|>b";
  absl::StatusOr<std::vector<int32_t>> allowed = tok.Encode(text, SpecialTokens::kAllow);
  ASSERT_TRUE(allowed.ok());
  EXPECT_EQ(*allowed, (std::vector<int32_t>{64, 50256, 65}));

  absl::StatusOr<std::vector<int32_t>> as_text = tok.Encode(text, SpecialTokens::kAsText);
  ASSERT_TRUE(as_text.ok());
  EXPECT_EQ(*as_text, tok.EncodeOrdinary(text));
  for (int32_t id : *as_text) EXPECT_NE(id, 50256);
  EXPECT_EQ(tok.Decode(*as_text).value(), text);

  absl::StatusOr<std::vector<int32_t>> rejected = tok.Encode(text, SpecialTokens::kReject);
  ASSERT_FALSE(rejected.ok());
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(rejected.status().message(), "\"<|endoftext|>\" at byte 1")) << rejected.status();
  EXPECT_TRUE(tok.Encode("no special here", SpecialTokens::kReject).ok());

  // Text around a special token is split on its own: the spaces before it
  // end their segment, so they stay one piece.
  absl::StatusOr<std::vector<int32_t>> spaced = tok.Encode("a  <|endoftext|><|endoftext|>", SpecialTokens::kAllow);
  ASSERT_TRUE(spaced.ok());
  EXPECT_EQ(*spaced, (std::vector<int32_t>{64, tok.EncodeOrdinary("  ")[0], 50256, 50256}));
  EXPECT_EQ(tok.EncodeOrdinary("  ").size(), 1u);
}

TEST(TokenizerTest, DecodeAndLookups) {
  const Tokenizer tok = LoadTiny();
  EXPECT_EQ(tok.num_ranks(), 472);
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.special_token_id("<|endoftext|>"), 50256);
  EXPECT_EQ(tok.special_token_id("<|startoftext|>"), std::nullopt);
  EXPECT_EQ(tok.TokenBytes(50256), "<|endoftext|>");
  EXPECT_EQ(tok.TokenBytes(1000), std::nullopt);
  EXPECT_EQ(tok.TokenBytes(-1), std::nullopt);

  const std::vector<uint16_t> shard_ids = {261, 258, 50256};
  EXPECT_EQ(tok.Decode(std::span<const uint16_t>(shard_ids)).value(), "hello the<|endoftext|>");
  for (const int32_t bad : {1000, -1, 50257, 1 << 30}) {
    const std::vector<int32_t> ids = {261, bad};
    absl::StatusOr<std::string> decoded = tok.Decode(ids);
    ASSERT_FALSE(decoded.ok()) << bad;
    EXPECT_TRUE(absl::StrContains(decoded.status().message(), "token id " + std::to_string(bad)))
        << decoded.status();
  }
}

TEST(TokenizerTest, RoundTripsArbitraryBytes) {
  const Tokenizer cached = LoadTiny();
  TokenizerOptions no_cache_options;
  no_cache_options.cache_entries = 0;
  const Tokenizer uncached = LoadTiny(no_cache_options);
  std::mt19937 rng(99);
  for (int round = 0; round < 3000; ++round) {
    std::string text(rng() % 64, '\0');
    for (char& c : text) {
      // Mostly ASCII words and spaces, some high bytes: invalid UTF-8 across tokens.
      const uint32_t r = rng() % 10;
      c = static_cast<char>(r < 6 ? "ab st'\n!1"[rng() % 9] : rng() % 256);
    }
    const std::vector<int32_t> ids = cached.EncodeOrdinary(text);
    ASSERT_EQ(ids, uncached.EncodeOrdinary(text));
    absl::StatusOr<std::string> back = cached.Decode(ids);
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_EQ(*back, text);
  }
}

TEST(TokenizerTest, DataGymFilesGiveTheSameTokenizer) {
  absl::StatusOr<Tokenizer> gym = Tokenizer::FromDataGymFiles(kTinyEncoderJson, kTinyVocabBpe);
  ASSERT_TRUE(gym.ok()) << gym.status();
  EXPECT_EQ(gym->num_ranks(), 472);
  EXPECT_GT(ExpectTokenizerMatchesVectors(*gym, kTinyVectors), 300);
}

// tiktoken's own ids for the tiny vocabulary (tools/data/make_gpt2_vectors.py):
// curated Unicode/whitespace/code cases and random strings whose neighbouring
// characters merge exactly when they share a piece.
TEST(TokenizerTest, MatchesTiktokenOnTinyVocabulary) {
  const Tokenizer tok = LoadTiny();
  EXPECT_GT(ExpectTokenizerMatchesVectors(tok, kTinyVectors), 300);
  TokenizerOptions small_cache;
  small_cache.cache_entries = 16;  // cleared all the time
  EXPECT_GT(ExpectTokenizerMatchesVectors(LoadTiny(small_cache), kTinyVectors), 300);
}

TEST(TokenizerTest, ConcurrentEncodingIsConsistent) {
  TokenizerOptions options;
  options.cache_entries = 64;  // small, so threads keep inserting and clearing
  const Tokenizer tok = LoadTiny(options);
  std::vector<std::string> texts;
  std::mt19937 rng(5);
  for (int i = 0; i < 200; ++i) {
    std::string t;
    for (int j = 0; j < 30; ++j) t += "ab st'\n!1"[rng() % 9];
    texts.push_back(t);
  }
  TokenizerOptions no_cache;
  no_cache.cache_entries = 0;
  const Tokenizer reference = LoadTiny(no_cache);
  std::vector<std::vector<int32_t>> want;
  for (const std::string& t : texts) want.push_back(reference.EncodeOrdinary(t));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          if (tok.EncodeOrdinary(texts[(i + w * 7) % texts.size()]) != want[(i + w * 7) % texts.size()]) {
            ++mismatches[w];
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(TokenizerTest, RanksAreValidated) {
  BpeRanks bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(std::string(1, static_cast<char>(b)), b);
  auto expect_error = [](const BpeRanks& ranks, std::string_view needle, TokenizerOptions options = {}) {
    absl::StatusOr<Tokenizer> tok = Tokenizer::FromRanks(ranks, "mem", std::move(options));
    ASSERT_FALSE(tok.ok()) << needle;
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(tok.status().message(), ToAbsl(needle))) << tok.status();
  };
  ASSERT_TRUE(Tokenizer::FromRanks(bytes, "mem").ok());

  BpeRanks missing(bytes.begin() + 1, bytes.end());
  expect_error(missing, "mem: no token for the single byte 0x00");
  BpeRanks duplicate_token = bytes;
  duplicate_token.emplace_back("a", 300);
  expect_error(duplicate_token, "token \"a\" has two ranks, 97 and 300");
  BpeRanks duplicate_rank = bytes;
  duplicate_rank.emplace_back("ab", 5);
  expect_error(duplicate_rank, "rank 5 is given to two tokens");
  BpeRanks empty_token = bytes;
  empty_token.emplace_back("", 300);
  expect_error(empty_token, "empty token with rank 300");
  BpeRanks negative = bytes;
  negative.emplace_back("ab", -3);
  expect_error(negative, "rank -3 is outside");

  TokenizerOptions colliding;
  colliding.special_tokens = {{"<|endoftext|>", 7}};
  expect_error(bytes, "special token \"<|endoftext|>\" has id 7, already the id of", colliding);
  TokenizerOptions empty_special;
  empty_special.special_tokens = {{"", 300}};
  expect_error(bytes, "empty special token text", empty_special);
  TokenizerOptions twice;
  twice.special_tokens = {{"<s>", 300}, {"<s>", 301}};
  expect_error(bytes, "special token \"<s>\" is listed twice", twice);
}

TEST(TokenizerTest, MissingAndMalformedFilesAreErrors) {
  absl::StatusOr<Tokenizer> missing = Tokenizer::FromTiktokenFile("/nonexistent/gpt2.tiktoken");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  // encoder.json given where the ranks file belongs: line 1 is "{".
  absl::StatusOr<Tokenizer> wrong = Tokenizer::FromTiktokenFile(kTinyEncoderJson);
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(absl::StrContains(wrong.status().message(), "tiny_encoder.json:1: expected")) << wrong.status();
}

}  // namespace
}  // namespace colossal::io
