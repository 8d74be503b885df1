// kernels/elementwise: the CPU path against independent references (float64 /
// long double arithmetic, integer wrap computed in uint64), and the CUDA path
// against the CPU path bit for bit, on fresh random data of many sizes and
// alignments, with poisoned guard bands around every output.
//
// Tolerances of the CPU path against the exact result (one rounding to the
// output type, doubled, plus the smallest subnormal for results that cancel):
//   float32 2^-23 relative, float16 2^-10, bfloat16 2^-7, float64 2^-52;
// integers and every cast are exact. CUDA == CPU is tested with memcmp.
#include "kernels/elementwise/elementwise.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/common/half.h"
#include "tests/util/gpu_test.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::elementwise {
namespace {

constexpr DType kAllTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64,
                               DType::kI32, DType::kI64, DType::kU8,  DType::kU16};
constexpr DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};
constexpr BinaryOp kAllOps[] = {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul};
constexpr int64_t kCpuSizes[] = {1, 3, 17, 1000, 4097};

using Bytes = std::vector<uint8_t>;

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// n random elements of `dtype`: floats in [-range, range) (never all zero),
// integers over their whole range (so add/sub/mul wrap).
Bytes random_buffer(DType dtype, int64_t n, uint32_t seed, double range = 4.0) {
  Bytes bytes(n * dtype_size(dtype));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> real(-range, range);
  const KernelStatus s = dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(bytes.data());
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (kIsHalf<T>) {
        p[i] = from_float<T>(static_cast<float>(real(rng)));
      } else if constexpr (std::is_floating_point_v<T>) {
        p[i] = static_cast<T>(real(rng));
      } else {
        p[i] = static_cast<T>(rng());  // modular: any bit pattern
      }
    }
    return KernelStatus();
  });
  EXPECT_TRUE(s.ok());
  return bytes;
}

// Element i as long double (exact for every dtype, int64 included).
long double element(DType dtype, const Bytes& bytes, int64_t i) {
  long double v = 0;
  (void)dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    v = static_cast<long double>(to_math(reinterpret_cast<const T*>(bytes.data())[i]));
    return KernelStatus();
  });
  return v;
}

// Raw bits of element i (for NaN checks).
uint64_t element_bits(DType dtype, const Bytes& bytes, int64_t i) {
  uint64_t bits = 0;
  std::memcpy(&bits, bytes.data() + i * dtype_size(dtype), dtype_size(dtype));
  return bits;
}

double rel_tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32: return std::ldexp(1.0, -23);
    case DType::kF16: return std::ldexp(1.0, -10);
    case DType::kBF16: return std::ldexp(1.0, -7);
    case DType::kF64: return std::ldexp(1.0, -52);
    default: return 0;
  }
}
double abs_tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32: return std::ldexp(1.0, -149);
    case DType::kF16: return std::ldexp(1.0, -24);
    case DType::kBF16: return std::ldexp(1.0, -133);
    case DType::kF64: return 0;
    default: return 0;
  }
}

// Integer a op b modulo 2^bits, sign-extended for signed types: computed in
// uint64 (independently of the kernels' widened-unsigned arithmetic).
long double wrap_reference(DType dtype, BinaryOp op, long double a, long double b) {
  const uint64_t ua = static_cast<uint64_t>(static_cast<int64_t>(a));
  const uint64_t ub = static_cast<uint64_t>(static_cast<int64_t>(b));
  uint64_t r = op == BinaryOp::kAdd ? ua + ub : op == BinaryOp::kSub ? ua - ub : ua * ub;
  const int bits = static_cast<int>(dtype_size(dtype) * 8);
  const bool is_signed = dtype == DType::kI32 || dtype == DType::kI64;
  if (bits < 64) {
    r &= (uint64_t{1} << bits) - 1;
    if (is_signed && (r >> (bits - 1)) & 1) return static_cast<long double>(static_cast<int64_t>(r) - (int64_t{1} << bits));
  }
  if (is_signed) return static_cast<long double>(static_cast<int64_t>(r));
  return static_cast<long double>(r);
}

std::string label(DType dtype, const char* what, int64_t n) {
  return std::string(dtype_name(dtype)) + "/" + what + "/n=" + std::to_string(n);
}

// Asserts |got - want| <= tolerance of `dtype` for every element.
void expect_close(DType dtype, const Bytes& got, const std::vector<long double>& want,
                  const std::string& what) {
  for (size_t i = 0; i < want.size(); ++i) {
    const long double g = element(dtype, got, i);
    const long double tol = rel_tolerance(dtype) * std::fabs(want[i]) + abs_tolerance(dtype);
    ASSERT_LE(std::fabs(g - want[i]), tol) << what << " i=" << i << " got " << static_cast<double>(g)
                                           << " want " << static_cast<double>(want[i]);
  }
}

