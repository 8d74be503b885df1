#include "io/shards/token_shard.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace colossal::io {
namespace {

// A fresh empty folder per test under TEST_TMPDIR.
std::string MakeTestDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/",
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string ReadAll(const std::string& path) {
  std::string out;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    std::fclose(f);
  }
  return out;
}

void WriteRaw(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
}

// Bytes of a shard built by hand, the way llm.c's write_datafile does:
// np.zeros(256, int32) header, then tokens as uint16 (or uint32 for "llama-3").
template <typename T>
std::string RawShard(int32_t magic, int32_t version, int32_t count, const std::vector<T>& tokens) {
  int32_t header[256] = {};
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::string bytes(reinterpret_cast<const char*>(header), sizeof(header));
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(T));
  return bytes;
}
std::string RawShard(int32_t magic, int32_t version, int32_t count, const std::vector<uint16_t>& tokens) {
  return RawShard<uint16_t>(magic, version, count, tokens);
}

std::vector<int32_t> AllTokens(const TokenShard& shard) {
  std::vector<int32_t> ids(static_cast<size_t>(shard.num_tokens()));
  shard.CopyTokens(0, shard.num_tokens(), ids.data());
  return ids;
}

void ExpectOpenError(const std::string& path, absl::StatusCode code, std::string_view needle) {
  absl::StatusOr<TokenShard> shard = TokenShard::Open(path);
  ASSERT_FALSE(shard.ok()) << "expected an error for " << path;
  EXPECT_EQ(shard.status().code(), code) << shard.status();
  EXPECT_TRUE(absl::StrContains(shard.status().message(), path)) << shard.status();
  EXPECT_TRUE(absl::StrContains(shard.status().message(), absl::string_view(needle.data(), needle.size())))
      << shard.status() << "\n  expected to contain: " << needle;
}

// The usage example of token_shard.h.
TEST(TokenShardTest, HeaderExample) {
  const std::string path = MakeTestDir() + "/train_000000.bin";
  const std::vector<int32_t> ids = {15496, 995, 50256};
  absl::StatusOr<TokenShardWriter> writer = TokenShardWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  absl::Status s = writer->Append(ids);
  if (s.ok()) s = writer->Finish();
  ASSERT_TRUE(s.ok()) << s;

  absl::StatusOr<TokenShard> shard = TokenShard::Open(path);
  ASSERT_TRUE(shard.ok()) << shard.status();
  std::span<const uint16_t> tokens = shard->tokens16();
  EXPECT_EQ(std::vector<uint16_t>(tokens.begin(), tokens.end()), (std::vector<uint16_t>{15496, 995, 50256}));
  EXPECT_EQ(AllTokens(*shard), ids);
  EXPECT_EQ(shard->width(), TokenWidth::kUint16);
  EXPECT_TRUE(shard->tokens32().empty());
  EXPECT_EQ(shard->path(), path);
}

TEST(TokenShardTest, WritesLlmcBytesExactly) {
  const std::string path = MakeTestDir() + "/shard.bin";
  const std::vector<uint16_t> tokens = {0, 1, 50256, 65535, 42};
  ASSERT_TRUE(WriteTokenShard(path, tokens).ok());
  EXPECT_EQ(ReadAll(path), RawShard(20240520, 1, 5, tokens));
}

TEST(TokenShardTest, ReadsAShardWrittenByHand) {
  const std::string path = MakeTestDir() + "/llmc.bin";
  std::vector<uint16_t> tokens(1000);
  std::iota(tokens.begin(), tokens.end(), 60000);  // wraps past 65535
  WriteRaw(path, RawShard(20240520, 1, 1000, tokens));
  absl::StatusOr<TokenShard> shard = TokenShard::Open(path);
  ASSERT_TRUE(shard.ok()) << shard.status();
  ASSERT_EQ(shard->num_tokens(), 1000);
  EXPECT_EQ(std::vector<uint16_t>(shard->tokens16().begin(), shard->tokens16().end()), tokens);
  EXPECT_EQ(shard->token(999), tokens[999]);
}

