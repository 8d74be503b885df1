#include "nn/module/parameter.h"

#include <cstring>
#include <vector>

#include "core/alloc/default_allocator.h"
#include "gtest/gtest.h"
#include "kernels/random/random.h"
#include "nn/module/parameter_init.h"

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

ParameterTable small_table(DType dtype) {
  ParameterTable table;
  EXPECT_TRUE(table.add("fc.weight", {5, 3}, dtype, InitRule::normal(0.5, /*zero_tail=*/4)).ok());
  EXPECT_TRUE(table.add("fc.bias", {3}, dtype).ok());
  EXPECT_TRUE(table.add("ln.weight", {7}, dtype, InitRule::ones()).ok());
  EXPECT_TRUE(table.add("head.weight", {2, 3}, dtype, InitRule::normal(2.0)).ok());
  return table;
}

TEST(ParameterStoreTest, DeclaredStoreHasNoMemoryAndHandlesSayWhich) {
  ParameterStore store = ParameterStore::declare(small_table(DType::kF32));
  EXPECT_FALSE(store.materialized());
  EXPECT_FALSE(store.flat_values(DType::kF32).defined());
  absl::StatusOr<ParameterHandle> w = store.handle("fc.weight");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE(w->present());
  absl::StatusOr<core::Tensor> v = w->value();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(v.status().message().find("\"fc.weight\""), std::string::npos) << v.status();
  EXPECT_EQ(w->grad().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.initialize(1, Stream::cpu()).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.handle("fc.wieght").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ParameterHandle().value().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ParameterStoreTest, HandlesBoundBeforeAllocationSeeTheMemory) {
  ParameterStore store = ParameterStore::declare(small_table(DType::kF32));
  ParameterHandle w = *store.handle("fc.weight");
  ParameterStore copy = store;  // copies share the memory they get later
  ASSERT_TRUE(copy.allocate(Stream::cpu()).ok());
  EXPECT_TRUE(store.materialized());
  EXPECT_EQ(copy.allocate(Stream::cpu()).code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<core::Tensor> v = w.value();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->shape(), core::Shape({5, 3}));
  EXPECT_EQ(v->raw_data(), store.flat_values(DType::kF32).raw_data());
  EXPECT_EQ(w.grad()->raw_data(), store.flat_grads(DType::kF32).raw_data());
}

// A plugin that keeps only part of the gradients: after release_grads the
// values stay in their flat buffer, each gradient has the memory set_grad
// gives it (through the fetcher, the first time a handle asks), and the
// store still counts as materialized.
TEST(ParameterStoreTest, ReleasedGradientsComeFromThePlugin) {
  absl::StatusOr<ParameterStore> store = ParameterStore::create(small_table(DType::kF32), Stream::cpu());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(store->set_grad(0, core::Tensor()).code(), absl::StatusCode::kFailedPrecondition);
  ParameterHandle w = *store->handle("fc.weight");
  const void* values = store->flat_values(DType::kF32).raw_data();
  ASSERT_TRUE(store->release_grads().ok());
  EXPECT_TRUE(store->grads_released());
  EXPECT_TRUE(store->materialized());
  EXPECT_FALSE(store->flat_grads(DType::kF32).defined());
  EXPECT_EQ(store->flat_values(DType::kF32).raw_data(), values);
  EXPECT_EQ(w.value()->raw_data(), values);
  EXPECT_EQ(w.grad().status().code(), absl::StatusCode::kFailedPrecondition);  // no fetcher
  EXPECT_EQ(store->release_grads().code(), absl::StatusCode::kFailedPrecondition);

  std::vector<size_t> fetched;
  core::Tensor bucket = *core::Tensor::empty({15}, DType::kF32, Stream::cpu());
  store->set_fetcher([&](size_t index, bool want_grad) -> absl::Status {
    EXPECT_TRUE(want_grad);
    fetched.push_back(index);
    return store->set_grad(index, *bucket.reshape({5, 3}));
  });
  absl::StatusOr<core::Tensor> g = w.grad();
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->raw_data(), bucket.raw_data());
  EXPECT_TRUE(w.grad().ok());
  EXPECT_EQ(fetched, std::vector<size_t>({0}));  // once: the view stays until the plugin drops it
  for (int i = 0; i < 15; ++i) bucket.data<float>()[i] = 1.0f + i;
  ASSERT_TRUE(store->zero_grad(Stream::cpu()).ok());  // the gradients with memory
  for (int i = 0; i < 15; ++i) EXPECT_EQ(bucket.data<float>()[i], 0.0f);

  // Values only from the start: the same, without a gradient buffer ever.
  ParameterStore values_only = ParameterStore::declare(small_table(DType::kF32));
  ASSERT_TRUE(values_only.allocate(Stream::cpu(), ParameterStore::Gradients::kPlugin).ok());
  EXPECT_TRUE(values_only.grads_released());
  EXPECT_TRUE(values_only.materialized());
  EXPECT_TRUE(values_only.flat_values(DType::kF32).defined());
  EXPECT_FALSE(values_only.flat_grads(DType::kF32).defined());
  EXPECT_FALSE(values_only.parameters()[0].grad.defined());
  EXPECT_TRUE(values_only.initialize(1, Stream::cpu()).ok());

  absl::Status wrong = store->set_grad(1, *core::Tensor::empty({4}, DType::kF32, Stream::cpu()));
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.message().find("\"fc.bias\""), std::string::npos) << wrong;
  ASSERT_TRUE(store->set_grad(0, core::Tensor()).ok());
  EXPECT_FALSE(store->parameters()[0].grad.defined());
  EXPECT_TRUE(store->materialized());
}

