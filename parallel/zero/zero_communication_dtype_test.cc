// communication_dtype (Colossal-AI's): low_level_zero's gradient buckets cross
// between ranks in another dtype than the gradients' (zero_grad_reduction.h).
// CPU, builtin backend, ranks as threads:
//   * float32 gradients over a bfloat16 wire, stage 1 and stage 2 (buckets
//     reduce-scattered, or reduced in place to their owner): every averaged
//     element is a bfloat16 value (the average came back from 16 bits) within
//     the bound of rounding each rank's gradient and each addition to 16
//     bits; the float32 wire's average is not all bfloat16 values and is
//     within float32 rounding of the exact mean;
//   * bfloat16 gradients over a float32 wire: the average is the exact mean
//     rounded to bfloat16 once, to nearest (what a 16-bit sum, rounding per
//     addition, is not);
//   * the plugin: a float32 model trained with a bfloat16 wire at world
//     size 2: the first step's gradient norm within 16-bit rounding of the
//     float32 run's, and not equal to it; ranks agree bit for bit; at world
//     size 1 nothing is sent and the run is the float32 run's, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/dtype/dtype.h"
#include "core/tensor/tensor.h"
#include "kernels/elementwise/elementwise.h"
#include "nn/module/parameter.h"
#include "parallel/ddp/ddp_test_util.h"
#include "parallel/zero/low_level_zero_plugin.h"
#include "parallel/zero/zero_grad_reduction.h"
#include "parallel/zero/zero_shard.h"
#include "parallel/zero/zero_test_util.h"

