// Byte-exactness with tiktoken's "gpt2" encoding on the real GPT-2 ranks.
//
// The ranks file is not in the repository: tools/data/fetch_gpt2_ranks.sh
// installs it, and COLOSSAL_GPT2_RANKS must name it, e.g.
//
//   bazel test //io/tokenizer:gpt2_vectors_test
//       --test_env=COLOSSAL_GPT2_RANKS=$HOME/.cache/colossal/data/gpt2.tiktoken
//
// Without it the tests skip and say so. The vectors
// (testdata/gpt2_vectors.json) come from tools/data/make_gpt2_vectors.py.
#include <cstdlib>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "io/tokenizer/tokenizer.h"
#include "io/tokenizer/vectors_check.h"

namespace colossal::io {
namespace {

constexpr char kVectors[] = "io/tokenizer/testdata/gpt2_vectors.json";

class Gpt2VectorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* path = std::getenv("COLOSSAL_GPT2_RANKS");
    if (path == nullptr || *path == '\0') {
      GTEST_SKIP() << "COLOSSAL_GPT2_RANKS is not set: run tools/data/fetch_gpt2_ranks.sh and pass "
                      "--test_env=COLOSSAL_GPT2_RANKS=<the path it prints> to check byte-exactness "
                      "with tiktoken on GPT-2's real ranks";
    }
    absl::StatusOr<Tokenizer> tok = Tokenizer::FromTiktokenFile(path);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::make_unique<Tokenizer>(std::move(tok).value());
  }

  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(Gpt2VectorsTest, VocabularyShape) {
  EXPECT_EQ(tokenizer_->num_ranks(), 50256);
  EXPECT_EQ(tokenizer_->vocab_size(), 50257);
  EXPECT_EQ(tokenizer_->EncodeOrdinary("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(tokenizer_->TokenBytes(50256), "<|endoftext|>");
}

TEST_F(Gpt2VectorsTest, MatchesTiktoken) {
  EXPECT_GT(ExpectTokenizerMatchesVectors(*tokenizer_, kVectors), 300);
}

}  // namespace
}  // namespace colossal::io