// The rules, element by element, against kernels/random's stream.
TEST(ParameterStoreTest, InitializeFollowsTheRulesAndTheFlatOffset) {
  absl::StatusOr<ParameterStore> store = ParameterStore::create(small_table(DType::kF32), Stream::cpu());
  ASSERT_TRUE(store.ok());
  core::Tensor flat = store->flat_values(DType::kF32);
  std::vector<float> poison(static_cast<size_t>(flat.numel()), -7.0f);
  std::memcpy(flat.raw_data(), poison.data(), poison.size() * sizeof(float));
  ASSERT_TRUE(store->initialize(/*seed=*/42, Stream::cpu()).ok());
  const ParameterTable& t = store->table();
  auto expect_normal = [&](const char* name, double std, int64_t drawn) {
    const ParameterEntry& e = *t.find(name);
    std::vector<float> want(static_cast<size_t>(e.numel()), 0.0f);
    ASSERT_TRUE(kernels::random::fill_normal_cpu(want.data(), 0.0, std, 42,
                                                 static_cast<uint64_t>(e.offset), drawn, DType::kF32)
                    .ok());
    const float* got = store->find(name)->value.data<float>();
    for (int64_t i = 0; i < e.numel(); ++i) EXPECT_EQ(got[i], want[i]) << name << "[" << i << "]";
  };
  expect_normal("fc.weight", 0.5, 15 - 4);
  expect_normal("head.weight", 2.0, 6);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(store->find("fc.bias")->value.data<float>()[i], 0.0f);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(store->find("ln.weight")->value.data<float>()[i], 1.0f);
}

// A piece initialised on its own equals that piece of the whole parameter, and
// a bfloat16 table draws the float32 table's values, rounded.
TEST(ParameterStoreTest, PiecesAndOtherDtypesDrawTheSameValues) {
  const ParameterTable f32 = small_table(DType::kF32), bf16 = small_table(DType::kBF16);
  for (size_t i = 0; i < f32.size(); ++i) {
    EXPECT_EQ(f32.entries()[i].init_offset, f32.entries()[i].offset);
    EXPECT_EQ(bf16.entries()[i].init_offset, f32.entries()[i].offset) << bf16.entries()[i].name;
  }
  EXPECT_NE(bf16.find("head.weight")->offset, f32.find("head.weight")->offset);  // 8-element alignment
  const ParameterEntry& w = *f32.find("fc.weight");
  absl::StatusOr<core::Tensor> whole = core::Tensor::empty({15}, DType::kF32, Stream::cpu());
  absl::StatusOr<core::Tensor> piece = core::Tensor::empty({6}, DType::kF32, Stream::cpu());
  ASSERT_TRUE(whole.ok() && piece.ok());
  ASSERT_TRUE(init_parameter(w, *whole, 9, 0, Stream::cpu()).ok());
  ASSERT_TRUE(init_parameter(w, *piece, 9, /*first=*/8, Stream::cpu()).ok());  // crosses the zero tail
  for (int i = 0; i < 6; ++i) EXPECT_EQ(piece->data<float>()[i], whole->data<float>()[8 + i]) << i;
  EXPECT_EQ(piece->data<float>()[5], 0.0f);
  EXPECT_NE(piece->data<float>()[0], 0.0f);
  EXPECT_EQ(init_parameter(w, *piece, 9, /*first=*/10, Stream::cpu()).code(),
            absl::StatusCode::kInvalidArgument);
  const ParameterEntry& wb = *bf16.find("fc.weight");
  absl::StatusOr<core::Tensor> b = core::Tensor::empty({15}, DType::kBF16, Stream::cpu());
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(init_parameter(wb, *b, 9, 0, Stream::cpu()).ok());
  for (int i = 0; i < 15; ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, &whole->data<float>()[i], 4);
    const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;  // nearest even
    uint16_t got = 0;
    std::memcpy(&got, static_cast<const char*>(b->raw_data()) + 2 * i, 2);
    EXPECT_EQ(got, rounded) << i;
  }
}

TEST(ParameterTableTest, InitRulesAreChecked) {
  ParameterTable table;
  EXPECT_EQ(table.add("w", {4}, DType::kF32, InitRule::normal(1.0, 5)).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(table.add("w", {4}, DType::kF32).ok());
  EXPECT_TRUE(table.set_init("w", InitRule::normal(1.0, 4)).ok());
  EXPECT_EQ(table.find("w")->init.kind, InitRule::Kind::kNormal);
  EXPECT_EQ(table.set_init("v", InitRule::ones()).code(), absl::StatusCode::kNotFound);
}

// More than the host has: refused before anything is allocated, naming the size.
TEST(ParameterStoreTest, AllocatingMoreThanTheDeviceHasIsAClearError) {
  ParameterTable table;
  ASSERT_TRUE(table.add("huge.weight", {int64_t{1} << 20, int64_t{1} << 24}, DType::kF32).ok());
  ParameterStore store = ParameterStore::declare(table);
  EXPECT_EQ(store.replicated_bytes(), int64_t{8} << 44);  // 2^44 values and gradients
  const int64_t before = core::cpu_allocator()->stats().allocated_bytes;
  absl::Status s = store.allocate(Stream::cpu());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("materializing 17592186044416 parameters (128.00 TiB"),
            std::string::npos)
      << s;
  EXPECT_EQ(core::cpu_allocator()->stats().allocated_bytes, before);
  EXPECT_FALSE(store.materialized());
}

}  // namespace
}  // namespace colossal::nn
