#include "core/dtype/dtype.h"

#include <gtest/gtest.h>

namespace colossal::core {
namespace {

constexpr DType kAll[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64,
                          DType::kI32, DType::kI64, DType::kU8,  DType::kU16};

TEST(DTypeTest, EveryCanonicalNameParses) {
  for (DType t : kAll) {
    absl::StatusOr<DType> parsed = parse_dtype(dtype_name(t));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, t);
  }
}

TEST(DTypeTest, ShortFormsAndCaseAndWhitespace) {
  EXPECT_EQ(*parse_dtype("bf16"), DType::kBF16);
  EXPECT_EQ(*parse_dtype("BFloat16"), DType::kBF16);
  EXPECT_EQ(*parse_dtype("fp32"), DType::kF32);
  EXPECT_EQ(*parse_dtype("  float32\n"), DType::kF32);
  EXPECT_EQ(*parse_dtype("float"), DType::kF32);
  EXPECT_EQ(*parse_dtype("FP16"), DType::kF16);
  EXPECT_EQ(*parse_dtype("half"), DType::kF16);
  EXPECT_EQ(*parse_dtype("double"), DType::kF64);
  EXPECT_EQ(*parse_dtype("f64"), DType::kF64);
  EXPECT_EQ(*parse_dtype("i32"), DType::kI32);
  EXPECT_EQ(*parse_dtype("int64"), DType::kI64);
  EXPECT_EQ(*parse_dtype("u8"), DType::kU8);
  EXPECT_EQ(*parse_dtype("uint16"), DType::kU16);
}

TEST(DTypeTest, UnknownNamesSuggestTheClosest) {
  absl::Status s = parse_dtype("bfloat61").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "unknown dtype \"bfloat61\"; did you mean \"bfloat16\"? (accepted: float32 fp32 f32 "
            "float, float16 fp16 f16 half, bfloat16 bf16, float64 fp64 f64 double, int32 i32 int, "
            "int64 i64 long, uint8 u8 byte, uint16 u16)");
  EXPECT_NE(parse_dtype("bf61").status().message().find("did you mean \"bf16\"?"),
            absl::string_view::npos);
  EXPECT_NE(parse_dtype("flaot32").status().message().find("did you mean \"float32\"?"),
            absl::string_view::npos);
  s = parse_dtype("complex128").status();
  EXPECT_EQ(s.message().find("did you mean"), absl::string_view::npos);
  EXPECT_NE(s.message().find("unknown dtype \"complex128\" (accepted:"), absl::string_view::npos);
  EXPECT_FALSE(parse_dtype("").ok());
}

TEST(DTypeTest, DtypeOfMatchesTheTable) {
  static_assert(dtype_of<float>() == DType::kF32);
  static_assert(dtype_of<kernels::Half>() == DType::kF16);
  static_assert(dtype_of<kernels::BFloat16>() == DType::kBF16);
  static_assert(dtype_of<double>() == DType::kF64);
  static_assert(dtype_of<int32_t>() == DType::kI32);
  static_assert(dtype_of<int64_t>() == DType::kI64);
  static_assert(dtype_of<uint8_t>() == DType::kU8);
  static_assert(dtype_of<uint16_t>() == DType::kU16);
  EXPECT_EQ(dtype_size(dtype_of<kernels::BFloat16>()), 2u);
  EXPECT_EQ(dtype_spellings(DType::kBF16), "bfloat16 bf16");
}

}  // namespace
}  // namespace colossal::core