TEST(ElementwiseCpuTest, BinaryMatchesReference) {
  uint32_t seed = 1;
  for (DType dtype : kAllTypes) {
    for (BinaryOp op : kAllOps) {
      for (int64_t n : kCpuSizes) {
        const Bytes a = random_buffer(dtype, n, seed++);
        const Bytes b = random_buffer(dtype, n, seed++);
        Bytes out(n * dtype_size(dtype));
        testing::poison(out.data(), out.size());
        ASSERT_TRUE(binary_cpu(out.data(), a.data(), b.data(), n, dtype, op).ok());
        std::vector<long double> want(n);
        for (int64_t i = 0; i < n; ++i) {
          const long double x = element(dtype, a, i), y = element(dtype, b, i);
          if (dtype_is_floating(dtype)) {
            want[i] = op == BinaryOp::kAdd ? x + y : op == BinaryOp::kSub ? x - y : x * y;
          } else {
            want[i] = wrap_reference(dtype, op, x, y);
          }
        }
        expect_close(dtype, out, want, label(dtype, binary_op_name(op), n));
      }
    }
  }
}

TEST(ElementwiseCpuTest, IntegersWrap) {
  int32_t i32a[3] = {std::numeric_limits<int32_t>::max(), 65536, -7};
  int32_t i32b[3] = {1, 65536, 3};
  int32_t i32o[3];
  ASSERT_TRUE(binary_cpu(i32o, i32a, i32b, 1, DType::kI32, BinaryOp::kAdd).ok());
  EXPECT_EQ(i32o[0], std::numeric_limits<int32_t>::min());
  ASSERT_TRUE(binary_cpu(i32o, i32a, i32b, 3, DType::kI32, BinaryOp::kMul).ok());
  EXPECT_EQ(i32o[1], 0);  // 2^32 wraps to 0
  EXPECT_EQ(i32o[2], -21);
  uint8_t u8a[2] = {200, 3}, u8b[2] = {100, 5}, u8o[2];
  ASSERT_TRUE(binary_cpu(u8o, u8a, u8b, 2, DType::kU8, BinaryOp::kAdd).ok());
  EXPECT_EQ(u8o[0], 44);
  ASSERT_TRUE(binary_cpu(u8o, u8a, u8b, 2, DType::kU8, BinaryOp::kSub).ok());
  EXPECT_EQ(u8o[1], 254);
  uint16_t u16a = 65535, u16o = 0;  // 65535^2 overflows int: must still wrap to 1
  ASSERT_TRUE(binary_cpu(&u16o, &u16a, &u16a, 1, DType::kU16, BinaryOp::kMul).ok());
  EXPECT_EQ(u16o, 1);
  int64_t i64a = std::numeric_limits<int64_t>::min(), i64b = 1, i64o = 0;
  ASSERT_TRUE(binary_cpu(&i64o, &i64a, &i64b, 1, DType::kI64, BinaryOp::kSub).ok());
  EXPECT_EQ(i64o, std::numeric_limits<int64_t>::max());
}

TEST(ElementwiseCpuTest, NanResultsAreCanonical) {
  const float inf = std::numeric_limits<float>::infinity();
  float a[2] = {inf, 0.0f}, b[2] = {inf, 0.0f}, out[2];
  uint32_t payload = 0x7fc01234u;  // a NaN with a payload
  std::memcpy(&b[1], &payload, 4);
  ASSERT_TRUE(binary_cpu(out, a, b, 2, DType::kF32, BinaryOp::kSub).ok());
  uint32_t bits[2];
  std::memcpy(bits, out, 8);
  EXPECT_EQ(bits[0], 0x7fffffffu);  // inf - inf; x86 alone would give 0xffc00000
  EXPECT_EQ(bits[1], 0x7fffffffu);  // payload not propagated
}

