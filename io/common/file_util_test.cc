#include "io/common/file_util.h"

#include <errno.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace colossal::io {
namespace {

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

TEST(FileUtilTest, ReadsWholeFiles) {
  const std::string path = TempDir() + "/read_me.bin";
  std::string contents(200000, '\0');
  for (size_t i = 0; i < contents.size(); ++i) contents[i] = static_cast<char>(i * 31);
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(contents.data(), 1, contents.size(), f), contents.size());
  std::fclose(f);
  absl::StatusOr<std::string> read = ReadFileToString(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, contents);
}

TEST(FileUtilTest, ErrorsNameTheFileAndReason) {
  absl::StatusOr<std::string> missing = ReadFileToString("/nonexistent/file.txt");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "cannot open '/nonexistent/file.txt': No such file or directory");

  absl::StatusOr<std::string> folder = ReadFileToString(TempDir());
  ASSERT_FALSE(folder.ok());
  EXPECT_EQ(folder.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(folder.status().message(), "Is a directory")) << folder.status();
}

TEST(FileUtilTest, ErrnoCodes) {
  EXPECT_EQ(ErrnoStatus(EACCES, "cannot open", "x").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus(ENOSPC, "cannot write", "x").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoStatus(EEXIST, "cannot create", "x").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ErrnoStatus(EIO, "cannot read", "x").code(), absl::StatusCode::kInternal);
}

// Only a path that names nothing: an existing file or folder, or a path
// through a file (ENOTDIR: there, but unusable), is not.
TEST(FileUtilTest, NoSuchPath) {
  const std::string file = TempDir() + "/no_such_path_probe";
  ASSERT_TRUE(std::ofstream(file).good());
  EXPECT_FALSE(NoSuchPath(file));
  EXPECT_FALSE(NoSuchPath(TempDir()));
  EXPECT_TRUE(NoSuchPath(TempDir() + "/absent"));
  EXPECT_FALSE(NoSuchPath(file + "/inside"));
}

TEST(FileUtilTest, TemporaryPathsAreUniqueAndBeside) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string tmp = TemporaryPathFor("/data/shard.bin");
    EXPECT_TRUE(absl::StartsWith(tmp, "/data/shard.bin.tmp.")) << tmp;
    EXPECT_TRUE(seen.insert(tmp).second) << tmp;
  }
}

TEST(FileUtilTest, SyncsParentDirectory) {
  EXPECT_TRUE(SyncParentDirectory(TempDir() + "/anything").ok());
  EXPECT_TRUE(SyncParentDirectory("relative_name").ok());
  EXPECT_EQ(SyncParentDirectory("/nonexistent/dir/x").code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace colossal::io
