#include "core/tensor/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/alloc/cpu_allocator.h"
#include "core/alloc/default_allocator.h"
#include "tests/util/gpu_test.h"
#include "tests/util/test_data.h"

namespace colossal::core {
namespace {

using kernels::BFloat16;

bool contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

// A CPU float32 tensor holding 0, 1, 2, ...
Tensor iota(const Shape& shape) {
  absl::StatusOr<Tensor> t = Tensor::empty(shape, DType::kF32, Stream::cpu());
  COLOSSAL_CHECK_OK(t.status());
  std::iota(t->data<float>(), t->data<float>() + t->numel(), 0.0f);
  return *t;
}

TEST(TensorTest, EmptyOnCpu) {
  absl::StatusOr<Tensor> t = Tensor::empty({2, 3, 5}, DType::kBF16, Stream::cpu());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->defined());
  EXPECT_EQ(t->shape(), Shape({2, 3, 5}));
  EXPECT_EQ(t->rank(), 3);
  EXPECT_EQ(t->dim(-1), 5);
  EXPECT_EQ(t->dtype(), DType::kBF16);
  EXPECT_EQ(t->device(), Device::cpu());
  EXPECT_EQ(t->numel(), 30);
  EXPECT_EQ(t->nbytes(), 60u);
  EXPECT_EQ(t->byte_offset(), 0u);
  EXPECT_FALSE(t->is_pinned());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw_data()) % 64, 0u);
  EXPECT_EQ(static_cast<void*>(t->data<BFloat16>()), t->raw_data());
  EXPECT_EQ(t->to_string(), "Tensor(bfloat16 [2, 3, 5] on cpu)");
  EXPECT_EQ(Tensor().to_string(), "Tensor(undefined)");
  EXPECT_FALSE(Tensor().defined());

  absl::StatusOr<Tensor> empty = Tensor::empty({4, 0}, DType::kF32, Stream::cpu());
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->numel(), 0);
  EXPECT_EQ(empty->raw_data(), nullptr);
  absl::StatusOr<Tensor> scalar = Tensor::empty({}, DType::kI64, Stream::cpu());
  ASSERT_TRUE(scalar.ok());
  EXPECT_EQ(scalar->nbytes(), 8u);
}

TEST(TensorTest, MemoryReturnsWhenTheLastViewGoes) {
  auto allocator = std::make_shared<CpuAllocator>();
  absl::StatusOr<Tensor> t = Tensor::empty({100}, DType::kF32, Stream::cpu(), allocator);
  ASSERT_TRUE(t.ok());
  absl::StatusOr<Tensor> view = t->slice(10, 20);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(allocator->stats().allocated_bytes, 400);
  t = absl::StatusOr<Tensor>();
  EXPECT_EQ(allocator->stats().allocated_bytes, 400);  // the view keeps it
  view = absl::StatusOr<Tensor>();
  EXPECT_EQ(allocator->stats().allocated_bytes, 0);
}

TEST(TensorTest, EmptyErrorsNameTheTensor) {
  const absl::Status s = Tensor::empty({1 << 20, 1 << 20, 1 << 7}, DType::kF64, Stream::cpu()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(s.message(), "Tensor::empty(float64 [1048576, 1048576, 128]): out of host memory"))
      << s;
  if (cuda_device_count() == 0) {
    const absl::Status gpu =
        Tensor::empty({2}, DType::kF32, Stream::cuda(Device::cuda(0), nullptr)).status();
    EXPECT_EQ(gpu.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(contains(gpu.message(), "Tensor::empty(float32 [2]): device cuda:0 is not available"))
        << gpu;
  }
}

TEST(TensorDeathTest, DataWithTheWrongTypeAborts) {
  const Tensor t = iota({2, 3});
  EXPECT_DEATH(t.data<double>(), "data<float64>\\(\\) of Tensor\\(float32 \\[2, 3\\] on cpu\\)");
  EXPECT_DEATH(t.data<BFloat16>(), "data<bfloat16>");
}

TEST(TensorTest, ReshapeSharesStorage) {
  const Tensor t = iota({2, 3, 4});
  absl::StatusOr<Tensor> r = t.reshape({6, -1});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->shape(), Shape({6, 4}));
  EXPECT_EQ(r->raw_data(), t.raw_data());
  EXPECT_EQ(r->storage(), t.storage());
  EXPECT_EQ(t.reshape({24})->shape(), Shape({24}));
  EXPECT_EQ(t.reshape({-1})->shape(), Shape({24}));
  EXPECT_EQ(t.reshape({1, 2, 1, 12})->shape(), Shape({1, 2, 1, 12}));
  absl::StatusOr<Tensor> empty = Tensor::empty({0, 5}, DType::kF32, Stream::cpu());
  EXPECT_EQ(empty->reshape({5, 0, 7})->numel(), 0);
  EXPECT_EQ(iota({}).reshape({1, 1})->shape(), Shape({1, 1}));
}