TEST(ElementwiseCpuTest, InPlace) {
  for (DType dtype : kAllTypes) {
    const int64_t n = 1001;
    const Bytes a = random_buffer(dtype, n, 7), b = random_buffer(dtype, n, 8);
    Bytes want(a.size());
    ASSERT_TRUE(binary_cpu(want.data(), a.data(), b.data(), n, dtype, BinaryOp::kMul).ok());
    Bytes x = a;  // out == a
    ASSERT_TRUE(binary_cpu(x.data(), x.data(), b.data(), n, dtype, BinaryOp::kMul).ok());
    EXPECT_EQ(x, want) << dtype_name(dtype);
    Bytes y = b;  // out == b
    ASSERT_TRUE(binary_cpu(y.data(), a.data(), y.data(), n, dtype, BinaryOp::kMul).ok());
    EXPECT_EQ(y, want) << dtype_name(dtype);
    Bytes sq(a.size()), z = a;  // out == a == b
    ASSERT_TRUE(binary_cpu(sq.data(), a.data(), a.data(), n, dtype, BinaryOp::kMul).ok());
    ASSERT_TRUE(binary_cpu(z.data(), z.data(), z.data(), n, dtype, BinaryOp::kMul).ok());
    EXPECT_EQ(z, sq) << dtype_name(dtype);
  }
}

TEST(ElementwiseCpuTest, ScaleAndAxpbyMatchReference) {
  uint32_t seed = 300;
  const double alpha = -0.7310585786300049, beta = 1.8;
  for (DType dtype : kFloatTypes) {
    // The kernels round alpha/beta to the math type first.
    const long double ma = dtype == DType::kF64 ? alpha : static_cast<float>(alpha);
    const long double mb = dtype == DType::kF64 ? beta : static_cast<float>(beta);
    for (int64_t n : kCpuSizes) {
      const Bytes a = random_buffer(dtype, n, seed++), b = random_buffer(dtype, n, seed++);
      Bytes out(a.size());
      testing::poison(out.data(), out.size());
      ASSERT_TRUE(scale_cpu(out.data(), a.data(), alpha, n, dtype).ok());
      std::vector<long double> want(n);
      for (int64_t i = 0; i < n; ++i) want[i] = ma * element(dtype, a, i);
      expect_close(dtype, out, want, label(dtype, "scale", n));

      testing::poison(out.data(), out.size());
      ASSERT_TRUE(axpby_cpu(out.data(), a.data(), b.data(), alpha, beta, n, dtype).ok());
      for (int64_t i = 0; i < n; ++i) {
        want[i] = ma * element(dtype, a, i) + mb * element(dtype, b, i);
        // Three roundings in the math type (two products, one sum) before the output rounding.
        const long double terms = std::fabs(ma * element(dtype, a, i)) + std::fabs(mb * element(dtype, b, i));
        const double eps = dtype == DType::kF64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
        const long double got = element(dtype, out, i);
        ASSERT_LE(std::fabs(got - want[i]),
                  rel_tolerance(dtype) * std::fabs(want[i]) + 2 * eps * terms + abs_tolerance(dtype))
            << label(dtype, "axpby", n) << " i=" << i;
      }
    }
  }
}

// alpha*a + beta*b with a case where a fused multiply-add would give another
// answer: (1+2^-12)^2 = 1+2^-11+2^-24 rounds to 1+2^-11 in float32, so the
// unfused result is exactly 2^-11; an FMA would keep the 2^-24.
TEST(ElementwiseCpuTest, AxpbyIsNotFused) {
  const float a = 1.0f + std::ldexp(1.0f, -12), b = -1.0f;
  const double alpha = 1.0 + std::ldexp(1.0, -12);
  float out = 0;
  ASSERT_TRUE(axpby_cpu(&out, &a, &b, alpha, 1.0, 1, DType::kF32).ok());
  EXPECT_EQ(out, std::ldexp(1.0f, -11));
}

TEST(ElementwiseCpuTest, ScaleAndAxpbyRejectIntegers) {
  int32_t x[2] = {1, 2}, y[2];
  for (DType dtype : {DType::kI32, DType::kI64, DType::kU8, DType::kU16}) {
    EXPECT_EQ(scale_cpu(y, x, 2.0, 1, dtype).code(), KernelStatus::Code::kUnsupported);
    EXPECT_EQ(axpby_cpu(y, x, x, 2.0, 1.0, 1, dtype).code(), KernelStatus::Code::kUnsupported);
  }
}

// ---- cast

// x rounded to nearest even in a binary format with p significant bits,
// smallest normal exponent emin and largest exponent emax (long double holds
// every input exactly, int64 included).
long double round_to_format(long double x, int p, int emin, int emax) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  int e = 0;
  std::frexp(std::fabs(x), &e);  // |x| = f * 2^e, f in [0.5, 1)
  const int exponent = std::max(e - 1, emin);
  const long double ulp = std::ldexp(1.0L, exponent - (p - 1));
  const long double r = std::nearbyint(x / ulp) * ulp;  // default mode: nearest even
  const long double max_finite = std::ldexp(2.0L - std::ldexp(1.0L, 1 - p), emax);
  if (std::fabs(r) > max_finite) return x < 0 ? -INFINITY : INFINITY;
  return r;
}

