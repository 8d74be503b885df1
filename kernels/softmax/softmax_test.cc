// Scaled masked / causal softmax: the CPU path against a naive float64
// reference and finite differences, the CUDA path against the CPU path, on fresh
// random data over odd shapes, every dtype, every row-length bucket and both the
// vector and the scalar (misaligned) access paths.
#include "kernels/softmax/softmax.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/common/half.h"
#include "tests/util/gpu_test.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::softmax {
namespace {

constexpr DType kCpuTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};
constexpr DType kCudaTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// One call's geometry. Masked: [batch, heads, sq, sk] with a [batch, 1, sq, sk]
// mask (or none); causal: [batch * heads, sq, sk].
enum class Mode { kMasked, kUnmasked, kCausal };

struct Shape {
  int64_t batch, heads, sq, sk;
  int64_t rows() const { return batch * heads * sq; }
  int64_t elements() const { return rows() * sk; }
};

std::string label(DType dtype, Mode mode, const Shape& s) {
  const char* m = mode == Mode::kMasked ? "masked" : mode == Mode::kCausal ? "causal" : "unmasked";
  return std::string(dtype_name(dtype)) + "/" + m + "/[" + std::to_string(s.batch) + "," +
         std::to_string(s.heads) + "," + std::to_string(s.sq) + "," + std::to_string(s.sk) + "]";
}

// Raw bytes of `dtype` holding uniform values in [lo, hi).
std::vector<uint8_t> random_tensor(DType dtype, int64_t n, uint32_t seed, float lo, float hi) {
  const std::vector<float> f = testing::random_floats(n, seed, lo, hi);
  std::vector<uint8_t> bytes(n * dtype_size(dtype));
  (void)dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i) reinterpret_cast<T*>(bytes.data())[i] = from_float<T>(f[i]);
    return KernelStatus();
  });
  if (dtype == DType::kF64) {
    // float64 gets values that are not float-representable.
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    for (int64_t i = 0; i < n; ++i) reinterpret_cast<double*>(bytes.data())[i] = dist(rng);
  }
  return bytes;
}

std::vector<double> to_doubles(DType dtype, const void* bytes, int64_t n) {
  std::vector<double> out(n);
  const KernelStatus s = dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i) {
      out[i] = static_cast<double>(to_math(static_cast<const T*>(bytes)[i]));
    }
    return KernelStatus();
  });
  EXPECT_TRUE(s.ok());
  return out;
}

// [batch, 1, sq, sk]: about 30% of columns masked, and the last row of batch 0
// fully masked (when sq > 1) so the all-zeros rule is always exercised.
std::vector<uint8_t> random_mask(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution masked(0.3);
  std::vector<uint8_t> mask(s.batch * s.sq * s.sk);
  for (auto& m : mask) m = masked(rng) ? 1 : 0;
  if (s.sq > 1) std::fill_n(mask.begin() + (s.sq - 1) * s.sk, s.sk, uint8_t{1});
  return mask;
}

int64_t causal_limit(int64_t row, int64_t sq, int64_t sk) {
  return std::clamp<int64_t>(row % sq + 1 + (sk - sq), 0, sk);
}

bool excluded(Mode mode, const Shape& s, const std::vector<uint8_t>& mask, int64_t row, int64_t j) {
  if (mode == Mode::kCausal) return j >= causal_limit(row, s.sq, s.sk);
  if (mode == Mode::kMasked) {
    const int64_t b = row / (s.heads * s.sq), i = row % s.sq;
    return mask[(b * s.sq + i) * s.sk + j] != 0;
  }
  return false;
}

// The definition, in float64: y = exp(v - max v) / sum over included columns.
std::vector<double> reference_forward(const std::vector<double>& x,
                                      const std::vector<uint8_t>& mask, Mode mode, const Shape& s,
                                      double scale) {
  std::vector<double> y(x.size(), 0.0);
  for (int64_t r = 0; r < s.rows(); ++r) {
    double m = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t j = 0; j < s.sk; ++j) {
      if (!excluded(mode, s, mask, r, j)) m = std::max(m, scale * x[r * s.sk + j]);
    }
    for (int64_t j = 0; j < s.sk; ++j) {
      if (!excluded(mode, s, mask, r, j)) sum += std::exp(scale * x[r * s.sk + j] - m);
    }
    for (int64_t j = 0; j < s.sk; ++j) {
      if (!excluded(mode, s, mask, r, j))
        y[r * s.sk + j] = std::exp(scale * x[r * s.sk + j] - m) / sum;
    }
  }
  return y;
}