TEST(TokenShardTest, EmptyShardRoundTrips) {
  const std::string path = MakeTestDir() + "/empty.bin";
  ASSERT_TRUE(WriteTokenShard(path, {}).ok());
  EXPECT_EQ(ReadAll(path).size(), kTokenShardHeaderBytes);
  absl::StatusOr<TokenShard> shard = TokenShard::Open(path);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(shard->num_tokens(), 0);
  EXPECT_TRUE(shard->tokens16().empty());
}

TEST(TokenShardTest, StreamingWriterMatchesOneShot) {
  const std::string dir = MakeTestDir();
  std::vector<uint16_t> tokens(3'000'000);  // several writer buffers
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i * 2654435761u >> 16);
  ASSERT_TRUE(WriteTokenShard(dir + "/one.bin", tokens).ok());

  absl::StatusOr<TokenShardWriter> writer = TokenShardWriter::Create(dir + "/many.bin");
  ASSERT_TRUE(writer.ok()) << writer.status();
  size_t pos = 0;
  for (size_t step = 1; pos < tokens.size(); step = step * 3 + 1) {
    const size_t n = std::min(step, tokens.size() - pos);
    if (pos % 2 == 0) {
      ASSERT_TRUE(writer->Append(std::span<const uint16_t>(tokens).subspan(pos, n)).ok());
    } else {
      const std::vector<int32_t> ids(tokens.begin() + pos, tokens.begin() + pos + n);
      ASSERT_TRUE(writer->Append(ids).ok());
    }
    pos += n;
  }
  EXPECT_EQ(writer->num_tokens(), static_cast<int64_t>(tokens.size()));
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_EQ(ReadAll(dir + "/one.bin"), ReadAll(dir + "/many.bin"));
  EXPECT_EQ(ListDir(dir), (std::vector<std::string>{"many.bin", "one.bin"}));  // no temporary files left
}

TEST(TokenShardTest, IdsOutsideUint16AreRejectedWhole) {
  const std::string path = MakeTestDir() + "/ids.bin";
  absl::StatusOr<TokenShardWriter> writer = TokenShardWriter::Create(path);
  ASSERT_TRUE(writer.ok());
  const std::vector<int32_t> too_big = {1, 2, 65536, 3};
  absl::Status s = writer->Append(too_big);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "id 65536 at index 2")) << s;
  const std::vector<int32_t> negative = {-1};
  EXPECT_TRUE(absl::StrContains(writer->Append(negative).message(), "id -1 at index 0"));
  EXPECT_EQ(writer->num_tokens(), 0);  // nothing was appended
  const std::vector<int32_t> fine = {7, 65535};
  ASSERT_TRUE(writer->Append(fine).ok());
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_EQ(ReadAll(path), RawShard(20240520, 1, 2, {7, 65535}));
}