long double float_reference(DType dtype, long double x) {
  switch (dtype) {
    case DType::kF32: return round_to_format(x, 24, -126, 127);
    case DType::kF16: return round_to_format(x, 11, -14, 15);
    case DType::kBF16: return round_to_format(x, 8, -126, 127);
    case DType::kF64: return round_to_format(x, 53, -1022, 1023);
    default: return 0;
  }
}

// Float -> integer: truncate, saturate, NaN -> 0. Integer -> integer: wrap.
long double int_reference(DType out, DType in, long double x) {
  const int bits = static_cast<int>(dtype_size(out) * 8);
  const bool is_signed = out == DType::kI32 || out == DType::kI64;
  const long double lo = is_signed ? -std::ldexp(1.0L, bits - 1) : 0.0L;
  const long double hi = std::ldexp(1.0L, bits - (is_signed ? 1 : 0)) - 1;
  if (dtype_is_floating(in)) {
    if (std::isnan(x)) return 0;
    const long double t = std::trunc(x);
    return t < lo ? lo : t > hi ? hi : t;
  }
  uint64_t u = static_cast<uint64_t>(static_cast<int64_t>(x));
  if (bits < 64) u &= (uint64_t{1} << bits) - 1;
  if (is_signed && bits < 64 && ((u >> (bits - 1)) & 1)) {
    return static_cast<long double>(static_cast<int64_t>(u) - (int64_t{1} << bits));
  }
  return is_signed ? static_cast<long double>(static_cast<int64_t>(u)) : static_cast<long double>(u);
}

// Inputs for casts: random values plus the edge cases of each source type.
Bytes cast_input(DType dtype, int64_t n, uint32_t seed) {
  Bytes bytes = random_buffer(dtype, n, seed, 300.0);
  const double specials[] = {NAN, INFINITY, -INFINITY, -0.0, 0.5, -0.5, 2.5, -1.9, 255.5, 256.0,
                             65535.9, 65536.0, -32769.0, 3e9, -3e9, 1e19, -1e19, 1e30, 65520.0,
                             1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), 1e-7, 6e-8, 1e-40};
  (void)dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(bytes.data());
    int64_t i = 0;
    if constexpr (std::is_floating_point_v<T> || kIsHalf<T>) {
      for (double v : specials) {
        if (i < n) p[i++] = from_math<T>(static_cast<typename CpuMathType<T>::type>(v));
      }
    } else {
      const T edges[] = {std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), T(0), T(1),
                         static_cast<T>(-1), static_cast<T>(16842753), static_cast<T>(0x7fffffbf),
                         static_cast<T>((int64_t{1} << 60) + (int64_t{1} << 52) + 1)};
      for (T v : edges) {
        if (i < n) p[i++] = v;
      }
    }
    return KernelStatus();
  });
  return bytes;
}

TEST(ElementwiseCpuTest, CastEveryPairMatchesReference) {
  uint32_t seed = 500;
  for (DType out_t : kAllTypes) {
    for (DType in_t : kAllTypes) {
      for (int64_t n : {int64_t{1}, int64_t{40}, int64_t{4097}}) {
        const Bytes in = cast_input(in_t, n, seed++);
        Bytes out(n * dtype_size(out_t));
        testing::poison(out.data(), out.size());
        ASSERT_TRUE(cast_cpu(out.data(), in.data(), n, out_t, in_t).ok());
        for (int64_t i = 0; i < n; ++i) {
          const long double x = element(in_t, in, i);
          const long double got = element(out_t, out, i);
          const std::string where = std::string(dtype_name(in_t)) + "->" + dtype_name(out_t) +
                                    " i=" + std::to_string(i) + " x=" + std::to_string(static_cast<double>(x));
          if (!dtype_is_floating(out_t)) {
            ASSERT_EQ(got, int_reference(out_t, in_t, x)) << where;
          } else if (std::isnan(x)) {
            ASSERT_TRUE(std::isnan(got)) << where;
            if (in_t != out_t) {
              const uint64_t canonical = out_t == DType::kF32 ? 0x7fffffffu
                                         : out_t == DType::kF64 ? 0x7fffffffffffffffull
                                                                : 0x7fffu;
              ASSERT_EQ(element_bits(out_t, out, i), canonical) << where;
            }
          } else {
            const long double want = float_reference(out_t, x);
            ASSERT_EQ(got, want) << where << " want " << static_cast<double>(want);
            ASSERT_EQ(std::signbit(got), std::signbit(want)) << where;
          }
        }
      }
    }
  }
}