// dx = scale * y * (dy - sum(dy * y)) over included columns; 0 where excluded
// (the masked backward sees exclusion only through y == 0).
std::vector<double> reference_backward(const std::vector<double>& dy, const std::vector<double>& y,
                                       Mode mode, const Shape& s, double scale) {
  std::vector<double> dx(dy.size(), 0.0);
  for (int64_t r = 0; r < s.rows(); ++r) {
    const int64_t limit = mode == Mode::kCausal ? causal_limit(r, s.sq, s.sk) : s.sk;
    double dot = 0;
    for (int64_t j = 0; j < limit; ++j) dot += dy[r * s.sk + j] * y[r * s.sk + j];
    for (int64_t j = 0; j < limit; ++j) {
      dx[r * s.sk + j] = scale * y[r * s.sk + j] * (dy[r * s.sk + j] - dot);
    }
  }
  return dx;
}

KernelStatus forward_cpu(Mode mode, void* y, const void* x, const std::vector<uint8_t>& mask,
                         const Shape& s, DType dtype, float scale) {
  if (mode == Mode::kCausal) {
    return scaled_causal_softmax_forward_cpu(y, x, s.batch * s.heads, s.sq, s.sk, dtype, scale);
  }
  return scaled_masked_softmax_forward_cpu(y, x, mode == Mode::kMasked ? mask.data() : nullptr,
                                           s.batch, s.heads, s.sq, s.sk, dtype, scale);
}

KernelStatus backward_cpu(Mode mode, void* dx, const void* dy, const void* y, const Shape& s,
                          DType dtype, float scale) {
  if (mode == Mode::kCausal) {
    return scaled_causal_softmax_backward_cpu(dx, dy, y, s.batch * s.heads, s.sq, s.sk, dtype,
                                              scale);
  }
  return scaled_masked_softmax_backward_cpu(dx, dy, y, s.batch, s.heads, s.sq, s.sk, dtype, scale);
}

// Tolerances, |got - want| <= rtol * (|want| + spread) + atol, where spread is 0
// for the forward and |scale * y_i| * max|dy| of the row for the backward (the
// scale of the cancellation in dy - sum(dy * y)).
struct Tolerance {
  double rtol, atol;
};

// CPU against the float64 definition. The CPU path rounds once to the output
// type (half an ulp: 4.9e-4 for float16, 3.9e-3 for bfloat16); float32 math adds
// ~1e-7 * |scale * (x - max)| through exp, 2e-6 at the logit spread used here.
Tolerance cpu_tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return {1e-5, 1e-10};
    case DType::kF16:
      return {1e-3, 6e-8};  // 6e-8: one float16 subnormal step
    case DType::kBF16:
      return {8e-3, 1e-12};
    default:
      return {1e-12, 1e-300};
  }
}

// CUDA against CPU: the two round float results that differ by a few float ulps
// (exp2f vs expf, float vs double sums), which may land one output ulp apart:
// 9.8e-4 (float16) and 7.8e-3 (bfloat16); float32 as above.
[[maybe_unused]] Tolerance cuda_tolerance(DType dtype) {  // CUDA builds only
  switch (dtype) {
    case DType::kF32:
      return {1e-5, 1e-10};
    case DType::kF16:
      return {2e-3, 1.2e-7};
    default:
      return {1e-2, 1e-12};
  }
}

// Compares got with want, and checks exclusions are exactly 0 when `exact_zero`
// says which elements are excluded. Reports the first mismatch only.
void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  const std::vector<double>& spread, Tolerance tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = tol.rtol * (std::fabs(want[i]) + spread[i]) + tol.atol;
    if (!(std::fabs(got[i] - want[i]) <= bound)) {
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << " want " << want[i]
                    << " bound " << bound;
      return;
    }
  }
}

std::vector<double> backward_spread(const std::vector<double>& dy, const std::vector<double>& y,
                                    const Shape& s, double scale) {
  std::vector<double> spread(dy.size());
  for (int64_t r = 0; r < s.rows(); ++r) {
    double g = 0;
    for (int64_t j = 0; j < s.sk; ++j) g = std::max(g, std::fabs(dy[r * s.sk + j]));
    for (int64_t j = 0; j < s.sk; ++j)
      spread[r * s.sk + j] = std::fabs(scale * y[r * s.sk + j]) * g;
  }
  return spread;
}

