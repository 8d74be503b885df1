#include "io/prepare/split_writer.h"

#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "io/prepare/test_util.h"
#include "io/shards/token_shard.h"

namespace colossal::io {
namespace {

std::vector<uint16_t> ShardTokens(const std::string& path) {
  absl::StatusOr<TokenShard> shard = TokenShard::Open(path);
  EXPECT_TRUE(shard.ok()) << shard.status();
  if (!shard.ok()) return {};
  return std::vector<uint16_t>(shard->tokens16().begin(), shard->tokens16().end());
}

// The usage example of split_writer.h, with 10-token shards.
TEST(SplitWriterTest, FillsShardsOfExactlyShardTokens) {
  const std::string dir = testing::MakeTestDir();
  SplitWriter train(dir, "data", "train", 10);
  std::vector<int32_t> ids(25);
  std::iota(ids.begin(), ids.end(), 100);
  absl::Status s = train.Append(std::span<const int32_t>(ids).first(7));  // straddles shards
  if (s.ok()) s = train.Append(std::span<const int32_t>(ids).subspan(7));
  if (s.ok()) s = train.Finish();
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(train.shards().size(), 3u);
  EXPECT_EQ(train.shards()[0].file, "data_train_000000.bin");
  EXPECT_EQ(train.shards()[2].file, "data_train_000002.bin");
  EXPECT_EQ(train.shards()[0].split, "train");
  EXPECT_EQ(train.shards()[1].tokens, 10);
  EXPECT_EQ(train.shards()[2].tokens, 5);
  EXPECT_EQ(train.tokens(), 25);
  std::vector<uint16_t> all;
  for (const PreparedShard& shard : train.shards()) {
    std::vector<uint16_t> part = ShardTokens(dir + "/" + shard.file);
    all.insert(all.end(), part.begin(), part.end());
  }
  EXPECT_EQ(all, std::vector<uint16_t>(ids.begin(), ids.end()));
  EXPECT_EQ(testing::ListDir(dir),
            (std::vector<std::string>{"data_train_000000.bin", "data_train_000001.bin", "data_train_000002.bin"}));
}

TEST(SplitWriterTest, NoTokensNoFiles) {
  const std::string dir = testing::MakeTestDir();
  SplitWriter val(dir, "data", "val", 10);
  ASSERT_TRUE(val.Append({}).ok());
  ASSERT_TRUE(val.Finish().ok());
  EXPECT_TRUE(val.shards().empty());
  EXPECT_TRUE(testing::ListDir(dir).empty());
  // An exact multiple closes the last shard with no empty one after it.
  SplitWriter exact(dir, "x", "train", 5);
  const std::vector<int32_t> ids(10, 7);
  ASSERT_TRUE(exact.Append(ids).ok());
  ASSERT_TRUE(exact.Finish().ok());
  EXPECT_EQ(exact.shards().size(), 2u);
}

TEST(SplitWriterTest, ErrorsNameTheShard) {
  SplitWriter out("/nonexistent/folder", "data", "train", 10);
  const std::vector<int32_t> ids = {1, 2};
  absl::Status s = out.Append(ids);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), "/nonexistent/folder/data_train_000000.bin")) << s;
  SplitWriter big(testing::MakeTestDir(), "data", "train", 10);
  const std::vector<int32_t> too_large = {70000};
  EXPECT_EQ(big.Append(too_large).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace colossal::io