// Cases where rounding through float32 first would round twice the wrong way.
TEST(ElementwiseCpuTest, CastRoundsOnce) {
  const double d = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);  // just above a half tie
  Half h{0};
  ASSERT_TRUE(cast_cpu(&h, &d, 1, DType::kF16, DType::kF64).ok());
  EXPECT_EQ(h.bits, 0x3c01);  // via float32 it would be the tie, then even: 0x3c00
  const int32_t i = 16842753;  // 2^24 + 2^16 + 1: above a bfloat16 tie
  BFloat16 b{0};
  ASSERT_TRUE(cast_cpu(&b, &i, 1, DType::kBF16, DType::kI32).ok());
  EXPECT_EQ(b.bits, 0x4b81);
  const int64_t l = (int64_t{1} << 60) + (int64_t{1} << 52) + 1;
  ASSERT_TRUE(cast_cpu(&b, &l, 1, DType::kBF16, DType::kI64).ok());
  EXPECT_EQ(b.bits, 0x5d81);
}

TEST(ElementwiseCpuTest, CastKnownValues) {
  const float f[6] = {300.7f, -1.9f, NAN, INFINITY, -INFINITY, -0.5f};
  uint8_t u8[6];
  ASSERT_TRUE(cast_cpu(u8, f, 6, DType::kU8, DType::kF32).ok());
  EXPECT_EQ(u8[0], 255);
  EXPECT_EQ(u8[1], 0);
  EXPECT_EQ(u8[2], 0);
  EXPECT_EQ(u8[3], 255);
  EXPECT_EQ(u8[4], 0);
  int32_t i32[6];
  ASSERT_TRUE(cast_cpu(i32, f, 6, DType::kI32, DType::kF32).ok());
  EXPECT_EQ(i32[1], -1);
  EXPECT_EQ(i32[2], 0);
  EXPECT_EQ(i32[3], std::numeric_limits<int32_t>::max());
  EXPECT_EQ(i32[4], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(i32[5], 0);
  const int32_t m1[2] = {-1, 65537};
  uint16_t u16[2];
  ASSERT_TRUE(cast_cpu(u16, m1, 2, DType::kU16, DType::kI32).ok());
  EXPECT_EQ(u16[0], 65535);
  EXPECT_EQ(u16[1], 1);
  // In place between dtypes of one size is allowed; of different sizes it is not.
  int32_t v[2] = {-3, 7};
  ASSERT_TRUE(cast_cpu(v, v, 2, DType::kF32, DType::kI32).ok());
  float back[2];
  std::memcpy(back, v, 8);
  EXPECT_EQ(back[0], -3.0f);
  EXPECT_EQ(back[1], 7.0f);
  EXPECT_EQ(cast_cpu(v, v, 2, DType::kF16, DType::kI32).code(), KernelStatus::Code::kInvalidArgument);
}

TEST(ElementwiseCpuTest, FillKnownValues) {
  Half h[5];
  testing::poison(h, sizeof(h));
  ASSERT_TRUE(fill_cpu(h, 0.1, 5, DType::kF16).ok());
  for (const Half& x : h) EXPECT_EQ(x.bits, 0x2e66);
  BFloat16 b[3];
  ASSERT_TRUE(fill_cpu(b, 1.0 / 3.0, 3, DType::kBF16).ok());
  for (const BFloat16& x : b) EXPECT_EQ(x.bits, 0x3eab);
  int32_t i[2];
  ASSERT_TRUE(fill_cpu(i, 1e10, 2, DType::kI32).ok());
  EXPECT_EQ(i[1], std::numeric_limits<int32_t>::max());
  int64_t l[2];
  ASSERT_TRUE(fill_cpu(l, -2.7, 2, DType::kI64).ok());
  EXPECT_EQ(l[0], -2);
  uint8_t u[3] = {1, 1, 1};
  ASSERT_TRUE(fill_cpu(u, NAN, 3, DType::kU8).ok());
  EXPECT_EQ(u[2], 0);
  double d[2];
  ASSERT_TRUE(fill_cpu(d, 0.1, 2, DType::kF64).ok());
  EXPECT_EQ(d[1], 0.1);
}

// fill's value equals cast_cpu from float64 of the same value, for every dtype.
TEST(ElementwiseCpuTest, FillEqualsCast) {
  for (DType dtype : kAllTypes) {
    for (double value : {-1234.5678, 0.1, 70000.25, -0.0, 1e-30}) {
      const int64_t n = 37;
      Bytes out(n * dtype_size(dtype)), want(dtype_size(dtype));
      testing::poison(out.data(), out.size());
      ASSERT_TRUE(fill_cpu(out.data(), value, n, dtype).ok());
      ASSERT_TRUE(cast_cpu(want.data(), &value, 1, dtype, DType::kF64).ok());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::memcmp(out.data() + i * dtype_size(dtype), want.data(), dtype_size(dtype)), 0)
            << dtype_name(dtype) << " value=" << value;
      }
    }
  }
}