void expect_excluded_zero(const std::vector<double>& y, const std::vector<uint8_t>& mask, Mode mode,
                          const Shape& s, const std::string& what) {
  for (int64_t r = 0; r < s.rows(); ++r) {
    for (int64_t j = 0; j < s.sk; ++j) {
      if (excluded(mode, s, mask, r, j) && y[r * s.sk + j] != 0.0) {
        ADD_FAILURE() << what << " excluded element (" << r << ", " << j << ") is "
                      << y[r * s.sk + j];
        return;
      }
    }
  }
}

const Shape kCpuShapes[] = {{1, 1, 1, 1},    {1, 1, 1, 3},    {2, 3, 5, 17},
                            {1, 2, 7, 1000}, {1, 1, 3, 4097}, {2, 1, 4, 6}};
constexpr Mode kModes[] = {Mode::kMasked, Mode::kUnmasked, Mode::kCausal};

// Most shapes have sq < sk (causal: queries at the end of the keys); short
// causal rows are also tried with sq == sk and sq > sk (leading rows fully
// excluded). Long rows keep one shape so the references stay quick.
std::vector<Shape> with_causal_variants(Mode mode, Shape s) {
  std::vector<Shape> out = {s};
  if (mode == Mode::kCausal && s.sk <= 64) {
    if (s.sq != s.sk) out.push_back({s.batch, s.heads, s.sk, s.sk});
    out.push_back({s.batch, s.heads, s.sk + 2, s.sk});
  }
  return out;
}

TEST(SoftmaxCpuTest, ForwardAndBackwardMatchFloat64Reference) {
  uint32_t seed = 1;
  const float scale = 1.7f;
  for (DType dtype : kCpuTypes) {
    for (Mode mode : kModes) {
      for (const Shape& base : kCpuShapes) {
        for (const Shape& s : with_causal_variants(mode, base)) {
          const std::string what = label(dtype, mode, s);
          const int64_t n = s.elements();
          const size_t bytes = n * dtype_size(dtype);
          const auto x = random_tensor(dtype, n, seed++, -4.0f, 4.0f);
          const auto dy = random_tensor(dtype, n, seed++, -1.0f, 1.0f);
          const auto mask = random_mask(s, seed++);
          std::vector<uint8_t> y(bytes), dx(bytes);
          testing::poison(y.data(), bytes);
          ASSERT_TRUE(forward_cpu(mode, y.data(), x.data(), mask, s, dtype, scale).ok()) << what;
          const auto yd = to_doubles(dtype, y.data(), n);
          expect_close(yd, reference_forward(to_doubles(dtype, x.data(), n), mask, mode, s, scale),
                       std::vector<double>(n, 0.0), cpu_tolerance(dtype), what + " forward");
          expect_excluded_zero(yd, mask, mode, s, what);

          testing::poison(dx.data(), bytes);
          ASSERT_TRUE(backward_cpu(mode, dx.data(), dy.data(), y.data(), s, dtype, scale).ok());
          const auto dyd = to_doubles(dtype, dy.data(), n);
          expect_close(to_doubles(dtype, dx.data(), n), reference_backward(dyd, yd, mode, s, scale),
                       backward_spread(dyd, yd, s, scale), cpu_tolerance(dtype),
                       what + " backward");
        }
      }
    }
  }
}

// Rows sum to 1 except rows with every column excluded, which are all zeros
// (no NaN): a fully masked row, and the first sq - sk rows of a causal sq > sk.
TEST(SoftmaxCpuTest, FullyExcludedRowsAreZeroAndOthersSumToOne) {
  const Shape s{2, 3, 6, 4};
  const auto x = random_tensor(DType::kF32, s.elements(), 7, -3.0f, 3.0f);
  std::vector<uint8_t> mask(s.batch * s.sq * s.sk, 0);
  std::fill_n(mask.begin() + 2 * s.sk, s.sk, uint8_t{1});  // batch 0, row 2
  for (Mode mode : {Mode::kMasked, Mode::kCausal}) {
    std::vector<float> y(s.elements());
    testing::poison(y.data(), y.size() * sizeof(float));
    ASSERT_TRUE(forward_cpu(mode, y.data(), x.data(), mask, s, DType::kF32, 0.5f).ok());
    for (int64_t r = 0; r < s.rows(); ++r) {
      bool all_excluded = true;
      for (int64_t j = 0; j < s.sk; ++j) all_excluded &= excluded(mode, s, mask, r, j);
      double sum = 0;
      for (int64_t j = 0; j < s.sk; ++j) {
        ASSERT_FALSE(std::isnan(y[r * s.sk + j]));
        sum += y[r * s.sk + j];
      }
      EXPECT_NEAR(sum, all_excluded ? 0.0 : 1.0, 1e-6) << "row " << r;
    }
  }
}

