#include "io/common/sha256.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace colossal::io {
namespace {

// The usage example of sha256.h and FIPS 180-4's test vectors.
TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, IncrementalEqualsOneShotAtEverySplit) {
  std::string data(300, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 3);
  for (size_t len : {0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 128, 300}) {
    const std::string message = data.substr(0, len);
    const std::string expected = Sha256Hex(message);
    for (size_t split = 0; split <= len; ++split) {
      Sha256 h;
      h.Update(message.substr(0, split));
      h.Update(message.substr(split));
      ASSERT_EQ(h.HexDigest(), expected) << "len " << len << " split " << split;
    }
  }
  Sha256 reused;  // Digest() resets
  reused.Update("junk");
  (void)reused.Digest();
  reused.Update("abc");
  EXPECT_EQ(reused.HexDigest(), Sha256Hex("abc"));
}

TEST(Sha256Test, HashesFiles) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/sha_me.txt";
  std::string contents(200000, 'x');
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(contents.data(), 1, contents.size(), f);
  std::fclose(f);
  absl::StatusOr<std::string> hex = Sha256OfFile(path);
  ASSERT_TRUE(hex.ok()) << hex.status();
  EXPECT_EQ(*hex, Sha256Hex(contents));

  absl::StatusOr<std::string> missing = Sha256OfFile("/nonexistent/ranks.tiktoken");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "/nonexistent/ranks.tiktoken"));
}

}  // namespace
}  // namespace colossal::io
