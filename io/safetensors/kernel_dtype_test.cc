#include "io/safetensors/kernel_dtype.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "io/safetensors/dtypes.h"

namespace colossal::io {
namespace {

using kernels::DType;

// The usage example of kernel_dtype.h.
TEST(KernelDTypeTest, HeaderExample) {
  absl::StatusOr<DType> dt = KernelDType("BF16");
  ASSERT_TRUE(dt.ok()) << dt.status();
  EXPECT_EQ(*dt, DType::kBF16);
  EXPECT_EQ(SafetensorsDTypeName(DType::kF32), "F32");
}

TEST(KernelDTypeTest, EveryDTypeRoundTripsWithMatchingSizes) {
  const DType all[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64,
                       DType::kI32, DType::kI64, DType::kU8,   DType::kU16};
  for (DType dtype : all) {
    const std::string_view name = SafetensorsDTypeName(dtype);
    SCOPED_TRACE(name);
    EXPECT_EQ(FindKernelDType(name), dtype);
    const SafetensorsDType* st = FindSafetensorsDType(name);
    ASSERT_NE(st, nullptr);
    EXPECT_EQ(static_cast<size_t>(st->bits), 8 * kernels::dtype_size(dtype));
  }
}

TEST(KernelDTypeTest, OthersHaveNoDType) {
  EXPECT_EQ(FindKernelDType("I8"), std::nullopt);
  EXPECT_EQ(FindKernelDType("nope"), std::nullopt);
  absl::StatusOr<DType> dt = KernelDType("F8_E4M3");
  ASSERT_FALSE(dt.ok());
  EXPECT_EQ(dt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dt.status().message(),
            "safetensors dtype 'F8_E4M3' has no colossal dtype (colossal computes in F32, F16, BF16, F64, I32, I64, "
            "U8, U16)");
}

}  // namespace
}  // namespace colossal::io
