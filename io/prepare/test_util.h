// Test helpers for io/prepare: scratch folders and small text trees.
#ifndef COLOSSAL_IO_PREPARE_TEST_UTIL_H_
#define COLOSSAL_IO_PREPARE_TEST_UTIL_H_

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace colossal::io::testing {

// A fresh folder per test under TEST_TMPDIR (`suffix` for several per test).
inline std::string MakeTestDir(std::string_view suffix = "") {
  const char* base = std::getenv("TEST_TMPDIR");
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string dir = std::string(base != nullptr ? base : "/tmp") + "/" + info->test_suite_name() + "." + info->name();
  if (!suffix.empty()) dir += "." + std::string(suffix);
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

// Writes `contents` to `path`, creating parent folders.
inline void WriteFile(const std::string& path, std::string_view contents) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    ::mkdir(path.substr(0, slash).c_str(), 0755);
  }
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(contents.data(), 1, contents.size(), f), contents.size());
  std::fclose(f);
}

inline std::string ReadAll(const std::string& path) {
  std::string out;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    std::fclose(f);
  }
  return out;
}

inline std::vector<std::string> ListDir(const std::string& dir) {
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

// Deterministic English-ish text: `paragraphs` paragraphs of a few sentences,
// varied by `seed`, separated by blank lines.
inline std::string MakeText(int seed, int paragraphs) {
  static constexpr const char* kWords[] = {"the", "king", "hello", "sing", "queen", "and", "of", "a", "it's",
                                           "abc", "1234", "aaaa", "world", "!!", "in", "to", "thee", "thou"};
  constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);
  uint64_t state = 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(seed + 1);
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  std::string text;
  for (int p = 0; p < paragraphs; ++p) {
    if (p > 0) text += "\n\n";
    const int sentences = 1 + static_cast<int>(next() % 4);
    for (int s = 0; s < sentences; ++s) {
      const int words = 3 + static_cast<int>(next() % 9);
      for (int w = 0; w < words; ++w) {
        if (w > 0) text += ' ';
        text += kWords[next() % kNumWords];
      }
      text += s + 1 < sentences ? ". " : ".\n";
    }
  }
  return text;
}

}  // namespace colossal::io::testing

#endif  // COLOSSAL_IO_PREPARE_TEST_UTIL_H_