TEST(TensorTest, ReshapeErrorsNameShapes) {
  const Tensor t = iota({2, 3});
  EXPECT_EQ(t.reshape({4, 2}).status().message(),
            "reshape of float32 [2, 3] (6 elements) to [4, 2]: that shape has 8 elements");
  EXPECT_EQ(t.reshape({4, -1}).status().message(),
            "reshape of float32 [2, 3] (6 elements) to [4, -1]: 6 elements do not divide into parts "
            "of 4");
  EXPECT_EQ(t.reshape({-1, -1}).status().message(),
            "reshape of float32 [2, 3] (6 elements) to [-1, -1]: only one dimension may be -1");
  EXPECT_EQ(t.reshape({2, -2}).status().message(),
            "reshape of float32 [2, 3] (6 elements) to [2, -2]: dimension 1 is negative");
  EXPECT_EQ(t.reshape({1, 1, 1, 1, 1, 1, 1, 2, 3}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<Tensor> empty = Tensor::empty({0, 5}, DType::kF32, Stream::cpu());
  EXPECT_TRUE(contains(empty->reshape({0, -1}).status().message(), "-1 is ambiguous"));
  EXPECT_EQ(Tensor().reshape({1}).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TensorTest, NarrowAlongDimZeroAndLeadingOnes) {
  const Tensor t = iota({4, 3});
  absl::StatusOr<Tensor> rows = t.narrow(0, 1, 2);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->shape(), Shape({2, 3}));
  EXPECT_EQ(rows->byte_offset(), 12u);
  EXPECT_EQ(rows->data<float>()[0], 3.0f);
  EXPECT_EQ(rows->data<float>()[5], 8.0f);

  // A view of a view: offsets add up.
  absl::StatusOr<Tensor> inner = rows->slice(1, 2);
  ASSERT_TRUE(inner.ok());
  EXPECT_EQ(inner->data<float>()[0], 6.0f);
  EXPECT_EQ(inner->byte_offset(), 24u);

  // Leading dims of 1: narrowing dim 2 of [1, 1, 10] is contiguous.
  const Tensor u = iota({1, 1, 10});
  absl::StatusOr<Tensor> cols = u.narrow(-1, 7, 3);
  ASSERT_TRUE(cols.ok()) << cols.status();
  EXPECT_EQ(cols->shape(), Shape({1, 1, 3}));
  EXPECT_EQ(cols->data<float>()[0], 7.0f);
  EXPECT_EQ(t.narrow(0, 4, 0)->numel(), 0);  // an empty narrow at the end
  EXPECT_EQ(t.slice(0, 4)->shape(), t.shape());
}

TEST(TensorTest, NarrowErrorsSayWhy) {
  const Tensor t = iota({4, 6});
  absl::Status s = t.narrow(1, 0, 2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "narrow(dim=1, start=0, length=2) of float32 [4, 6]: the result would not be contiguous "
            "(dims before 1 are [4], not all 1); tensors are contiguous, so narrow dim 0, or "
            "reshape first");
  s = t.narrow(0, 3, 2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(s.message(),
            "narrow(dim=0, start=3, length=2) of float32 [4, 6]: elements [3, 5) are outside [0, 4) "
            "of dim 0");
  EXPECT_EQ(t.narrow(0, -1, 2).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(t.narrow(0, 0, -1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(t.narrow(2, 0, 1).status().message(),
            "narrow(dim=2, start=0, length=1) of float32 [4, 6]: dim must be in [-2, 2)");
  EXPECT_EQ(iota({}).narrow(0, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.slice(3, 1).status().message(), "slice(3, 1) of float32 [4, 6]: end is before start");
}

TEST(TensorTest, FromStorageMakesNamedViews) {
  // One flat buffer carved into two parameters, as the design's flat buffers are.
  absl::StatusOr<std::shared_ptr<Storage>> flat = Storage::allocate(cpu_allocator(), 80, Stream::cpu());
  ASSERT_TRUE(flat.ok());
  absl::StatusOr<Tensor> w = Tensor::from_storage(*flat, 0, {3, 4}, DType::kF32);
  absl::StatusOr<Tensor> b = Tensor::from_storage(*flat, 48, {4}, DType::kF64);
  ASSERT_TRUE(w.ok() && b.ok()) << w.status() << b.status();
  EXPECT_EQ(static_cast<char*>(b->raw_data()) - static_cast<char*>(w->raw_data()), 48);
  EXPECT_EQ(Tensor::from_storage(*flat, 48, {5}, DType::kF64).status().message(),
            "Tensor::from_storage(float64 [5]): bytes [48, 88) run past the storage's 80 bytes");
  EXPECT_EQ(Tensor::from_storage(*flat, 6, {2}, DType::kF32).status().message(),
            "Tensor::from_storage(float32 [2]): byte offset 6 is not a multiple of the element size 4");
  EXPECT_EQ(Tensor::from_storage(*flat, 100, {0}, DType::kF32).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Tensor::from_storage(nullptr, 0, {1}, DType::kF32).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TensorTest, CopyAndZeroOnCpu) {
  const Tensor src = iota({3, 5});
  absl::StatusOr<Tensor> dst = Tensor::empty({3, 5}, DType::kF32, Stream::cpu());
  ASSERT_TRUE(dst.ok());
  testing::poison(dst->raw_data(), dst->nbytes());
  ASSERT_TRUE(dst->copy_from(src, Stream::cpu()).ok());
  EXPECT_EQ(std::memcmp(dst->raw_data(), src.raw_data(), src.nbytes()), 0);
  ASSERT_TRUE(dst->set_zero(Stream::cpu()).ok());
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(dst->data<float>()[i], 0.0f);

  // Overlapping views of one storage copy like memmove.
  const Tensor line = iota({10});
  Tensor head = *line.slice(0, 6);
  ASSERT_TRUE(head.copy_from(*line.slice(4, 10), Stream::cpu()).ok());
  EXPECT_EQ(line.data<float>()[0], 4.0f);
  EXPECT_EQ(line.data<float>()[5], 9.0f);

  absl::StatusOr<Tensor> same = src.to(Device::cpu(), Stream::cpu());
  EXPECT_EQ(same->storage(), src.storage());  // already there: shared
  absl::StatusOr<Tensor> fresh = src.to(Stream::cpu(), std::make_shared<CpuAllocator>());
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(fresh->storage(), src.storage());
  EXPECT_EQ(std::memcmp(fresh->raw_data(), src.raw_data(), src.nbytes()), 0);
}

TEST(TensorTest, CopyErrorsNameShapesAndDtypes) {
  const Tensor src = iota({3, 5});
  Tensor other_dtype = *Tensor::empty({3, 5}, DType::kBF16, Stream::cpu());
  EXPECT_EQ(other_dtype.copy_from(src, Stream::cpu()).message(),
            "copy_from(Tensor(float32 [3, 5] on cpu)) into Tensor(bfloat16 [3, 5] on cpu): dtypes "
            "differ (bfloat16 vs float32)");
  Tensor other_shape = *Tensor::empty({5, 3}, DType::kF32, Stream::cpu());
  EXPECT_EQ(other_shape.copy_from(src, Stream::cpu()).message(),
            "copy_from(Tensor(float32 [3, 5] on cpu)) into Tensor(float32 [5, 3] on cpu): shapes "
            "differ ([5, 3] vs [3, 5])");
  Tensor undefined;
  EXPECT_EQ(undefined.copy_from(src, Stream::cpu()).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(undefined.to(Device::cpu(), Stream::cpu()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(undefined.set_zero(Stream::cpu()).code(), absl::StatusCode::kFailedPrecondition);
  if (cuda_device_count() == 0) {
    const absl::Status s = src.to(Device::cuda(0), Stream::cpu()).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(contains(s.message(), "Tensor(float32 [3, 5] on cpu).to(cuda:0): device cuda:0 is "
                                      "not available"))
        << s;
  }
}

#if COLOSSAL_WITH_CUDA
OwnedStream make_stream() {
  absl::StatusOr<OwnedStream> s = OwnedStream::create(Device::cuda(0));
  COLOSSAL_CHECK_OK(s.status());
  return *std::move(s);
}
#endif

TEST(TensorCudaTest, RoundTripThroughTheDevice) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  OwnedStream owned = make_stream();
  const Stream& s = owned.get();
  const Tensor host = iota({257, 3});
  absl::StatusOr<Tensor> dev = host.to(Device::cuda(0), s);  // H2D, pageable
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ(dev->device(), Device::cuda(0));
  EXPECT_EQ(dev->to_string(), "Tensor(float32 [257, 3] on cuda:0)");
  absl::StatusOr<Tensor> dev2 = Tensor::empty({257, 3}, DType::kF32, s);
  ASSERT_TRUE(dev2.ok());
  ASSERT_TRUE(dev2->copy_from(*dev, s).ok());  // D2D
  absl::StatusOr<Tensor> back = dev2->to(Device::cpu(), s);  // D2H, pageable
  ASSERT_TRUE(back.ok()) << back.status();
  s.synchronize();
  EXPECT_EQ(std::memcmp(back->raw_data(), host.raw_data(), host.nbytes()), 0);

  // Views of device tensors copy the right rows.
  absl::StatusOr<Tensor> rows = dev->slice(100, 101);
  absl::StatusOr<Tensor> row_host = rows->to(Device::cpu(), s);
  s.synchronize();
  EXPECT_EQ(row_host->data<float>()[0], 300.0f);
  EXPECT_EQ(row_host->data<float>()[2], 302.0f);
#endif
}

TEST(TensorCudaTest, PinnedCopiesAreAsyncAndCorrect) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  OwnedStream owned = make_stream();
  const Stream& s = owned.get();
  absl::StatusOr<std::shared_ptr<Allocator>> pinned = pinned_host_allocator();
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  const int64_t n = 1 << 22;
  absl::StatusOr<Tensor> src = Tensor::empty({n}, DType::kF32, s, *pinned);
  ASSERT_TRUE(src.ok());
  EXPECT_TRUE(src->is_pinned());
  EXPECT_EQ(src->to_string(), "Tensor(float32 [4194304] on cpu, pinned)");
  std::vector<float> values = testing::random_floats(n, 3);
  std::memcpy(src->raw_data(), values.data(), n * 4);
  absl::StatusOr<Tensor> dev = src->to(Device::cuda(0), s);
  ASSERT_TRUE(dev.ok());
  absl::StatusOr<Tensor> dst = dev->to(s, *pinned);  // D2H into pinned: async
  ASSERT_TRUE(dst.ok());
  EXPECT_TRUE(dst->is_pinned());
  s.synchronize();
  EXPECT_EQ(std::memcmp(dst->raw_data(), values.data(), n * 4), 0);
#endif
}

TEST(TensorCudaTest, SetZeroAndStreamErrors) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  OwnedStream owned = make_stream();
  const Stream& s = owned.get();
  const Tensor host = iota({64});
  absl::StatusOr<Tensor> dev = host.to(Device::cuda(0), s);
  ASSERT_TRUE(dev.ok());
  ASSERT_TRUE(dev->slice(16, 48)->set_zero(s).ok());
  absl::StatusOr<Tensor> back = dev->to(Device::cpu(), s);
  s.synchronize();
  EXPECT_EQ(back->data<float>()[15], 15.0f);
  EXPECT_EQ(back->data<float>()[16], 0.0f);
  EXPECT_EQ(back->data<float>()[47], 0.0f);
  EXPECT_EQ(back->data<float>()[48], 48.0f);

  const absl::Status cpu_stream = dev->copy_from(*dev, Stream::cpu());
  EXPECT_EQ(cpu_stream.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(cpu_stream.message(), "needs a CUDA stream, not the CPU stream")) << cpu_stream;
  EXPECT_EQ(dev->set_zero(Stream::cpu()).code(), absl::StatusCode::kInvalidArgument);
  const absl::Status oom =
      Tensor::empty({int64_t{1} << 47}, DType::kF32, s).status();  // 512 TiB
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(contains(oom.message(), "Tensor::empty(float32 [140737488355328]): out of memory on "
                                      "cuda:0: asked for 562949953421312 bytes"))
      << oom;
  s.synchronize();
#endif
}

}  // namespace
}  // namespace colossal::core