// Logits far outside exp's range and a negative scale: the max is subtracted
// before exp, so nothing overflows, and for scale < 0 the smallest x wins.
TEST(SoftmaxCpuTest, LargeLogitsAndNegativeScale) {
  const Shape s{1, 2, 3, 50};
  for (float scale : {1.0f, -0.75f}) {
    for (DType dtype : {DType::kF32, DType::kF64}) {
      const auto x = random_tensor(dtype, s.elements(), 11, -1000.0f, 1000.0f);
      std::vector<uint8_t> y(s.elements() * dtype_size(dtype));
      ASSERT_TRUE(forward_cpu(Mode::kUnmasked, y.data(), x.data(), {}, s, dtype, scale).ok());
      expect_close(to_doubles(dtype, y.data(), s.elements()),
                   reference_forward(to_doubles(dtype, x.data(), s.elements()), {}, Mode::kUnmasked,
                                     s, scale),
                   std::vector<double>(s.elements(), 0.0), cpu_tolerance(dtype), "large logits");
    }
  }
}

// d/dx of L = sum(w * softmax(x)) by central differences, in float64, against
// the backward with dy = w — for the masked (with a fully masked row) and the
// causal forms, sq == sk and sq != sk.
TEST(SoftmaxCpuTest, BackwardMatchesFiniteDifferences) {
  const double h = 1e-6;
  const float scale = 0.8f;
  uint32_t seed = 300;
  for (Mode mode : kModes) {
    for (const Shape& s : with_causal_variants(mode, Shape{2, 2, 3, 5})) {
      const int64_t n = s.elements();
      auto xb = random_tensor(DType::kF64, n, seed++, -2.0f, 2.0f);
      const auto wb = random_tensor(DType::kF64, n, seed++, -1.0f, 1.0f);
      const auto mask = random_mask(s, seed++);
      double* x = reinterpret_cast<double*>(xb.data());
      const double* w = reinterpret_cast<const double*>(wb.data());
      std::vector<double> y(n), dx(n);
      auto loss = [&]() {
        EXPECT_TRUE(forward_cpu(mode, y.data(), x, mask, s, DType::kF64, scale).ok());
        double l = 0;
        for (int64_t i = 0; i < n; ++i) l += w[i] * y[i];
        return l;
      };
      loss();
      ASSERT_TRUE(backward_cpu(mode, dx.data(), w, y.data(), s, DType::kF64, scale).ok());
      for (int64_t i = 0; i < n; ++i) {
        const double saved = x[i];
        x[i] = saved + h;
        const double up = loss();
        x[i] = saved - h;
        const double down = loss();
        x[i] = saved;
        const double numeric = (up - down) / (2 * h);
        ASSERT_NEAR(dx[i], numeric, 1e-7 + 1e-6 * std::fabs(numeric))
            << label(DType::kF64, mode, s) << " element " << i;
      }
    }
  }
}