namespace colossal::parallel {
namespace {

using core::DType;
using core::Stream;
using core::Tensor;
using namespace ::colossal::parallel::testing;  // NOLINT: test helpers

constexpr int kWorld = 3;
// bfloat16 keeps 8 significant bits: rounding to nearest moves a value by at
// most 2^-8 of its magnitude (half an ulp, relative to the binade's bottom).
constexpr double kBf16Round = 1.0 / 256;
constexpr double kF32Round = 1.0 / (1 << 23);

// Rank `rank`'s gradient at flat element k: ~0.02, signs varying, a function
// of (k, rank) only.
float grad_at(int64_t k, int rank) {
  return static_cast<float>(0.02 * (std::sin(0.37 * k + 0.4) + 0.6 * std::sin(0.53 * k + 1.3 * rank)));
}

float to_bf16_and_back(float x) {
  uint16_t h = 0;
  float out = 0;
  EXPECT_TRUE(kernels::elementwise::cast_cpu(&h, &x, 1, DType::kBF16, DType::kF32).ok());
  EXPECT_TRUE(kernels::elementwise::cast_cpu(&out, &h, 1, DType::kF32, DType::kBF16).ok());
  return out;
}

// The tiny GPT-2's table with every parameter in `dtype` (its alignment
// gaps, and so its offsets, depend on the dtype).
nn::ParameterTable table_in(DType dtype) {
  auto model = make_zero_model(Family::kGpt2, kSeed);
  nn::ParameterTable table;
  for (const nn::ParameterEntry& e : model->store().table().entries()) {
    EXPECT_TRUE(table.add(e.name, e.shape, dtype).ok());
  }
  return table;
}

// The store's flat gradients of `dtype` as floats.
std::vector<float> flat_floats(const Tensor& t) {
  std::vector<float> out(t.numel());
  EXPECT_TRUE(kernels::elementwise::cast_cpu(out.data(), t.raw_data(), t.numel(), DType::kF32,
                                           t.dtype()).ok());
  return out;
}

// One backward's worth of reduction on each of kWorld ranks: rank r's
// gradients are grad_at(k, r) rounded to `dtype`, written through the
// parameters' handles (as a layer writes them); returns each rank's averaged
// gradients of its slice (stage 2) or of the whole buffer (stage 1), as floats.
std::vector<std::vector<float>> reduce_once(DType dtype, const ZeroGradReductionOptions& options) {
  std::vector<std::vector<float>> out(kWorld);
  run_ranks(kWorld, [&](int r, std::shared_ptr<comm::ProcessGroup> pg) {
    auto model = make_zero_model(Family::kGpt2, kSeed);  // the module tree for the hooks
    const nn::ParameterTable table = table_in(dtype);
    nn::ParameterStore store = nn::ParameterStore::declare(table);
    ASSERT_TRUE(store.allocate(Stream::cpu(), options.stage == 2
                                                  ? nn::ParameterStore::Gradients::kPlugin
                                                  : nn::ParameterStore::Gradients::kFlat)
                    .ok());
    const int64_t numel = table.buffer_numel(dtype);
    auto grads = ZeroGradReduction::create(pg, *model, store, dtype, zero_shard(numel, kWorld, r),
                                           Stream::cpu(), options);
    ASSERT_TRUE(grads.ok()) << grads.status();
    ASSERT_TRUE((*grads)->begin_backward(Stream::cpu(), /*sync=*/true).ok());
    for (const nn::ParameterEntry& e : table.entries()) {
      absl::StatusOr<Tensor> g = store.handle(e.name)->grad();
      ASSERT_TRUE(g.ok()) << g.status();
      std::vector<float> v(e.numel());
      for (int64_t i = 0; i < e.numel(); ++i) v[i] = grad_at(e.offset + i, r);
      ASSERT_TRUE(kernels::elementwise::cast_cpu(g->raw_data(), v.data(), e.numel(), dtype,
                                               DType::kF32).ok());
    }
    ASSERT_TRUE((*grads)->end_backward(true).ok());
    ASSERT_TRUE((*grads)->wait(Stream::cpu()).ok());
    out[r] = options.stage == 2 ? flat_floats(*(*grads)->slice_grads())
                                : flat_floats(store.flat_grads(dtype));
  });
  return out;
}

// Calls check(k, got) for every element k the ranks' results hold (stage 2:
// rank r's slice; stage 1: rank 0's whole buffer, which every rank holds).
// Alignment gaps (no parameter) are left out.
template <typename Check>
void for_each_element(const std::vector<std::vector<float>>& got, DType dtype, int stage,
                      Check check) {
  const nn::ParameterTable table = table_in(dtype);
  const int64_t numel = table.buffer_numel(dtype);
  for (const nn::ParameterEntry& e : table.entries()) {
    for (int64_t k = e.offset; k < e.offset + e.numel(); ++k) {
      const int r = stage == 2 ? static_cast<int>(k / zero_shard(numel, kWorld, 0).size) : 0;
      const int64_t at = stage == 2 ? k - zero_shard(numel, kWorld, r).begin : k;
      check(k, got[r].at(at));
    }
  }
}

TEST(ZeroCommunicationDtype, Bf16WireRoundsFloat32GradientsToSixteenBits) {
  struct Case {
    int stage;
    bool owned;
  };
  for (const Case c : {Case{1, false}, Case{2, false}, Case{2, true}}) {
    SCOPED_TRACE(::testing::Message() << "stage " << c.stage << (c.owned ? ", owned buckets" : ""));
    ZeroGradReductionOptions o;
    o.stage = c.stage;
    o.bucket_bytes = 4 * 40;  // some buckets in one slice, some across
    o.reduce_owned_buckets = c.owned;
    const std::vector<std::vector<float>> f32 = reduce_once(DType::kF32, o);
    o.communication_dtype = DType::kBF16;
    const std::vector<std::vector<float>> bf16 = reduce_once(DType::kF32, o);
    int64_t checked = 0, f32_not_bf16 = 0;
    for_each_element(f32, DType::kF32, c.stage, [&](int64_t k, float got) {
      double mean = 0, magnitude = 0;
      for (int r = 0; r < kWorld; ++r) {
        mean += grad_at(k, r) / double{kWorld};
        magnitude += std::abs(grad_at(k, r)) / double{kWorld};
      }
      // float32: the sum's kWorld - 1 additions and the division round.
      EXPECT_LE(std::abs(got - mean), (kWorld + 1) * kF32Round * magnitude) << k;
      f32_not_bf16 += to_bf16_and_back(got) != got;
    });
    for_each_element(bf16, DType::kF32, c.stage, [&](int64_t k, float got) {
      double mean = 0, magnitude = 0;
      for (int r = 0; r < kWorld; ++r) {
        mean += grad_at(k, r) / double{kWorld};
        magnitude += std::abs(grad_at(k, r)) / double{kWorld};
      }
      EXPECT_EQ(to_bf16_and_back(got), got) << k;
      // Each rank's gradient, each of the kWorld - 1 additions and the
      // division round to 16 bits (each by at most kBf16Round of a partial
      // sum's magnitude, itself at most kWorld * magnitude).
      EXPECT_LE(std::abs(got - mean), (2 * kWorld + 1) * kBf16Round * magnitude * kWorld) << k;
      ++checked;
    });
    EXPECT_GT(checked, 1000);
    EXPECT_GT(f32_not_bf16, checked / 2);
  }
}

// The float nearest to x among a and b (the two bfloat16 values around it),
// or NaN when x is within float32 noise of their midpoint.
float nearest_or_nan(double x, float a, float b) {
  if (a == b) return a;
  const double da = std::abs(x - a), db = std::abs(x - b);
  if (std::abs(da - db) <= 8 * kF32Round * std::abs(x)) return NAN;
  return da < db ? a : b;
}

// The two bfloat16 values around x (x itself twice if it is one).
std::pair<float, float> bf16_neighbours(double x) {
  const float f = static_cast<float>(x);
  uint32_t bits = 0;
  std::memcpy(&bits, &f, 4);
  const uint32_t down_bits = bits & 0xffff0000u, up_bits = down_bits + 0x10000u;
  float down = 0, up = 0;
  std::memcpy(&down, &down_bits, 4);
  std::memcpy(&up, &up_bits, 4);
  return {down, (bits & 0xffffu) == 0 ? down : up};
}

TEST(ZeroCommunicationDtype, Float32WireRoundsTheMeanOfBf16GradientsOnce) {
  for (const bool owned : {false, true}) {
    for (int stage : {1, 2}) {
      if (stage == 1 && owned) continue;
      SCOPED_TRACE(::testing::Message() << "stage " << stage << (owned ? ", owned buckets" : ""));
      ZeroGradReductionOptions o;
      o.stage = stage;
      o.bucket_bytes = 2 * 40;
      o.reduce_owned_buckets = owned;
      o.communication_dtype = DType::kF32;
      const std::vector<std::vector<float>> got = reduce_once(DType::kBF16, o);
      int64_t checked = 0, total = 0;
      for_each_element(got, DType::kBF16, stage, [&](int64_t k, float g) {
        ++total;
        double mean = 0;
        for (int r = 0; r < kWorld; ++r) mean += to_bf16_and_back(grad_at(k, r)) / double{kWorld};
        const auto [a, b] = bf16_neighbours(mean);
        const float want = nearest_or_nan(mean, a, b);
        if (std::isnan(want)) {
          EXPECT_TRUE(g == a || g == b) << k;
        } else {
          EXPECT_EQ(g, want) << k << ": mean " << mean;
          ++checked;
        }
      });
      // A mean of three 16-bit values falls on a midpoint between two
      // bfloat16 values now and then (when the exact sum is three times a
      // short binary fraction): those may round either way.
      EXPECT_GE(checked, total * 9 / 10);
      EXPECT_GT(total, 800);
    }
  }
}

TEST(ZeroCommunicationDtype, PluginStepsOnSixteenBitAveragesAndWorldOneIsUnchanged) {
  for (int stage : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    LowLevelZeroOptions o;
    o.stage = stage;
    o.reduce_bucket_size_in_m = 0.05;
    const std::vector<ZeroRun> f32 = zero_runs(2, o);
    const std::vector<ZeroRun> one_f32 = zero_runs(1, o);
    o.communication_dtype = DType::kBF16;
    const std::vector<ZeroRun> bf16 = zero_runs(2, o);
    const std::vector<ZeroRun> one_bf16 = zero_runs(1, o);
    EXPECT_EQ(one_bf16[0].run.weights, one_f32[0].run.weights);
    EXPECT_EQ(one_bf16[0].run.loss, one_f32[0].run.loss);
    EXPECT_EQ(bf16[0].run.weights, bf16[1].run.weights);
    EXPECT_NE(bf16[0].run.weights, f32[0].run.weights);
    ASSERT_EQ(bf16[0].run.loss.size(), f32[0].run.loss.size());
    // The first step starts from the same weights: the same loss, and a
    // gradient norm within 16-bit rounding (each averaged element moves by
    // at most about kBf16Round of the ranks' gradients; they do not cancel
    // here). Later steps move apart as Adam amplifies the rounding of
    // near-zero gradients into full steps, and stay finite.
    EXPECT_EQ(bf16[0].run.loss[0], f32[0].run.loss[0]);
    EXPECT_NEAR(bf16[0].run.grad_norm[0], f32[0].run.grad_norm[0],
                2 * kBf16Round * f32[0].run.grad_norm[0]);
    EXPECT_NE(bf16[0].run.grad_norm[0], f32[0].run.grad_norm[0]);
    for (float loss : bf16[0].run.loss) EXPECT_TRUE(std::isfinite(loss));
  }
}

}  // namespace
}  // namespace colossal::parallel