TEST(TokenShardTest, DestinationAppearsOnlyAtFinish) {
  const std::string dir = MakeTestDir();
  const std::string path = dir + "/shard.bin";
  WriteRaw(path, RawShard(20240520, 1, 1, {9}));  // an older version of the shard
  absl::StatusOr<TokenShardWriter> writer = TokenShardWriter::Create(path);
  ASSERT_TRUE(writer.ok());
  const std::vector<uint16_t> tokens = {1, 2, 3};
  ASSERT_TRUE(writer->Append(tokens).ok());
  EXPECT_EQ(ReadAll(path), RawShard(20240520, 1, 1, {9}));  // still the old one
  EXPECT_EQ(ListDir(dir).size(), 2u);                       // plus the temporary file
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_EQ(ReadAll(path), RawShard(20240520, 1, 3, tokens));
  EXPECT_EQ(ListDir(dir), (std::vector<std::string>{"shard.bin"}));

  EXPECT_EQ(writer->Append(tokens).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(writer->Finish().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TokenShardTest, AbandonedWriterLeavesNothing) {
  const std::string dir = MakeTestDir();
  {
    absl::StatusOr<TokenShardWriter> writer = TokenShardWriter::Create(dir + "/never.bin");
    ASSERT_TRUE(writer.ok());
    const std::vector<uint16_t> tokens(100000, 5);
    ASSERT_TRUE(writer->Append(tokens).ok());
    // Moving keeps one owner of the temporary file.
    TokenShardWriter moved = std::move(writer).value();
    EXPECT_EQ(moved.num_tokens(), 100000);
  }
  EXPECT_TRUE(ListDir(dir).empty());
}

TEST(TokenShardTest, CreateInAMissingFolderFails) {
  absl::Status s = WriteTokenShard("/nonexistent/dir/shard.bin", {});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(s.message(), "/nonexistent/dir/shard.bin")) << s;
}

TEST(TokenShardTest, CorruptFilesGiveClearErrors) {
  const std::string dir = MakeTestDir();
  const std::vector<uint16_t> ten(10, 7);
  struct Case {
    const char* name;
    std::string bytes;
    absl::StatusCode code;
    const char* needle;
  };
  const Case cases[] = {
      {"empty.bin", "", absl::StatusCode::kDataLoss, "has 0 bytes, fewer than its 1024-byte header"},
      {"short.bin", std::string(100, '\0'), absl::StatusCode::kDataLoss, "has 100 bytes"},
      {"magic.bin", RawShard(12345, 1, 10, ten), absl::StatusCode::kInvalidArgument,
       "bad magic 12345, expected 20240520 or 20240801 (not an llm.c token shard)"},
      {"llama3_version.bin", RawShard(20240801, 1, 5, ten), absl::StatusCode::kInvalidArgument,
       "unsupported version 1 for llm.c's Llama 3 magic 20240801, expected 7 (uint32 tokens)"},
      {"version.bin", RawShard(20240520, 2, 10, ten), absl::StatusCode::kInvalidArgument,
       "unsupported version 2, expected 1 for magic 20240520 (uint16 tokens; llm.c's uint32 shards have magic "
       "20240801 and version 7)"},
      {"llama3_extra.bin", RawShard(20240801, 7, 4, ten) + "xyz", absl::StatusCode::kDataLoss,
       "the header says 4 uint32 tokens (16 bytes after the header) but the file has 23 (5 tokens and 3 bytes)"},
      {"negative.bin", RawShard(20240520, 1, -4, ten), absl::StatusCode::kInvalidArgument,
       "negative token count -4"},
      {"truncated.bin", RawShard(20240520, 1, 11, ten), absl::StatusCode::kDataLoss,
       "is truncated: the header says 11 uint16 tokens (22 bytes after the header) but the file has 20"},
      {"extra.bin", RawShard(20240520, 1, 9, ten), absl::StatusCode::kDataLoss,
       "token count mismatch: the header says 9 uint16 tokens (18 bytes after the header) but the file has 20 (10 tokens)"},
      {"odd.bin", RawShard(20240520, 1, 10, ten) + "x", absl::StatusCode::kDataLoss, "(10 tokens and an odd byte)"},
      {"text.bin", std::string(2000, 'a'), absl::StatusCode::kInvalidArgument, "bad magic 1633771873"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir + "/" + c.name;
    WriteRaw(path, c.bytes);
    ExpectOpenError(path, c.code, c.needle);
  }
}

TEST(TokenShardTest, UnopenableFiles) {
  ExpectOpenError("/nonexistent/shard.bin", absl::StatusCode::kNotFound, "No such file or directory");
  const std::string dir = MakeTestDir();
  ExpectOpenError(dir, absl::StatusCode::kFailedPrecondition, "is not a regular file");
}

TEST(TokenShardTest, MovingKeepsTheMapping) {
  const std::string path = MakeTestDir() + "/move.bin";
  const std::vector<uint16_t> tokens = {4, 5, 6};
  ASSERT_TRUE(WriteTokenShard(path, tokens).ok());
  absl::StatusOr<TokenShard> opened = TokenShard::Open(path);
  ASSERT_TRUE(opened.ok());
  TokenShard shard = std::move(opened).value();
  const uint16_t* data = shard.tokens16().data();
  TokenShard other = std::move(shard);
  EXPECT_EQ(other.tokens16().data(), data);
  EXPECT_EQ(other.tokens16()[2], 6);
  EXPECT_TRUE(shard.tokens16().empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
  // Assigning over a shard unmaps the old one and takes the new mapping.
  absl::StatusOr<TokenShard> again = TokenShard::Open(path);
  ASSERT_TRUE(again.ok());
  other = std::move(again).value();
  EXPECT_EQ(other.num_tokens(), 3);
}

// --- 32-bit tokens ----------------------------------------------------------

TEST(TokenShardTest, WidthForVocab) {
  EXPECT_EQ(TokenWidthForVocab(50257), TokenWidth::kUint16);
  EXPECT_EQ(TokenWidthForVocab(65536), TokenWidth::kUint16);
  EXPECT_EQ(TokenWidthForVocab(65537), TokenWidth::kUint32);
  EXPECT_EQ(TokenWidthForVocab(128256), TokenWidth::kUint32);
}

// llm.c's data_common.py writes "llama-3" shards with magic 20240801,
// version 7 and uint32 tokens; we write the same bytes.
TEST(TokenShardTest, WritesLlmcLlama3BytesExactly) {
  const std::string path = MakeTestDir() + "/llama3.bin";
  const std::vector<int32_t> ids = {128000, 9906, 1917, 0, 65535, 65536, 128255};
  ASSERT_TRUE(WriteTokenShard(path, ids, TokenWidth::kUint32).ok());
  const std::vector<uint32_t> as_u32(ids.begin(), ids.end());
  EXPECT_EQ(ReadAll(path), RawShard<uint32_t>(20240801, 7, 7, as_u32));

  absl::StatusOr<TokenShard> shard = TokenShard::Open(path);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(shard->width(), TokenWidth::kUint32);
  EXPECT_EQ(shard->num_tokens(), 7);
  EXPECT_EQ(AllTokens(*shard), ids);
  EXPECT_EQ(shard->token(6), 128255);
  EXPECT_EQ(std::vector<uint32_t>(shard->tokens32().begin(), shard->tokens32().end()), as_u32);
  EXPECT_TRUE(shard->tokens16().empty());
  std::vector<int32_t> middle(3);
  shard->CopyTokens(3, 3, middle.data());
  EXPECT_EQ(middle, (std::vector<int32_t>{0, 65535, 65536}));
}

TEST(TokenShardTest, Uint16WriterNamesTheIdThatNeedsUint32) {
  const std::string path = MakeTestDir() + "/narrow.bin";
  const std::vector<int32_t> ids = {128000, 9906};
  absl::Status s = WriteTokenShard(path, ids, TokenWidth::kUint16);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "id 128000 at index 0 does not fit in uint16")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "32-bit tokens")) << s;
  EXPECT_TRUE(ListDir(MakeTestDir()).empty());  // the failed writer left nothing
}