// dx is overwritten: pre-filled random values must not leak into the result.
// In place: y == x forward and dx == dy, dx == y backward give the same bytes.
TEST(SoftmaxCpuTest, BackwardOverwritesAndInPlaceCallsMatch) {
  const Shape s{2, 3, 4, 33};
  const int64_t n = s.elements();
  uint32_t seed = 500;
  for (DType dtype : kCpuTypes) {
    for (Mode mode : kModes) {
      const size_t bytes = n * dtype_size(dtype);
      const auto x = random_tensor(dtype, n, seed++, -3.0f, 3.0f);
      const auto dy = random_tensor(dtype, n, seed++, -1.0f, 1.0f);
      const auto mask = random_mask(s, seed++);
      std::vector<uint8_t> y(bytes), dx(bytes);
      ASSERT_TRUE(forward_cpu(mode, y.data(), x.data(), mask, s, dtype, 0.3f).ok());
      std::vector<uint8_t> in_place = x;
      ASSERT_TRUE(forward_cpu(mode, in_place.data(), in_place.data(), mask, s, dtype, 0.3f).ok());
      EXPECT_EQ(in_place, y) << label(dtype, mode, s) << " forward y == x";

      std::vector<uint8_t> zeroed(bytes, 0);
      dx = random_tensor(dtype, n, seed++, -5.0f, 5.0f);
      ASSERT_TRUE(backward_cpu(mode, dx.data(), dy.data(), y.data(), s, dtype, 0.3f).ok());
      ASSERT_TRUE(backward_cpu(mode, zeroed.data(), dy.data(), y.data(), s, dtype, 0.3f).ok());
      EXPECT_EQ(dx, zeroed) << label(dtype, mode, s) << " backward overwrites dx";
      std::vector<uint8_t> g = dy;
      ASSERT_TRUE(backward_cpu(mode, g.data(), g.data(), y.data(), s, dtype, 0.3f).ok());
      EXPECT_EQ(g, dx) << label(dtype, mode, s) << " backward dx == dy";
      std::vector<uint8_t> p = y;
      ASSERT_TRUE(backward_cpu(mode, p.data(), dy.data(), p.data(), s, dtype, 0.3f).ok());
      EXPECT_EQ(p, dx) << label(dtype, mode, s) << " backward dx == y";
    }
  }
}

// The header's usage example.
TEST(SoftmaxCpuTest, HeaderExample) {
  const int64_t n = 2 * 12 * 128 * 128;
  const auto x = random_tensor(DType::kBF16, n, 21, -4.0f, 4.0f);
  const auto dy = random_tensor(DType::kBF16, n, 22, -1.0f, 1.0f);
  const auto mask = random_mask(Shape{2, 12, 128, 128}, 23);
  std::vector<uint8_t> y(n * 2), dx(n * 2);
  KernelStatus s = scaled_masked_softmax_forward_cpu(y.data(), x.data(), mask.data(), 2, 12, 128,
                                                     128, DType::kBF16, 0.125f);
  ASSERT_TRUE(s.ok()) << s.message();
  s = scaled_masked_softmax_backward_cpu(dx.data(), dy.data(), y.data(), 2, 12, 128, 128,
                                         DType::kBF16, 0.125f);
  ASSERT_TRUE(s.ok()) << s.message();
}

using Code = KernelStatus::Code;

