#include "io/tokenizer/sentencepiece_tokenizer.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "io/common/file_util.h"
#include "io/tokenizer/load_tokenizer.h"
#include "nlohmann/json.hpp"

namespace colossal::io {
namespace {

constexpr char kModel[] = "io/tokenizer/testdata/spm_tiny/tokenizer.model";

// Ids from the sentencepiece library itself (tools/data/make_llama3_tokenizer_fixture.py).
TEST(SentencePieceTokenizerTest, MatchesTheLibrary) {
  absl::StatusOr<std::unique_ptr<TextTokenizer>> tok = LoadTokenizer(kModel);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "sentencepiece");
  EXPECT_EQ((*tok)->vocab_size(), 700);
  EXPECT_EQ((*tok)->bos_id(), 1);
  EXPECT_EQ((*tok)->eos_id(), 2);
  EXPECT_TRUE((*tok)->adds_bos());
  EXPECT_EQ((*tok)->document_delimiter(), 1);
  absl::StatusOr<std::string> text = ReadFileToString("io/tokenizer/testdata/spm_tiny_vectors.json");
  ASSERT_TRUE(text.ok());
  const nlohmann::json vectors = nlohmann::json::parse(*text);
  int checked = 0;
  for (const nlohmann::json& c : vectors["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string input = c["text"].get<std::string>();
    absl::StatusOr<std::vector<int32_t>> with = (*tok)->Encode(input, true);
    ASSERT_TRUE(with.ok());
    EXPECT_EQ(*with, c["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ((*tok)->EncodeOrdinary(input), c["ids_no_special"].get<std::vector<int32_t>>());
    absl::StatusOr<std::string> decoded = (*tok)->Decode(*with);  // <s> is dropped
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, c["decoded"].get<std::string>());
    EXPECT_EQ(*decoded, input);
    ++checked;
  }
  EXPECT_GE(checked, 8);
  EXPECT_FALSE((*tok)->Decode(std::vector<int32_t>{700}).ok());
}

TEST(SentencePieceTokenizerTest, ConfigTurnsBosOffAndEosOn) {
  TokenizerConfig config;
  config.add_bos_token = false;
  config.add_eos_token = true;
  absl::StatusOr<std::unique_ptr<TextTokenizer>> tok = LoadSentencePiece(kModel, config);
  ASSERT_TRUE(tok.ok()) << tok.status();
  absl::StatusOr<std::vector<int32_t>> ids = (*tok)->Encode("Hello world", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_NE(ids->front(), 1);
  EXPECT_EQ(ids->back(), 2);
  EXPECT_EQ((*tok)->document_delimiter(), 2);  // no BOS: the EOS delimits documents

  config.bos_token = "<nope>";
  absl::StatusOr<std::unique_ptr<TextTokenizer>> bad = LoadSentencePiece(kModel, config);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "bos_token \"<nope>\" is not a piece")) << bad.status();
}

TEST(SentencePieceTokenizerTest, NotAModelNamesTheFile) {
  const std::string path = "io/tokenizer/testdata/llama3_tiny/tokenizer_config.json";
  absl::StatusOr<std::unique_ptr<TextTokenizer>> tok = LoadSentencePiece(path, {});
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(tok.status().message(), path + ": not a SentencePiece model")) << tok.status();
  EXPECT_EQ(LoadSentencePiece("/nonexistent/tokenizer.model", {}).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace colossal::io
