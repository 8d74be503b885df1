#include "io/prepare/inputs.h"

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "io/prepare/test_util.h"

namespace colossal::io {
namespace {

using testing::MakeTestDir;
using testing::WriteFile;

std::vector<std::string> Names(const std::vector<InputFile>& files) {
  std::vector<std::string> names;
  for (const InputFile& f : files) names.push_back(f.name);
  return names;
}

std::vector<std::string> Paths(const std::vector<InputFile>& files) {
  std::vector<std::string> paths;
  for (const InputFile& f : files) paths.push_back(f.path);
  return paths;
}

// The usage example of inputs.h.
TEST(ResolveInputsTest, FoldersFilesAndPatterns) {
  const std::string dir = MakeTestDir();
  WriteFile(dir + "/books/b.txt", "bb");
  WriteFile(dir + "/books/a.txt", "a");
  WriteFile(dir + "/books/sub/c.txt", "ccc");
  WriteFile(dir + "/books/sub/skip.md", "not text by name");
  WriteFile(dir + "/books/.hidden/d.txt", "hidden");
  WriteFile(dir + "/books/.e.txt", "hidden too");
  WriteFile(dir + "/notes.md", "notes");
  WriteFile(dir + "/logs/2024-02.txt", "feb");
  WriteFile(dir + "/logs/2024-01.txt", "jan");
  WriteFile(dir + "/logs/2023-12.txt", "dec");
  absl::StatusOr<std::vector<InputFile>> files =
      ResolveInputs(std::vector<std::string>{dir + "/books", dir + "/notes.md", dir + "/logs/2024-*.txt"});
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(Names(*files), (std::vector<std::string>{"a.txt", "b.txt", "sub/c.txt", "notes.md", "2024-01.txt",
                                                     "2024-02.txt"}));
  EXPECT_EQ(Paths(*files), (std::vector<std::string>{dir + "/books/a.txt", dir + "/books/b.txt",
                                                     dir + "/books/sub/c.txt", dir + "/notes.md",
                                                     dir + "/logs/2024-01.txt", dir + "/logs/2024-02.txt"}));
  EXPECT_EQ((*files)[2].bytes, 3u);
}

TEST(ResolveInputsTest, EachFileOnceAtItsFirstPlace) {
  const std::string dir = MakeTestDir();
  WriteFile(dir + "/t/a.txt", "a");
  WriteFile(dir + "/t/b.txt", "b");
  ASSERT_EQ(::symlink((dir + "/t").c_str(), (dir + "/t/loop").c_str()), 0);  // a cycle is walked once
  absl::StatusOr<std::vector<InputFile>> files =
      ResolveInputs(std::vector<std::string>{dir + "/t/b.txt", dir + "/t", dir + "/t/*.txt", dir + "/t"});
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(Names(*files), (std::vector<std::string>{"b.txt", "a.txt"}));
}

TEST(ResolveInputsTest, PatternsMatchingFoldersWalkThem) {
  const std::string dir = MakeTestDir();
  WriteFile(dir + "/part1/x.txt", "x");
  WriteFile(dir + "/part2/y.txt", "y");
  absl::StatusOr<std::vector<InputFile>> files = ResolveInputs(std::vector<std::string>{dir + "/part*"});
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(Names(*files), (std::vector<std::string>{"x.txt", "y.txt"}));
}

TEST(ResolveInputsTest, HomeIsExpanded) {
  const std::string dir = MakeTestDir();
  WriteFile(dir + "/corpus/a.txt", "a");
  const char* old_home = std::getenv("HOME");
  const std::string saved = old_home != nullptr ? old_home : "";
  ::setenv("HOME", dir.c_str(), 1);
  absl::StatusOr<std::vector<InputFile>> files = ResolveInputs(std::vector<std::string>{"~/corpus"});
  ::setenv("HOME", saved.c_str(), 1);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(Paths(*files), std::vector<std::string>{dir + "/corpus/a.txt"});
}

TEST(ResolveInputsTest, ErrorsNameThePath) {
  const std::string dir = MakeTestDir();
  WriteFile(dir + "/empty/readme.md", "no txt here");
  WriteFile(dir + "/broken/ok.txt", "ok");
  ASSERT_EQ(::symlink((dir + "/missing").c_str(), (dir + "/broken/gone.txt").c_str()), 0);
  ASSERT_EQ(::symlink((dir + "/missing").c_str(), (dir + "/broken/ignored.md").c_str()), 0);
  struct Case {
    std::vector<std::string> inputs;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{}, absl::StatusCode::kInvalidArgument, "no inputs given: name text files, folders or patterns"},
      {{dir + "/nope.txt"}, absl::StatusCode::kNotFound,
       "cannot read input '" + dir + "/nope.txt': No such file or directory"},
      {{dir + "/*.none"}, absl::StatusCode::kInvalidArgument,
       "input pattern '" + dir + "/*.none' matches no files"},
      {{dir + "/empty"}, absl::StatusCode::kInvalidArgument,
       "input folder '" + dir + "/empty' has no .txt files (searched recursively; name files directly, or with a "
       "pattern like '" + dir + "/empty/*.md', to use other names)"},
      {{dir + "/broken"}, absl::StatusCode::kNotFound,
       "cannot read input '" + dir + "/broken/gone.txt': No such file or directory"},
      {{"/dev/null"}, absl::StatusCode::kFailedPrecondition, "input '/dev/null' is neither a file nor a folder"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<InputFile>> files = ResolveInputs(c.inputs);
    ASSERT_FALSE(files.ok()) << c.message;
    EXPECT_EQ(files.status().code(), c.code) << files.status();
    EXPECT_EQ(files.status().message(), c.message);
  }
}

}  // namespace
}  // namespace colossal::io
