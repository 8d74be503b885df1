#include "nn/module/parameter.h"

#include "gtest/gtest.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Stream;

TEST(ParameterTableTest, OffsetsAreAlignedAndPerDtype) {
  ParameterTable table;
  ASSERT_TRUE(table.add("a.weight", {3, 1}, DType::kF32).ok());
  ASSERT_TRUE(table.add("a.bias", {5}, DType::kF32).ok());
  ASSERT_TRUE(table.add("b.weight", {3}, DType::kF64).ok());
  ASSERT_TRUE(table.add("b.bias", {1}, DType::kF64).ok());
  EXPECT_EQ(table.find("a.weight")->offset, 0);
  EXPECT_EQ(table.find("a.bias")->offset, 4);  // 16-byte aligned
  EXPECT_EQ(table.find("b.weight")->offset, 0);
  EXPECT_EQ(table.find("b.bias")->offset, 4);
  EXPECT_EQ(table.buffer_numel(DType::kF32), 9);
  EXPECT_EQ(table.buffer_numel(DType::kF64), 5);
  EXPECT_EQ(table.buffer_numel(DType::kBF16), 0);
  EXPECT_EQ(table.parameter_count(), 12);
  ASSERT_EQ(table.dtypes().size(), 2u);
  EXPECT_EQ(table.dtypes()[0], DType::kF32);
  EXPECT_EQ(table.find("nope"), nullptr);
}

TEST(ParameterTableTest, RejectsDuplicatesAndIntegerDtypes) {
  ParameterTable table;
  ASSERT_TRUE(table.add("w", {2}, DType::kF32).ok());
  absl::Status s = table.add("w", {2}, DType::kF32);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("declared twice"), std::string::npos);
  EXPECT_FALSE(table.add("i", {2}, DType::kI32).ok());
  EXPECT_FALSE(table.add("", {2}, DType::kF32).ok());
}

TEST(ParameterStoreTest, ViewsShareTheFlatBuffers) {
  ParameterTable table;
  ASSERT_TRUE(table.add("fc.weight", {4, 3}, DType::kF32).ok());
  ASSERT_TRUE(table.add("fc.bias", {3}, DType::kF32).ok());
  absl::StatusOr<ParameterStore> store = ParameterStore::create(table, Stream::cpu());
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_EQ(store->parameters().size(), 2u);
  absl::StatusOr<Parameter> b = store->find("fc.bias");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->value.shape(), core::Shape({3}));
  b->value.data<float>()[1] = 2.5f;
  b->grad.data<float>()[2] = 7.0f;
  core::Tensor flat = store->flat_values(DType::kF32);
  EXPECT_EQ(flat.numel(), 15);
  EXPECT_EQ(flat.data<float>()[12 + 1], 2.5f);
  EXPECT_EQ(flat.data<float>()[0], 0.0f);  // zeroed
  EXPECT_EQ(store->flat_grads(DType::kF32).data<float>()[12 + 2], 7.0f);
  ASSERT_TRUE(store->zero_grad(Stream::cpu()).ok());
  EXPECT_EQ(b->grad.data<float>()[2], 0.0f);
  EXPECT_FALSE(store->flat_values(DType::kF64).defined());
}

TEST(ParameterStoreTest, UnknownNameSuggestsTheClosest) {
  ParameterTable table;
  ASSERT_TRUE(table.add("fc.weight", {2}, DType::kF32).ok());
  absl::StatusOr<ParameterStore> store = ParameterStore::create(table, Stream::cpu());
  ASSERT_TRUE(store.ok());
  absl::StatusOr<Parameter> p = store->find("fc.wieght");
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("did you mean \"fc.weight\""), std::string::npos)
      << p.status();
}

}  // namespace
}  // namespace colossal::nn