TEST(SoftmaxCpuTest, RejectsBadArguments) {
  float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8] = {};
  uint8_t mask[8] = {};
  const float* ca = a;
  EXPECT_EQ(
      scaled_masked_softmax_forward_cpu(nullptr, a, nullptr, 1, 1, 1, 8, DType::kF32, 1).code(),
      Code::kInvalidArgument);
  EXPECT_EQ(
      scaled_masked_softmax_forward_cpu(b, nullptr, nullptr, 1, 1, 1, 8, DType::kF32, 1).code(),
      Code::kInvalidArgument);
  EXPECT_EQ(scaled_masked_softmax_forward_cpu(b, a, nullptr, 1, -1, 1, 8, DType::kF32, 1).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(scaled_causal_softmax_forward_cpu(b, a, 1, 1, -8, DType::kF32, 1).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(
      scaled_causal_softmax_forward_cpu(b, a, int64_t{1} << 40, 1 << 20, 1 << 20, DType::kF32, 1)
          .code(),
      Code::kInvalidArgument);  // element count overflows
  EXPECT_EQ(scaled_masked_softmax_forward_cpu(b, a, nullptr, 1, 1, 1, 8, DType::kI32, 1).code(),
            Code::kUnsupported);
  EXPECT_EQ(scaled_causal_softmax_backward_cpu(b, a, a, 1, 1, 8, DType::kU8, 1).code(),
            Code::kUnsupported);
  EXPECT_EQ(
      scaled_masked_softmax_forward_cpu(a + 1, ca, nullptr, 1, 1, 1, 7, DType::kF32, 1).code(),
      Code::kInvalidArgument);  // y partially overlaps x
  EXPECT_EQ(scaled_masked_softmax_forward_cpu(reinterpret_cast<float*>(mask), a, mask, 1, 1, 1, 2,
                                              DType::kF32, 1)
                .code(),
            Code::kInvalidArgument);  // y overlaps the mask
  EXPECT_EQ(scaled_masked_softmax_backward_cpu(a + 2, a, b, 1, 1, 1, 6, DType::kF32, 1).code(),
            Code::kInvalidArgument);  // dx partially overlaps dy
  EXPECT_EQ(scaled_causal_softmax_backward_cpu(b, a, nullptr, 1, 1, 8, DType::kF32, 1).code(),
            Code::kInvalidArgument);
  // Empty tensors are fine with null pointers.
  EXPECT_TRUE(
      scaled_masked_softmax_forward_cpu(nullptr, nullptr, nullptr, 0, 4, 4, 4, DType::kF32, 1)
          .ok());
  EXPECT_TRUE(
      scaled_causal_softmax_backward_cpu(nullptr, nullptr, nullptr, 3, 4, 0, DType::kF32, 1).ok());
}

#if COLOSSAL_WITH_CUDA
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// A device copy of `host` at element offset `offset` (offset 1 breaks 16-byte
// alignment, forcing the scalar path), inside guard bands of poison.
class DeviceTensor {
 public:
  static constexpr int64_t kGuard = 64;  // bytes each side
  DeviceTensor(const std::vector<uint8_t>& host, size_t elem, int64_t offset)
      : size_(host.size()), start_(kGuard + offset * elem) {
    total_ = start_ + size_ + kGuard;
    std::vector<uint8_t> image(total_);
    testing::poison(image.data(), total_);
    std::memcpy(image.data() + start_, host.data(), size_);
    ok_ = cudaMalloc(&base_, total_) == cudaSuccess &&
          cudaMemcpy(base_, image.data(), total_, cudaMemcpyHostToDevice) == cudaSuccess;
  }
  ~DeviceTensor() { cudaFree(base_); }
  bool ok() const { return ok_; }
  uint8_t* data() { return base_ + start_; }
  // The tensor bytes; fails the test if a guard byte changed.
  std::vector<uint8_t> read(const std::string& what) {
    std::vector<uint8_t> image(total_);
    EXPECT_EQ(cudaMemcpy(image.data(), base_, total_, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < total_; ++i) {
      if ((i < start_ || i >= start_ + size_) && image[i] != 0xA5) {
        ADD_FAILURE() << what << ": guard byte " << i << " overwritten";
        break;
      }
    }
    return std::vector<uint8_t>(image.begin() + start_, image.begin() + start_ + size_);
  }

 private:
  size_t size_, start_, total_ = 0;
  uint8_t* base_ = nullptr;
  bool ok_ = false;
};

KernelStatus forward_cuda(Mode mode, void* y, const void* x, const uint8_t* mask, const Shape& s,
                          DType dtype, float scale, cudaStream_t stream) {
  if (mode == Mode::kCausal) {
    return scaled_causal_softmax_forward_cuda(y, x, s.batch * s.heads, s.sq, s.sk, dtype, scale,
                                              stream);
  }
  return scaled_masked_softmax_forward_cuda(y, x, mode == Mode::kMasked ? mask : nullptr, s.batch,
                                            s.heads, s.sq, s.sk, dtype, scale, stream);
}

KernelStatus backward_cuda(Mode mode, void* dx, const void* dy, const void* y, const Shape& s,
                           DType dtype, float scale, cudaStream_t stream) {
  if (mode == Mode::kCausal) {
    return scaled_causal_softmax_backward_cuda(dx, dy, y, s.batch * s.heads, s.sq, s.sk, dtype,
                                               scale, stream);
  }
  return scaled_masked_softmax_backward_cuda(dx, dy, y, s.batch, s.heads, s.sq, s.sk, dtype, scale,
                                             stream);
}

// Runs forward then backward on the device (outputs poisoned, dx pre-filled
// with random values to check the overwrite contract) and compares both with
// the CPU path on the same inputs. in_place: y == x and dx == dy.
void check_against_cpu(DType dtype, Mode mode, const Shape& s, int64_t offset, bool in_place,
                       float scale, uint32_t seed, cudaStream_t stream) {
  const std::string what =
      label(dtype, mode, s) + " offset=" + std::to_string(offset) + (in_place ? " in-place" : "");
  const int64_t n = s.elements();
  const size_t elem = dtype_size(dtype), bytes = n * elem;
  const auto x = random_tensor(dtype, n, seed, -4.0f, 4.0f);
  const auto dy = random_tensor(dtype, n, seed + 1, -1.0f, 1.0f);
  const auto mask = random_mask(s, seed + 2);
  std::vector<uint8_t> poison_bytes(bytes);
  testing::poison(poison_bytes.data(), bytes);

  DeviceTensor d_x(x, elem, offset), d_dy(dy, elem, offset), d_mask(mask, 1, offset);
  DeviceTensor d_y(poison_bytes, elem, offset);
  DeviceTensor d_dx(random_tensor(dtype, n, seed + 3, -5.0f, 5.0f), elem, offset);
  ASSERT_TRUE(d_x.ok() && d_dy.ok() && d_mask.ok() && d_y.ok() && d_dx.ok()) << what;
  uint8_t* y_out = in_place ? d_x.data() : d_y.data();
  uint8_t* dx_out = in_place ? d_dy.data() : d_dx.data();
  KernelStatus st = forward_cuda(mode, y_out, d_x.data(), d_mask.data(), s, dtype, scale, stream);
  ASSERT_TRUE(st.ok()) << what << ": " << st.message();
  st = backward_cuda(mode, dx_out, d_dy.data(), y_out, s, dtype, scale, stream);
  ASSERT_TRUE(st.ok()) << what << ": " << st.message();
  CUDA_OK(cudaStreamSynchronize(stream));
  const auto y = (in_place ? d_x : d_y).read(what + " y");
  const auto dx = (in_place ? d_dy : d_dx).read(what + " dx");

  std::vector<uint8_t> want_y(bytes), want_dx(bytes);
  ASSERT_TRUE(forward_cpu(mode, want_y.data(), x.data(), mask, s, dtype, scale).ok());
  // The backward is compared on the device's own y, so forward differences
  // do not compound into it.
  ASSERT_TRUE(backward_cpu(mode, want_dx.data(), dy.data(), y.data(), s, dtype, scale).ok());
  const auto yd = to_doubles(dtype, y.data(), n);
  expect_close(yd, to_doubles(dtype, want_y.data(), n), std::vector<double>(n, 0.0),
               cuda_tolerance(dtype), what + " forward");
  expect_excluded_zero(yd, mask, mode, s, what + " forward");
  const auto dyd = to_doubles(dtype, dy.data(), n);
  expect_close(to_doubles(dtype, dx.data(), n), to_doubles(dtype, want_dx.data(), n),
               backward_spread(dyd, yd, s, scale), cuda_tolerance(dtype), what + " backward");
  expect_excluded_zero(to_doubles(dtype, dx.data(), n), mask, mode, s, what + " backward");
}

#endif  // COLOSSAL_WITH_CUDA

// Every row-length bucket and both sides of each boundary: warp per row (1..1024),
// block per row in registers (1025..16384), staged in shared memory (16385+)
// and streamed past the device's shared memory. On an H100/H200 (227 KiB opt-in)
// the forward stages up to 115712 columns of a 16-bit type (exactly the largest
// copy; 115720 streams) and 57856 of float32; the backward, two copies, half
// that (50000 is staged for 16-bit types, streamed for float32; 70000 streams
// for every dtype). Odd sk (17, 4097, 16385, 20001, 50001) takes the scalar
// path. Row counts that are not multiples of 4 leave warps of the last
// warp-per-row block idle.
TEST(SoftmaxCudaTest, MatchesCpuOverAllPaths) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreate(&stream));
  const int64_t sks[] = {1,    3,     8,     17,    32,    33,    64,    100,   128,    255,   256,
                         257,  512,   1000,  1024,  1025,  2048,  2056,  3000,  4096,   4097,  8192,
                         9000, 16384, 16385, 16392, 20001, 50000, 50001, 70000, 115712, 115720};
  uint32_t seed = 1000;
  for (int64_t sk : sks) {
    // Fewer rows for long rows keeps the CPU reference quick.
    const Shape s = sk <= 1024    ? Shape{2, 3, 5, sk}
                    : sk <= 16384 ? Shape{1, 2, 3, sk}
                                  : Shape{1, 1, 3, sk};
    for (DType dtype : kCudaTypes) {
      for (Mode mode : kModes) {
        for (const Shape& shape : with_causal_variants(mode, s)) {
          for (int64_t offset : {0, 1}) {
            check_against_cpu(dtype, mode, shape, offset, false, 1.7f, seed, stream);
            seed += 4;
            if (::testing::Test::HasFailure()) {
              cudaStreamDestroy(stream);
              return;
            }
          }
        }
      }
    }
  }
  CUDA_OK(cudaStreamDestroy(stream));
#endif
}