TEST(ElementwiseCpuTest, RejectsBadArguments) {
  float x[2] = {1, 2}, y[2];
  constexpr auto kInvalid = KernelStatus::Code::kInvalidArgument;
  constexpr auto kUnsupported = KernelStatus::Code::kUnsupported;
  EXPECT_EQ(binary_cpu(nullptr, x, x, 1, DType::kF32, BinaryOp::kAdd).code(), kInvalid);
  EXPECT_EQ(binary_cpu(y, x, nullptr, 1, DType::kF32, BinaryOp::kAdd).code(), kInvalid);
  EXPECT_EQ(binary_cpu(y, x, x, -1, DType::kF32, BinaryOp::kAdd).code(), kInvalid);
  EXPECT_EQ(binary_cpu(y, x, x, 1, DType::kF32, static_cast<BinaryOp>(9)).code(), kInvalid);
  EXPECT_EQ(binary_cpu(y, x, x, 1, static_cast<DType>(99), BinaryOp::kAdd).code(), kUnsupported);
  EXPECT_TRUE(binary_cpu(nullptr, nullptr, nullptr, 0, DType::kF32, BinaryOp::kAdd).ok());
  EXPECT_EQ(scale_cpu(y, nullptr, 2.0, 1, DType::kF32).code(), kInvalid);
  EXPECT_EQ(axpby_cpu(y, x, x, 1.0, 1.0, -2, DType::kF32).code(), kInvalid);
  EXPECT_EQ(cast_cpu(y, nullptr, 1, DType::kF32, DType::kF16).code(), kInvalid);
  EXPECT_EQ(cast_cpu(y, x, 1, static_cast<DType>(99), DType::kF32).code(), kUnsupported);
  EXPECT_EQ(cast_cpu(y, x, 1, DType::kF32, static_cast<DType>(99)).code(), kUnsupported);
  EXPECT_EQ(fill_cpu(nullptr, 1.0, 1, DType::kF32).code(), kInvalid);
  EXPECT_EQ(fill_cpu(y, 1.0, 1, static_cast<DType>(99)).code(), kUnsupported);
  EXPECT_TRUE(fill_cpu(nullptr, 1.0, 0, DType::kF32).ok());
}

// ---- CUDA against CPU, bit for bit.

#if COLOSSAL_WITH_CUDA
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

constexpr int64_t kGuard = 64;  // poisoned elements on each side of every output

