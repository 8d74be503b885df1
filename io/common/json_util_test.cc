#include "io/common/json_util.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace colossal::io {
namespace {

TEST(JsonUtil, ObjectsAndIntegersWithTheKeyInErrors) {
  absl::StatusOr<nlohmann::json> j = ParseJsonObject(R"({"n": 3, "x": 1.5, "a": [1]})", "f.json");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(*JsonInt(*j, "n", "f.json"), 3);
  EXPECT_EQ(JsonInt(*j, "m", "f.json").status().message(), "f.json: missing key 'm'");
  EXPECT_EQ(JsonInt(*j, "x", "f.json").status().message(), "f.json: 'x' must be an integer, got 1.5");
  EXPECT_EQ(JsonInt(*j, "a", "f.json").status().message(),
            "f.json: 'a' must be an integer, got array");
  // Past int64_t (nlohmann keeps it unsigned): refused, not wrapped to -1.
  j = ParseJsonObject(R"({"u": 18446744073709551615, "big": 9223372036854775807})", "f.json");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(JsonInt(*j, "u", "f.json").status().message(),
            "f.json: 'u' must be an integer, got 18446744073709551615");
  EXPECT_EQ(*JsonInt(*j, "big", "f.json"), INT64_MAX);
  EXPECT_EQ(ParseJsonObject("[1, 2]", "f.json").status().message(), "f.json: not a JSON object");
  EXPECT_EQ(ParseJsonObject("{", "f.json").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace colossal::io
