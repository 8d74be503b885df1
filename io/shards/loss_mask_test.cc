#include "io/shards/loss_mask.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "io/shards/token_shard.h"

namespace colossal::io {
namespace {

std::string MakeTestDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/loss_mask_",
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

void WriteRaw(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
}

// A mask file built by hand from the format's description.
std::string MaskBytes(int32_t magic, int32_t version, int32_t count, const std::string& values) {
  std::string bytes(kTokenShardHeaderBytes, '\0');
  std::memcpy(bytes.data(), &magic, 4);
  std::memcpy(bytes.data() + 4, &version, 4);
  std::memcpy(bytes.data() + 8, &count, 4);
  return bytes + values;
}

TEST(LossMaskTest, PathBesideTheShard) {
  EXPECT_EQ(LossMaskPathFor("out/data_train_000003.bin"), "out/data_train_000003.mask");
  EXPECT_EQ(LossMaskPathFor("shard"), "shard.mask");
}

TEST(LossMaskTest, WrittenInPiecesReadsBackAndMatchesTheFormat) {
  const std::string path = MakeTestDir() + "/a.mask";
  std::mt19937 rng(7);
  std::vector<uint8_t> values(3 * 1000 * 1000 + 17);  // past the writer's 1 MiB buffer
  for (uint8_t& v : values) v = rng() & 3;
  absl::StatusOr<LossMaskWriter> w = LossMaskWriter::Create(path);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(w->Append(std::span<const uint8_t>(values).first(5)).ok());
  ASSERT_TRUE(w->Append(std::span<const uint8_t>(values).subspan(5)).ok());
  EXPECT_NE(::access(path.c_str(), F_OK), 0) << "visible before Finish";
  ASSERT_TRUE(w->Finish().ok());
  EXPECT_FALSE(w->Append(values).ok());  // finished

  absl::StatusOr<LossMask> m = LossMask::Open(path);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->num_tokens(), static_cast<int64_t>(values.size()));
  EXPECT_TRUE(std::equal(values.begin(), values.end(), m->values().begin()));
  for (int64_t i : {int64_t{0}, int64_t{4}, int64_t{5}, m->num_tokens() - 1}) {
    EXPECT_EQ(m->counted(i), (values[i] & 1) != 0);
    EXPECT_EQ(m->starts_document(i), (values[i] & 2) != 0);
  }
  // The same bytes as the format described in the header, built by hand.
  std::string raw(values.begin(), values.end());
  const std::string expected = MaskBytes(kLossMaskMagic, kLossMaskVersion, static_cast<int32_t>(values.size()), raw);
  FILE* f = std::fopen(path.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  std::string got(expected.size() + 1, '\0');
  got.resize(std::fread(got.data(), 1, got.size(), f));
  std::fclose(f);
  EXPECT_TRUE(got == expected);
  // A move keeps the values where they are.
  LossMask moved = *std::move(m);
  EXPECT_EQ(moved.counted(4), (values[4] & 1) != 0);
  EXPECT_EQ(m->num_tokens(), 0);  // NOLINT(bugprone-use-after-move): moved-from is empty
}

TEST(LossMaskTest, WriterRefusesBitsOtherThanTheFlags) {
  const std::string path = MakeTestDir() + "/b.mask";
  {
    absl::StatusOr<LossMaskWriter> w = LossMaskWriter::Create(path);
    ASSERT_TRUE(w.ok());
    const std::vector<uint8_t> bad = {1, 0, 3, 2, 4};
    absl::Status s = w->Append(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(s.message(), "value 4 at index 4")) << s;
    EXPECT_EQ(w->num_tokens(), 0);
  }  // destroyed unfinished: nothing appears
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
}

TEST(LossMaskTest, OpenChecksTheHeaderTheSizeAndEveryValue) {
  const std::string dir = MakeTestDir();
  struct Case {
    std::string name, bytes;
    absl::StatusCode code;
    std::string says;
  } cases[] = {
      {"token_shard.mask", MaskBytes(kTokenShardMagic, kTokenShardVersion, 2, std::string("\1\0\0\0", 4)),
       absl::StatusCode::kInvalidArgument, "not a colossal loss mask"},
      {"version.mask", MaskBytes(kLossMaskMagic, 2, 1, "\1"), absl::StatusCode::kInvalidArgument, "version 2"},
      {"negative.mask", MaskBytes(kLossMaskMagic, kLossMaskVersion, -1, ""), absl::StatusCode::kInvalidArgument,
       "negative token count -1"},
      {"short.mask", MaskBytes(kLossMaskMagic, kLossMaskVersion, 3, std::string("\1\0", 2)),
       absl::StatusCode::kDataLoss, "(truncated)"},
      {"long.mask", MaskBytes(kLossMaskMagic, kLossMaskVersion, 1, std::string("\1\0", 2)),
       absl::StatusCode::kDataLoss, "has 2 bytes after it"},
      {"value.mask", MaskBytes(kLossMaskMagic, kLossMaskVersion, 3, std::string("\3\0\7", 3)),
       absl::StatusCode::kDataLoss, "value 7 at token 2"},
      {"header.mask", std::string(100, '\0'), absl::StatusCode::kDataLoss, "fewer than its 1024-byte header"},
  };
  for (const Case& c : cases) {
    const std::string path = dir + "/" + c.name;
    WriteRaw(path, c.bytes);
    absl::StatusOr<LossMask> m = LossMask::Open(path);
    ASSERT_FALSE(m.ok()) << c.name;
    EXPECT_EQ(m.status().code(), c.code) << c.name << ": " << m.status();
    EXPECT_TRUE(absl::StrContains(m.status().message(), c.says)) << c.name << ": " << m.status();
    EXPECT_TRUE(absl::StrContains(m.status().message(), path)) << m.status();
  }
  absl::StatusOr<LossMask> missing = LossMask::Open(dir + "/none.mask");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LossMask::Open(dir).status().code(), absl::StatusCode::kFailedPrecondition);  // a folder
}

}  // namespace
}  // namespace colossal::io