TEST(TokenShardTest, Uint32WriterRejectsNegativeIds) {
  absl::StatusOr<TokenShardWriter> writer = TokenShardWriter::Create(MakeTestDir() + "/neg.bin", TokenWidth::kUint32);
  ASSERT_TRUE(writer.ok());
  const std::vector<int32_t> ids = {3, -2};
  EXPECT_TRUE(absl::StrContains(writer->Append(ids).message(), "id -2 at index 1 does not fit in uint32"));
  EXPECT_EQ(writer->num_tokens(), 0);
}

TEST(TokenShardTest, Uint32StreamingMatchesOneShot) {
  const std::string dir = MakeTestDir();
  std::vector<int32_t> ids(700'000);  // several 1 MiB writer buffers
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 2654435761u) % 128256);
  ASSERT_TRUE(WriteTokenShard(dir + "/one.bin", ids, TokenWidth::kUint32).ok());
  absl::StatusOr<TokenShardWriter> writer = TokenShardWriter::Create(dir + "/many.bin", TokenWidth::kUint32);
  ASSERT_TRUE(writer.ok());
  size_t pos = 0;
  for (size_t step = 1; pos < ids.size(); step = step * 3 + 1) {
    const size_t n = std::min(step, ids.size() - pos);
    ASSERT_TRUE(writer->Append(std::span<const int32_t>(ids).subspan(pos, n)).ok());
    pos += n;
  }
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_EQ(ReadAll(dir + "/one.bin"), ReadAll(dir + "/many.bin"));
  absl::StatusOr<TokenShard> shard = TokenShard::Open(dir + "/many.bin");
  ASSERT_TRUE(shard.ok());
  EXPECT_EQ(AllTokens(*shard), ids);
}

}  // namespace
}  // namespace colossal::io
