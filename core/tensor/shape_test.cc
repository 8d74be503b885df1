#include "core/tensor/shape.h"

#include <gtest/gtest.h>

#include <vector>

namespace colossal::core {
namespace {

TEST(ShapeTest, Basics) {
  const Shape s = {4, 1024, 768};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 4 * 1024 * 768);
  EXPECT_EQ(s[0], 4);
  EXPECT_EQ(s[-1], 768);
  EXPECT_EQ(s[-3], 4);
  EXPECT_EQ(s.to_string(), "[4, 1024, 768]");
  EXPECT_EQ(s, Shape({4, 1024, 768}));
  EXPECT_NE(s, Shape({4, 768, 1024}));
  EXPECT_NE(s, Shape({4, 1024}));
  std::ostringstream out;
  out << Shape{2, 3};
  EXPECT_EQ(out.str(), "[2, 3]");
}

TEST(ShapeTest, ScalarsAndEmpty) {
  const Shape scalar;
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.to_string(), "[]");
  EXPECT_EQ(Shape({3, 0, 5}).numel(), 0);
  EXPECT_EQ(Shape({1, 2, 3, 4, 5, 6, 7, 8}).rank(), 8);
}

TEST(ShapeTest, MakeValidatesUserInput) {
  const std::vector<int64_t> ok = {2, 3};
  EXPECT_EQ(*Shape::make(ok), Shape({2, 3}));
  const std::vector<int64_t> nine(9, 1);
  absl::Status s = Shape::make(nine).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "shape [1, 1, 1, 1, 1, 1, 1, 1, 1] has 9 dimensions; at most 8 are supported");
  const std::vector<int64_t> negative = {2, -3};
  EXPECT_EQ(Shape::make(negative).status().message(),
            "shape [2, -3] has a negative dimension (-3 at index 1)");
  const std::vector<int64_t> huge = {int64_t{1} << 30, int64_t{1} << 30};
  EXPECT_EQ(Shape::make(huge).status().message(),
            "shape [1073741824, 1073741824] has more than 2^48 elements");
  const std::vector<int64_t> huge_but_empty = {int64_t{1} << 40, int64_t{1} << 40, 0};
  EXPECT_EQ(Shape::make(huge_but_empty)->numel(), 0);
  EXPECT_EQ(dims_to_string(std::vector<int64_t>{2, -1}), "[2, -1]");
}

TEST(ShapeDeathTest, InvalidLiteralsAndIndicesAbort) {
  EXPECT_DEATH(Shape({2, -1}), "negative dimension");
  EXPECT_DEATH((void)Shape({2, 3})[2], "dimension 2 of shape \\[2, 3\\]");
  EXPECT_DEATH((void)Shape({2, 3})[-3], "dimension -3 of shape \\[2, 3\\]");
}

}  // namespace
}  // namespace colossal::core