// y == x and dx == dy on the device, aligned and not, for each path; plus a
// negative scale and a larger batch on the default stream.
TEST(SoftmaxCudaTest, InPlaceAndNegativeScale) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 5000;
  for (int64_t sk : {int64_t{77}, int64_t{1024}, int64_t{4096}, int64_t{20000}, int64_t{50000}}) {
    for (DType dtype : kCudaTypes) {
      for (Mode mode : kModes) {
        for (int64_t offset : {0, 1}) {
          check_against_cpu(dtype, mode, Shape{1, 2, 3, sk}, offset, true, 0.6f, seed, nullptr);
          check_against_cpu(dtype, mode, Shape{1, 2, 3, sk}, offset, false, -0.9f, seed + 4,
                            nullptr);
          seed += 8;
        }
      }
    }
  }
  check_against_cpu(DType::kBF16, Mode::kMasked, Shape{4, 12, 64, 1024}, 0, false, 0.125f, 9,
                    nullptr);
  check_against_cpu(DType::kF16, Mode::kCausal, Shape{2, 4, 256, 256}, 0, false, 0.125f, 19,
                    nullptr);
  check_against_cpu(DType::kBF16, Mode::kCausal, Shape{1, 1, 1536, 1536}, 0, false, 0.125f, 29,
                    nullptr);
  // A mask of over 4 MiB per batch: the masked forward visits rows head-minor.
  check_against_cpu(DType::kBF16, Mode::kMasked, Shape{2, 3, 1030, 4096}, 0, false, 0.125f, 49,
                    nullptr);
  check_against_cpu(DType::kF32, Mode::kCausal, Shape{1, 1, 100, 20000}, 0, false, 0.125f, 39,
                    nullptr);
  // Staged long rows through a mask of over 4 MiB (head-minor order), its last
  // row fully masked; bfloat16 and float32 with a negative scale.
  check_against_cpu(DType::kBF16, Mode::kMasked, Shape{1, 2, 84, 50000}, 0, false, 0.125f, 59,
                    nullptr);
  check_against_cpu(DType::kF32, Mode::kMasked, Shape{1, 2, 84, 50000}, 0, false, -0.125f, 69,
                    nullptr);
