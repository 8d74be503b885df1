#include "io/common/json_util.h"

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
  EXPECT_EQ(ParseJsonObject("[1, 2]", "f.json").status().message(), "f.json: not a JSON object");
  EXPECT_EQ(ParseJsonObject("{", "f.json").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace colossal::io
