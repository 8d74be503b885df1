#include "io/tokenizer/pretokenizer.h"

#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "io/common/file_util.h"
#include "nlohmann/json.hpp"

namespace colossal::io {
namespace {

using Pieces = std::vector<std::string>;

Pieces Split(std::string_view text) {
  Pieces out;
  for (std::string_view p : SplitGpt2(text)) out.emplace_back(p);
  return out;
}

// Expected pieces come from GPT-2's pattern run by a regex engine with
// Unicode properties (Python's `regex` module).
struct Case {
  const char* name;
  std::string_view text;
  Pieces pieces;
};

class Gpt2SplitTest : public ::testing::TestWithParam<Case> {};

TEST_P(Gpt2SplitTest, MatchesThePattern) {
  const Case& c = GetParam();
  EXPECT_EQ(Split(c.text), c.pieces);
}

const Case kCases[] = {
    {"header_example", "Hello  world's 42!\n", {"Hello", " ", " world", "'s", " 42", "!", "\n"}},
    {"contractions",
     "I'm you'll they've we'd she's can't we're I'M",
     {"I", "'m", " you", "'ll", " they", "'ve", " we", "'d", " she", "'s", " can", "'t", " we", "'re",
      " I", "'", "M"}},
    {"apostrophe_runs", "'s''s 'sx 'l 'll's", {"'s", "''", "s", " '", "sx", " '", "l", " '", "ll", "'s"}},
    {"contraction_at_end", "it'", {"it", "'"}},
    {"contraction_cut", "we'l", {"we", "'", "l"}},
    {"space_runs", "a  b   c\td", {"a", " ", " b", "  ", " c", "\t", "d"}},
    {"space_newline_space", "a \n b", {"a", " \n", " b"}},
    {"double_newline", "x\n\ny", {"x", "\n", "\n", "y"}},
    {"trailing_spaces", "end   ", {"end", "   "}},
    {"only_two_spaces", "  ", {"  "}},
    {"only_one_space", " ", {" "}},
    {"tabs_before_word", "\t\tx", {"\t", "\t", "x"}},
    {"space_tab_word", " \tx", {" ", "\t", "x"}},
    {"unicode_spaces", "a\u00a0b\u3000\u3000c", {"a", "\u00a0", "b", "\u3000", "\u3000", "c"}},
    {"chinese", "你好，世界。", {"你好", "，", "世界", "。"}},
    {"japanese", "日本語のテキスト", {"日本語のテキスト"}},
    {"emoji", "🙂👍🏽 ok 🇫🇷!", {"🙂👍🏽", " ok", " 🇫🇷!"}},
    {"combining_marks", "e\u0301t\u00e9 n\u0303", {"e", "\u0301", "t\u00e9", " n", "\u0303"}},
    {"devanagari", "नमस्ते", {"नमस", "्", "त", "े"}},
    {"numbers", "12345 3.14 ٣٤ ²½ Ⅻ", {"12345", " 3", ".", "14", " ٣٤", " ²½", " Ⅻ"}},
    {"letters_digits", "abc123def", {"abc", "123", "def"}},
    {"python",
     "def f(x):\n    return x**2\n",
     {"def", " f", "(", "x", "):", "\n   ", " return", " x", "**", "2", "\n"}},
    {"c_braces", "if (a) {\n\treturn;\n}", {"if", " (", "a", ")", " {", "\n", "\t", "return", ";", "\n", "}"}},
    {"path", "--flag=value ~/path/to_file.txt",
     {"--", "flag", "=", "value", " ~/", "path", "/", "to", "_", "file", ".", "txt"}},
    {"punct_runs", " !!! ??", {" !!!", " ??"}},
    {"zero_width_space", "zero\u200bwidth", {"zero", "\u200b", "width"}},
    {"empty", "", {}},
};

INSTANTIATE_TEST_SUITE_P(Cases, Gpt2SplitTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Gpt2SplitterTest, InvalidUtf8BytesAreSymbols) {
  // A lone continuation byte and a cut-short character are symbols ("other"),
  // so they join punctuation runs and a preceding space.
  EXPECT_EQ(Split("ab\x80!c"), (Pieces{"ab", "\x80!", "c"}));
  EXPECT_EQ(Split("a \xE4\xB8"), (Pieces{"a", " \xE4\xB8"}));
  EXPECT_EQ(Split("\xFF\xFEx"), (Pieces{"\xFF\xFE", "x"}));
}

TEST(Gpt2SplitterTest, IteratorAndVectorAgree) {
  const std::string_view text = "one  two\n\nthree's 4 5";
  Gpt2Splitter split(text);
  std::vector<std::string_view> pieces;
  std::string_view piece;
  while (split.Next(&piece)) pieces.push_back(piece);
  EXPECT_EQ(pieces, SplitGpt2(text));
  EXPECT_FALSE(split.Next(&piece));
}

// Any bytes split into non-empty pieces that are contiguous views of the input.
TEST(Gpt2SplitterTest, PiecesTileRandomBytes) {
  std::mt19937 rng(7);
  const std::string_view alphabet[] = {"a", "Z", "1", " ", "  ", "\n", "\t", "'", "'s", "!", "\xC3\xA9",
                                       "\xE4\xB8\xAD", "\xF0\x9F\x99\x82", "\xCC\x81", "\xC2\xA0", "\x80",
                                       "\xFF", "\xE4\xB8", "\xE3\x80\x80"};
  for (int round = 0; round < 2000; ++round) {
    std::string text;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) text += alphabet[rng() % std::size(alphabet)];
    const std::vector<std::string_view> pieces = SplitGpt2(text);
    const char* expected_start = text.data();
    for (std::string_view p : pieces) {
      ASSERT_FALSE(p.empty());
      ASSERT_EQ(p.data(), expected_start);
      expected_start += p.size();
    }
    ASSERT_EQ(expected_start, text.data() + text.size());
  }
}

// --- Llama 3 ----------------------------------------------------------------

Pieces SplitL3(std::string_view text) {
  Pieces out;
  for (std::string_view p : SplitLlama3(text)) out.emplace_back(p);
  return out;
}

class Llama3SplitTest : public ::testing::TestWithParam<Case> {};

TEST_P(Llama3SplitTest, MatchesThePattern) {
  const Case& c = GetParam();
  EXPECT_EQ(SplitL3(c.text), c.pieces);
}

// One group per alternative of the pattern; the pieces are what the
// `tokenizers` library's Split (Oniguruma) gives (llama3_split_vectors.json
// has these and more, checked below).
const Case kLlama3Cases[] = {
    // 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
    {"contraction_lower", "it's I'm you're we've I'll he'd", {"it", "'s", " I", "'m", " you", "'re", " we", "'ve", " I", "'ll", " he", "'d"}},
    {"contraction_upper", "IT'S YOU'RE WE'VE I'LL HE'D DON'T", {"IT", "'S", " YOU", "'RE", " WE", "'VE", " I", "'LL", " HE", "'D", " DON", "'T"}},
    {"contraction_mixed_case", "It'S We'Ve x'lL", {"It", "'S", " We", "'Ve", " x", "'lL"}},
    {"contraction_long_s", "it'\u017f '\u017f", {"it", "'\u017f", " '", "\u017f"}},
    {"contraction_cut", "we'l it'", {"we", "'l", " it", "'"}},
    // 2. [^\r\n\p{L}\p{N}]?\p{L}+
    {"letters", "hello world", {"hello", " world"}},
    {"letters_after_symbol", "(hello) .world \"q\"", {"(hello", ")", " .", "world", " \"", "q", "\""}},
    {"letters_after_tab_nbsp", "\ta \u00a0b", {"\ta", " ", "\u00a0b"}},
    {"letters_not_after_newline", "\na\r\nb", {"\n", "a", "\r\n", "b"}},
    {"letters_not_after_digit", "1a", {"1", "a"}},
    // 3. \p{N}{1,3}
    {"digits_by_three", "1234567 12", {"123", "456", "7", " ", "12"}},
    {"digits_unicode", "\u0663\u0664\u0665\u0666 \u00b2\u00bd", {"\u0663\u0664\u0665", "\u0666", " ", "\u00b2\u00bd"}},
    // 4.  ?[^\s\p{L}\p{N}]+[\r\n]*
    {"symbols", "!!! ?? ...", {"!!!", " ??", " ..."}},
    {"symbols_take_newlines", "!\n\n?\r\n.\n x", {"!\n\n", "?\r\n", ".\n", " x"}},
    {"emoji", "\U0001F642\U0001F44D\U0001F3FD ok", {"\U0001F642\U0001F44D\U0001F3FD", " ok"}},
    // 5. \s*[\r\n]+
    {"newline_runs", "a \n \n b", {"a", " \n \n", " b"}},
    {"newlines_alone", "\n\n\r\n", {"\n\n\r\n"}},
    {"newline_then_trailing_spaces", "x\n  ", {"x", "\n", "  "}},
    // 6. \s+(?!\S)  and 7. \s+
    {"spaces_before_word", "a   b", {"a", "  ", " b"}},
    {"spaces_at_end", "end   ", {"end", "   "}},
    {"single_space_before_digit", "a 1", {"a", " ", "1"}},
    {"tabs", "\t\tx\t", {"\t", "\tx", "\t"}},
    {"empty", "", {}},
};

INSTANTIATE_TEST_SUITE_P(Cases, Llama3SplitTest, ::testing::ValuesIn(kLlama3Cases),
                         [](const auto& info) { return std::string(info.param.name); });

// Every case of tools/data/make_llama3_tokenizer_fixture.py: the `tokenizers`
// library's Split with Llama 3's pattern, curated and seeded random texts.
TEST(Llama3SplitterTest, MatchesTokenizersLibrary) {
  absl::StatusOr<std::string> text = ReadFileToString("io/tokenizer/testdata/llama3_split_vectors.json");
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json vectors = nlohmann::json::parse(*text);
  int checked = 0;
  for (const nlohmann::json& c : vectors["cases"]) {
    const std::string input = c["text"].get<std::string>();
    EXPECT_EQ(SplitL3(input), c["pieces"].get<Pieces>()) << c["name"].get<std::string>();
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

// Qwen2's pattern: Llama 3's with one number a piece, against the same
// library's Split (qwen2_split_vectors.json, the same curated texts).
TEST(Qwen2SplitterTest, MatchesTokenizersLibrary) {
  absl::StatusOr<std::string> text = ReadFileToString("io/tokenizer/testdata/qwen2_split_vectors.json");
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json vectors = nlohmann::json::parse(*text);
  int checked = 0;
  int differs_from_llama3 = 0;
  for (const nlohmann::json& c : vectors["cases"]) {
    const std::string input = c["text"].get<std::string>();
    Pieces qwen2;
    for (std::string_view p : SplitQwen2(input)) qwen2.emplace_back(p);
    EXPECT_EQ(qwen2, c["pieces"].get<Pieces>()) << c["name"].get<std::string>();
    differs_from_llama3 += qwen2 != SplitL3(input);
    ++checked;
  }
  EXPECT_GT(checked, 100);
  EXPECT_GT(differs_from_llama3, 5);  // the digit cases, at least
}

TEST(Qwen2SplitterTest, EveryNumberIsAPiece) {
  Pieces pieces;
  for (std::string_view p : SplitQwen2("Hi 2024 x\u0663\u0664")) pieces.emplace_back(p);
  EXPECT_EQ(pieces, (Pieces{"Hi", " ", "2", "0", "2", "4", " x", "\u0663", "\u0664"}));
}

TEST(Llama3SplitterTest, PiecesTileRandomBytes) {
  std::mt19937 rng(11);
  const std::string_view alphabet[] = {"a", "Z", "1", " ", "\r", "\n", "\t", "'", "'S", "!", "\xC3\xA9",
                                       "\xE4\xB8\xAD", "\xF0\x9F\x99\x82", "\xCC\x81", "\xC2\xA0", "\x80",
                                       "\xFF", "\xC5", "\xC5\xBF", "\xE3\x80\x80"};
  for (int round = 0; round < 2000; ++round) {
    std::string text;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) text += alphabet[rng() % std::size(alphabet)];
    const char* expected_start = text.data();
    for (std::string_view p : SplitLlama3(text)) {
      ASSERT_FALSE(p.empty());
      ASSERT_EQ(p.data(), expected_start);
      expected_start += p.size();
    }
    ASSERT_EQ(expected_start, text.data() + text.size());
  }
}

}  // namespace
}  // namespace colossal::io