#endif
}

TEST(SoftmaxCudaTest, RejectsBadArguments) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  void* p = nullptr;
  CUDA_OK(cudaMalloc(&p, 256));
  uint8_t* b = static_cast<uint8_t*>(p);
  EXPECT_EQ(
      scaled_masked_softmax_forward_cuda(nullptr, b, nullptr, 1, 1, 1, 8, DType::kF32, 1, nullptr)
          .code(),
      Code::kInvalidArgument);
  EXPECT_EQ(
      scaled_masked_softmax_forward_cuda(b, b, nullptr, 1, 1, 1, 8, DType::kF64, 1, nullptr).code(),
      Code::kUnsupported);
  EXPECT_EQ(scaled_causal_softmax_forward_cuda(b, b, -1, 1, 8, DType::kF32, 1, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(scaled_causal_softmax_forward_cuda(b + 4, b, 1, 1, 8, DType::kF32, 1, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(
      scaled_masked_softmax_backward_cuda(b + 4, b, b + 128, 1, 1, 1, 8, DType::kF32, 1, nullptr)
          .code(),
      Code::kInvalidArgument);
  EXPECT_EQ(
      scaled_causal_softmax_backward_cuda(b, nullptr, b, 1, 1, 8, DType::kBF16, 1, nullptr).code(),
      Code::kInvalidArgument);
  EXPECT_TRUE(scaled_causal_softmax_backward_cuda(nullptr, nullptr, nullptr, 0, 1, 8, DType::kF32,
                                                  1, nullptr)
                  .ok());
  CUDA_OK(cudaFree(p));
#endif
}

}  // namespace
}  // namespace colossal::kernels::softmax
