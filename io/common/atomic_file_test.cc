#include "io/common/atomic_file.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "io/common/file_util.h"

namespace colossal::io {
namespace {

std::string MakeTestDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(base != nullptr ? base : "/tmp") + "/" +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name();
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

// The usage example of atomic_file.h.
TEST(AtomicFileTest, FileAppearsOnlyAtCommit) {
  const std::string dir = MakeTestDir();
  const std::string path = dir + "/model.safetensors";
  absl::StatusOr<AtomicFileWriter> out = AtomicFileWriter::Create(path);
  ASSERT_TRUE(out.ok()) << out.status();
  const std::string header = "header";
  const std::vector<float> weights(1000, 1.5f);
  absl::Status s = out->Write(header.data(), header.size());
  if (s.ok()) s = out->Write(weights.data(), weights.size() * sizeof(float));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out->bytes_written(), header.size() + 4000);
  std::vector<std::string> names = ListDir(dir);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(names[0], "model.safetensors.tmp.")) << names[0];
  ASSERT_TRUE(out->Commit().ok());
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"model.safetensors"});
  absl::StatusOr<std::string> read = ReadFileToString(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->size(), header.size() + 4000);
  EXPECT_EQ(read->substr(0, header.size()), header);
  // Finished writers refuse more work.
  EXPECT_EQ(out->Write("x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(out->Commit().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(AtomicFileTest, ReplacesAndAbandons) {
  const std::string dir = MakeTestDir();
  const std::string path = dir + "/manifest.json";
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "second").ok());
  EXPECT_EQ(*ReadFileToString(path), "second");
  {
    absl::StatusOr<AtomicFileWriter> out = AtomicFileWriter::Create(path);
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(out->Write("never committed").ok());
    AtomicFileWriter moved = std::move(out).value();  // moving keeps one owner of the temp file
  }
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"manifest.json"});
  EXPECT_EQ(*ReadFileToString(path), "second");
}

// WriteAt overwrites what was written (a header known at the end), never past it.
TEST(AtomicFileTest, WriteAtOverwritesWrittenBytes) {
  const std::string path = MakeTestDir() + "/shard.bin";
  absl::StatusOr<AtomicFileWriter> out = AtomicFileWriter::Create(path);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(out->Write("0000body").ok());
  EXPECT_EQ(out->WriteAt(6, "xyz", 3).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(out->WriteAt(0, "HEAD", 4).ok());
  EXPECT_EQ(out->bytes_written(), 8u);
  ASSERT_TRUE(out->Commit().ok());
  EXPECT_EQ(*ReadFileToString(path), "HEADbody");
}

TEST(AtomicFileTest, ErrorsNameTheDestination) {
  absl::StatusOr<AtomicFileWriter> out = AtomicFileWriter::Create("/nonexistent/folder/out.bin");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(out.status().message(), "/nonexistent/folder/out.bin")) << out.status();
  absl::Status s = WriteFileAtomically("/nonexistent/x.json", "{}");
  EXPECT_TRUE(absl::StrContains(s.message(), "/nonexistent/x.json")) << s;
}

}  // namespace
}  // namespace colossal::io
