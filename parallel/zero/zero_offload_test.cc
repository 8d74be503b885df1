// ZeroOffload: the pipelined CPU Adam step over host shards equals the CUDA
// Adam kernel on device shards, bitwise (kernels/adam promises identical
// results on every path), over several steps, with many chunks, pieces that
// cross chunk boundaries, two groups' options and an uncovered gap; and its
// argument errors.
#include "parallel/zero/zero_offload.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bazel/cuda_config.h"
#include "core/context/context.h"
#include "core/device/device.h"
#include "core/tensor/tensor.h"
#include "kernels/elementwise/elementwise.h"
#include "nn/optim/test_util.h"
#include "tests/util/gpu_test.h"

namespace colossal::parallel {
namespace {

using core::DType;
using core::Stream;
using core::Tensor;

TEST(ZeroOffload, RefusesHostWeights) {
  auto w = Tensor::empty({8}, DType::kF32, Stream::cpu());
  ASSERT_TRUE(w.ok());
  auto o = ZeroOffload::create(*w, Stream::cpu(), 0);
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << o.status();
}

#if COLOSSAL_WITH_CUDA

// `n` uniform values in [-scale, scale), rounded to `dtype`, on the device.
Tensor random_device(int64_t n, DType dtype, uint32_t seed, float scale, const Stream& s) {
  const Tensor host = nn::testing::random_cpu_tensor({n}, dtype, seed, -scale, scale);
  Tensor dev = host.to(s.device(), s).value();
  s.synchronize();
  return dev;
}

std::vector<uint8_t> bytes_of(const Tensor& t, const Stream& s) { return nn::testing::to_bytes(t, s); }

class ZeroOffloadCuda : public ::testing::TestWithParam<DType> {};

TEST_P(ZeroOffloadCuda, EqualsTheCudaKernelBitwise) {
  COLOSSAL_REQUIRE_GPU();
  const DType dtype = GetParam();
  const bool sixteen = dtype != DType::kF32;
  auto ctx = core::Context::create(core::Device::cuda(0));
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const Stream& s = (*ctx)->compute_stream();
  constexpr int64_t kN = 10007, kChunk = 1000;
  constexpr int64_t kGapLo = 2990, kGapHi = 3011;  // no piece: keeps its values

  kernels::adam::AdamOptions a;
  a.lr = 1e-2f;
  a.beta2 = 0.95f;
  a.weight_decay = 0.1f;
  kernels::adam::AdamOptions b = a;
  b.lr = 3e-3f;
  b.weight_decay = 0.0f;
  b.grad_scale = 4.0f;  // a loss scale / clip divisor

  Tensor weights = random_device(kN, dtype, 1, 1.0f, s);
  const std::vector<uint8_t> initial = bytes_of(weights, s);
  auto off = ZeroOffload::create(weights, s, /*cpu_threads=*/2, kChunk);
  ASSERT_TRUE(off.ok()) << off.status();

  // The reference: device master (widened weights), moments, model copy.
  auto master = Tensor::empty({kN}, DType::kF32, s);
  auto m = Tensor::empty({kN}, DType::kF32, s);
  auto v = Tensor::empty({kN}, DType::kF32, s);
  ASSERT_TRUE(master.ok() && m.ok() && v.ok());
  ASSERT_TRUE((kernels::elementwise::cast_cuda(master->raw_data(), weights.raw_data(), kN,
                                            DType::kF32, dtype, s.handle())).ok());
  ASSERT_TRUE(m->set_zero(s).ok() && v->set_zero(s).ok());
  auto ref_copy = Tensor::empty({kN}, dtype, s);
  ASSERT_TRUE(ref_copy.ok());
  ASSERT_TRUE(ref_copy->copy_from(weights, s).ok());

  auto out = Tensor::empty({kN}, dtype, s);
  ASSERT_TRUE(out.ok());
  const int64_t es = static_cast<int64_t>(core::dtype_size(dtype));
  for (int step = 1; step <= 3; ++step) {
    a.step = b.step = step;
    // Pieces cross chunk boundaries (chunks are 1000 long).
    const std::vector<ZeroOffload::Piece> pieces = {
        {0, 1500, a}, {1500, kGapLo - 1500, b}, {kGapHi, kN - kGapHi, a}};
    Tensor grad = random_device(kN, dtype, 100 + step, 2.0f, s);
    std::vector<uint8_t> poison(out->nbytes(), 0xff);  // NaN in every dtype
    auto host_poison = Tensor::empty({kN}, dtype, Stream::cpu());
    ASSERT_TRUE(host_poison.ok());
    std::memcpy(host_poison->raw_data(), poison.data(), poison.size());
    ASSERT_TRUE(out->copy_from(*host_poison, s).ok());
    s.synchronize();

    const absl::Status st = (*off)->step(grad, pieces, weights, *out);
    ASSERT_TRUE(st.ok()) << st;
    for (const ZeroOffload::Piece& p : pieces) {
      const int64_t at = p.at;
      void* copy = sixteen ? static_cast<char*>(ref_copy->raw_data()) + at * es : nullptr;
      ASSERT_TRUE((kernels::adam::adam_step_cuda(
                    master->data<float>() + at, m->data<float>() + at, v->data<float>() + at,
                    copy, static_cast<const char*>(grad.raw_data()) + at * es, nullptr, p.count,
                    dtype, sixteen ? dtype : DType::kF32, p.options, s.handle())).ok());
    }
    // The new weights; the float32 case re-reads its masters from them.
    ASSERT_TRUE(weights.copy_from(*out, s).ok());
    const std::vector<uint8_t> got = bytes_of(*out, s);
    const std::vector<uint8_t> want = bytes_of(sixteen ? *ref_copy : *master, s);
    EXPECT_EQ(got, want) << "step " << step;
    EXPECT_EQ(bytes_of((*off)->master(), s), bytes_of(*master, s)) << "step " << step;
    EXPECT_EQ(bytes_of((*off)->exp_avg(), s), bytes_of(*m, s)) << "step " << step;
    EXPECT_EQ(bytes_of((*off)->exp_avg_sq(), s), bytes_of(*v, s)) << "step " << step;
    // The gap keeps the initial weights (and changed nothing else).
    EXPECT_EQ(std::vector<uint8_t>(got.begin() + kGapLo * es, got.begin() + kGapHi * es),
              std::vector<uint8_t>(initial.begin() + kGapLo * es, initial.begin() + kGapHi * es));
  }
  EXPECT_NE(bytes_of(weights, s), initial) << "the steps changed nothing";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ZeroOffloadCuda,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(core::dtype_name(info.param));
                         });

TEST(ZeroOffloadErrors, BadPiecesAndTensors) {
  COLOSSAL_REQUIRE_GPU();
  auto ctx = core::Context::create(core::Device::cuda(0));
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const Stream& s = (*ctx)->compute_stream();
  Tensor w = random_device(64, DType::kBF16, 3, 1.0f, s);
  EXPECT_FALSE(ZeroOffload::create(w, s, 0, /*chunk=*/0).ok());
  auto off = ZeroOffload::create(w, s, 0, 16);
  ASSERT_TRUE(off.ok()) << off.status();
  Tensor g = random_device(64, DType::kBF16, 4, 1.0f, s);
  const kernels::adam::AdamOptions o;
  // Outside the slice, and out of order.
  EXPECT_EQ((*off)->step(g, {{60, 8, o}}, w, w).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*off)->step(g, {{10, 8, o}, {0, 4, o}}, w, w).code(),
            absl::StatusCode::kInvalidArgument);
  // A gradient of another dtype or length.
  Tensor g32 = random_device(64, DType::kF32, 5, 1.0f, s);
  EXPECT_EQ((*off)->step(g32, {{0, 64, o}}, w, w).code(), absl::StatusCode::kInvalidArgument);
  Tensor short_g = random_device(63, DType::kBF16, 6, 1.0f, s);
  EXPECT_EQ((*off)->step(short_g, {{0, 63, o}}, w, w).code(), absl::StatusCode::kInvalidArgument);
  // Bad hyper-parameters are CPU Adam's errors.
  kernels::adam::AdamOptions bad;
  bad.lr = -1.0f;
  EXPECT_FALSE((*off)->step(g, {{0, 64, bad}}, w, w).ok());
}

#endif  // COLOSSAL_WITH_CUDA

}  // namespace
}  // namespace colossal::parallel