// A device copy of `host` starting `offset` elements into an allocation.
class DeviceBuffer {
 public:
  DeviceBuffer(const Bytes& host, size_t elem, int64_t offset) : offset_bytes_(offset * elem) {
    EXPECT_EQ(cudaMalloc(&base_, host.size() + offset_bytes_ + 16), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(base_ + offset_bytes_, host.data(), host.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(base_); }
  uint8_t* get() { return base_ + offset_bytes_; }

 private:
  uint8_t* base_ = nullptr;
  size_t offset_bytes_;
};

// Output of n elements with kGuard poisoned elements on each side.
class GuardedOutput {
 public:
  GuardedOutput(DType dtype, int64_t n, int64_t offset)
      : es_(dtype_size(dtype)), n_(n), host_((n + 2 * kGuard) * es_) {
    testing::poison(host_.data(), host_.size());
    dev_ = std::make_unique<DeviceBuffer>(host_, es_, offset);
  }
  uint8_t* out() { return dev_->get() + kGuard * es_; }
  // The device result, guards included.
  Bytes fetch() {
    Bytes got(host_.size());
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(got.data(), dev_->get(), got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return got;
  }
  // `cpu` (n elements) between the same poisoned guards.
  Bytes expected(const Bytes& cpu) const {
    Bytes want = host_;
    std::memcpy(want.data() + kGuard * es_, cpu.data(), n_ * es_);
    return want;
  }

 private:
  size_t es_;
  int64_t n_;
  Bytes host_;
  std::unique_ptr<DeviceBuffer> dev_;
};
#endif

constexpr int64_t kCudaSizes[] = {1, 3, 17, 1000, 4097, (1 << 20) + 13};

TEST(ElementwiseCudaTest, BinaryMatchesCpuBitForBit) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 1000;
  for (DType dtype : kAllTypes) {
    const size_t es = dtype_size(dtype);
    for (BinaryOp op : kAllOps) {
      for (int64_t n : kCudaSizes) {
        for (int64_t offset : {0, 1}) {  // 1: not 16-byte aligned -> scalar kernel
          const Bytes a = random_buffer(dtype, n, seed++), b = random_buffer(dtype, n, seed++);
          DeviceBuffer da(a, es, offset), db(b, es, offset);
          GuardedOutput out(dtype, n, offset);
          ASSERT_TRUE(binary_cuda(out.out(), da.get(), db.get(), n, dtype, op, nullptr).ok());
          Bytes cpu(n * es);
          ASSERT_TRUE(binary_cpu(cpu.data(), a.data(), b.data(), n, dtype, op).ok());
          ASSERT_EQ(out.fetch(), out.expected(cpu))
              << label(dtype, binary_op_name(op), n) << " offset=" << offset;
        }
      }
    }
  }
#endif
}

TEST(ElementwiseCudaTest, InPlaceMatchesCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  for (DType dtype : kAllTypes) {
    const int64_t n = 100003;
    const size_t es = dtype_size(dtype);
    const Bytes a = random_buffer(dtype, n, 41), b = random_buffer(dtype, n, 42);
    Bytes want(n * es);
    ASSERT_TRUE(binary_cpu(want.data(), a.data(), b.data(), n, dtype, BinaryOp::kSub).ok());
    DeviceBuffer da(a, es, 0), db(b, es, 0);
    ASSERT_TRUE(binary_cuda(da.get(), da.get(), db.get(), n, dtype, BinaryOp::kSub, nullptr).ok());
    Bytes got(n * es);
    CUDA_OK(cudaMemcpy(got.data(), da.get(), got.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(got, want) << dtype_name(dtype) << " out == a";
    ASSERT_TRUE(binary_cuda(db.get(), da.get(), db.get(), n, dtype, BinaryOp::kAdd, nullptr).ok());
    Bytes want2(n * es);
    ASSERT_TRUE(binary_cpu(want2.data(), want.data(), b.data(), n, dtype, BinaryOp::kAdd).ok());
    CUDA_OK(cudaMemcpy(got.data(), db.get(), got.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(got, want2) << dtype_name(dtype) << " out == b";
  }
#endif
}

TEST(ElementwiseCudaTest, ScaleAndAxpbyMatchCpuBitForBit) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 2000;
  for (DType dtype : kFloatTypes) {
    const size_t es = dtype_size(dtype);
    for (int64_t n : kCudaSizes) {
      for (int64_t offset : {0, 1}) {
        const Bytes a = random_buffer(dtype, n, seed++), b = random_buffer(dtype, n, seed++);
        DeviceBuffer da(a, es, offset), db(b, es, offset);
        GuardedOutput s_out(dtype, n, offset), x_out(dtype, n, offset);
        ASSERT_TRUE(scale_cuda(s_out.out(), da.get(), 0.3, n, dtype, nullptr).ok());
        ASSERT_TRUE(
            axpby_cuda(x_out.out(), da.get(), db.get(), 0.9, -1.7, n, dtype, nullptr).ok());
        Bytes cpu(n * es);
        ASSERT_TRUE(scale_cpu(cpu.data(), a.data(), 0.3, n, dtype).ok());
        ASSERT_EQ(s_out.fetch(), s_out.expected(cpu)) << label(dtype, "scale", n);
        ASSERT_TRUE(axpby_cpu(cpu.data(), a.data(), b.data(), 0.9, -1.7, n, dtype).ok());
        ASSERT_EQ(x_out.fetch(), x_out.expected(cpu)) << label(dtype, "axpby", n);
      }
    }
  }
  // The unfused case of AxpbyIsNotFused, on the device.
  const float a = 1.0f + std::ldexp(1.0f, -12), b = -1.0f;
  float* d = nullptr;
  CUDA_OK(cudaMalloc(&d, 3 * sizeof(float)));
  CUDA_OK(cudaMemcpy(d, &a, 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d + 1, &b, 4, cudaMemcpyHostToDevice));
  ASSERT_TRUE(axpby_cuda(d + 2, d, d + 1, 1.0 + std::ldexp(1.0, -12), 1.0, 1, DType::kF32, nullptr).ok());
  float out = 0;
  CUDA_OK(cudaMemcpy(&out, d + 2, 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(d));
  EXPECT_EQ(out, std::ldexp(1.0f, -11));
#endif
}

TEST(ElementwiseCudaTest, CastEveryPairMatchesCpuBitForBit) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 3000;
  for (DType out_t : kAllTypes) {
    for (DType in_t : kAllTypes) {
      for (int64_t n : {int64_t{1}, int64_t{40}, int64_t{4097}, int64_t{(1 << 18) + 5}}) {
        for (int64_t offset : {0, 1}) {
          const Bytes in = cast_input(in_t, n, seed++);
          DeviceBuffer din(in, dtype_size(in_t), offset);
          GuardedOutput out(out_t, n, offset);
          ASSERT_TRUE(cast_cuda(out.out(), din.get(), n, out_t, in_t, nullptr).ok());
          Bytes cpu(n * dtype_size(out_t));
          ASSERT_TRUE(cast_cpu(cpu.data(), in.data(), n, out_t, in_t).ok());
          ASSERT_EQ(out.fetch(), out.expected(cpu))
              << dtype_name(in_t) << "->" << dtype_name(out_t) << " n=" << n << " offset=" << offset;
        }
      }
    }
  }
#endif
}

TEST(ElementwiseCudaTest, FillMatchesCpuBitForBit) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  for (DType dtype : kAllTypes) {
    for (double value : {0.1, -1234.5678, 1e10, static_cast<double>(NAN), 0.0}) {
      for (int64_t n : kCudaSizes) {
        for (int64_t offset : {0, 1}) {
          GuardedOutput out(dtype, n, offset);
          ASSERT_TRUE(fill_cuda(out.out(), value, n, dtype, nullptr).ok());
          Bytes cpu(n * dtype_size(dtype));
          ASSERT_TRUE(fill_cpu(cpu.data(), value, n, dtype).ok());
          ASSERT_EQ(out.fetch(), out.expected(cpu)) << label(dtype, "fill", n) << " value=" << value;
        }
      }
    }
  }
#endif
}

TEST(ElementwiseCudaTest, RejectsBadArguments) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  constexpr auto kInvalid = KernelStatus::Code::kInvalidArgument;
  constexpr auto kUnsupported = KernelStatus::Code::kUnsupported;
  void* d = nullptr;
  CUDA_OK(cudaMalloc(&d, 64));
  EXPECT_EQ(binary_cuda(nullptr, d, d, 4, DType::kF32, BinaryOp::kAdd, nullptr).code(), kInvalid);
  EXPECT_EQ(binary_cuda(d, d, d, -4, DType::kF32, BinaryOp::kAdd, nullptr).code(), kInvalid);
  EXPECT_EQ(binary_cuda(d, d, d, 4, DType::kF32, static_cast<BinaryOp>(9), nullptr).code(), kInvalid);
  EXPECT_EQ(binary_cuda(d, d, d, 4, static_cast<DType>(99), BinaryOp::kAdd, nullptr).code(),
            kUnsupported);
  EXPECT_TRUE(binary_cuda(nullptr, nullptr, nullptr, 0, DType::kF32, BinaryOp::kAdd, nullptr).ok());
  EXPECT_EQ(scale_cuda(d, d, 2.0, 4, DType::kI32, nullptr).code(), kUnsupported);
  EXPECT_EQ(axpby_cuda(d, d, d, 2.0, 1.0, 4, DType::kU8, nullptr).code(), kUnsupported);
  EXPECT_EQ(axpby_cuda(d, nullptr, d, 2.0, 1.0, 4, DType::kF32, nullptr).code(), kInvalid);
  EXPECT_EQ(cast_cuda(d, d, 4, DType::kF64, DType::kF32, nullptr).code(), kInvalid);  // in place, sizes differ
  EXPECT_EQ(cast_cuda(d, d, 4, static_cast<DType>(99), DType::kF32, nullptr).code(), kUnsupported);
  EXPECT_EQ(fill_cuda(nullptr, 1.0, 4, DType::kF32, nullptr).code(), kInvalid);
  EXPECT_EQ(fill_cuda(d, 1.0, -1, DType::kF32, nullptr).code(), kInvalid);
  CUDA_OK(cudaFree(d));
#endif
}

}  // namespace
}  // namespace colossal::kernels::elementwise
