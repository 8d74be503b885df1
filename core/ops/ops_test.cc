// core/ops: every op on the CPU against a float64 reference computed from the
// exact stored inputs (fresh random data, odd shapes, outputs poisoned first),
// every op on CUDA against the CPU (GPU cases skip without a device), the
// RNG contract (fresh numbers per call, reproducible, CPU == CUDA), and the
// error messages.
//
// Tolerances. u(t) is the unit roundoff of dtype t (float32 2^-24, float16
// 2^-11, bfloat16 2^-8, float64 2^-53), m the math type's (float32 for the
// 16-bit types and float32, float64 for float64), d(t) t's smallest subnormal
// (what rounding can lose near zero). ref is the float64 result from the
// stored inputs.
//   add/sub/mul   (u(t) + u(m)) |ref| + d(t): one rounding in m, one to t
//   scale         (u(t) + 2 u(m)) |ref| + d(t): alpha rounded to m, product, result
//   axpby         u(t) |ref| + 3 u(m) (|alpha a| + |beta b|) + d(t): alpha, beta,
//                 both products and the sum round in m (the sum may cancel)
//   cast, fill    to floats: u(t) |x| + d(t); to integers: exact (truncation,
//                 saturation, wrapping as elementwise.h states)
//   integers      add/sub/mul exact modulo 2^bits
//   sum, mean     the CPU order's worst case (kernels/reduction/reduction_test.cc):
//                 u(acc) * depth * sum|x| + u(out) |ref|, depth = min(n, 1024) / 8
//                 + 4 + ceil(log2(n / 1024)) additions; mean divides by n
//   max           exact (rounded once when float64 input gives float32 out)
//   uniform       3 u(m) (|lo| + |hi - lo|) + u(t) |ref| + d(t): range, product, sum
//   normal        std * 64 * 2^-24 * (1 + r) + 2 u(m) |mean| + u(t) |ref| + d(t): the
//                 kernel's log/sin/cos polynomials are good to a few float32 ulps of
//                 r = sqrt(-2 ln u1) <= 5.77; 64 ulps leaves room (the worst seen is
//                 printed)
// CUDA vs CPU: elementwise, cast, fill, max and random fills are promised
// bit-identical and compared with memcmp; sum and mean differ in summation
// order only: |gpu - cpu| <= 32 u(acc) sqrt(n) max|x| + 2 u(out) |cpu| on
// zero-mean data, here |x| < 1 (the kernel test's bound, which keeps more than
// 10 standard deviations of the rounding walk; mean divided by n).
#include "core/ops/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/dispatch.h"
#include "kernels/random/philox.h"
#include "tests/util/gpu_test.h"
#include "tests/util/test_data.h"

namespace colossal::core::ops {
namespace {

constexpr DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};
constexpr DType kAllTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64,
                               DType::kI32, DType::kI64, DType::kU8,   DType::kU16};

template <typename T>
T must(absl::StatusOr<T> v) {
  COLOSSAL_CHECK_OK(v.status());
  return *std::move(v);
}

bool contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

// Default options but the seed (set by name: a designated initializer that
// skips the members before it draws GCC's -Wmissing-field-initializers).
ContextOptions seeded(uint64_t seed) {
  ContextOptions options;
  options.seed = seed;
  return options;
}

std::unique_ptr<Context> cpu_context(uint64_t seed = 0) {
  return must(Context::create(Device::cpu(), seeded(seed)));
}

// ---- Numbers of a dtype.

double unit_roundoff(DType t) {
  switch (t) {
    case DType::kF32: return std::ldexp(1.0, -24);
    case DType::kF16: return std::ldexp(1.0, -11);
    case DType::kBF16: return std::ldexp(1.0, -8);
    case DType::kF64: return std::ldexp(1.0, -53);
    default: return 0;
  }
}
double math_roundoff(DType t) {
  return t == DType::kF64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
}
double smallest_subnormal(DType t) {
  switch (t) {
    case DType::kF32: return std::numeric_limits<float>::denorm_min();
    case DType::kF16: return std::ldexp(1.0, -24);
    case DType::kBF16: return std::ldexp(1.0, -133);
    case DType::kF64: return std::numeric_limits<double>::denorm_min();
    default: return 0;
  }
}

// ---- Host tensors, element access.

// `shape` of `dtype` on the CPU, starting `misalign` elements into its storage.
Tensor host_empty(const Shape& shape, DType dtype, int64_t misalign = 0) {
  Tensor storage = must(Tensor::empty({shape.numel() + misalign}, dtype, Stream::cpu()));
  return must(must(storage.slice(misalign, misalign + shape.numel())).reshape(shape.dims()));
}

Tensor poisoned(const Shape& shape, DType dtype) {
  Tensor t = host_empty(shape, dtype);
  testing::poison(t.raw_data(), t.nbytes());
  return t;
}

double get(const Tensor& t, int64_t i) {
  double v = 0;
  (void)kernels::dispatch_all_types(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    v = static_cast<double>(kernels::to_math(static_cast<const T*>(t.raw_data())[i]));
    return kernels::KernelStatus();
  });
  return v;
}

int64_t get_int(const Tensor& t, int64_t i) {
  int64_t v = 0;
  (void)kernels::dispatch_all_types(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T>) v = static_cast<T*>(t.raw_data())[i];
    return kernels::KernelStatus();
  });
  return v;
}

// Integer `v` wrapped to dtype t (two's complement), as an int64.
int64_t wrap(DType t, uint64_t v) {
  switch (t) {
    case DType::kI32: return static_cast<int32_t>(v);
    case DType::kU8: return static_cast<uint8_t>(v);
    case DType::kU16: return static_cast<uint16_t>(v);
    default: return static_cast<int64_t>(v);
  }
}

// Fresh random values: floating dtypes uniform in [lo, hi); integer dtypes
// uniform integers in [lo, hi] clipped to the type's range (so +-1e300 means
// every value of the type).
Tensor random_tensor(const Shape& shape, DType dtype, uint32_t seed, double lo = -1.0,
                     double hi = 1.0, int64_t misalign = 0) {
  Tensor t = host_empty(shape, dtype, misalign);
  std::mt19937_64 rng(seed);
  (void)kernels::dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(t.raw_data());
    if constexpr (std::is_integral_v<T>) {
      using L = std::numeric_limits<T>;
      const int64_t a = lo <= double(L::min()) ? int64_t(L::min()) : int64_t(std::ceil(lo));
      const int64_t b = hi >= double(L::max()) ? int64_t(L::max()) : int64_t(std::floor(hi));
      std::uniform_int_distribution<int64_t> dist(a, b);
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(dist(rng));
    } else {
      std::uniform_real_distribution<double> dist(lo, hi);
      for (int64_t i = 0; i < t.numel(); ++i) {
        if constexpr (std::is_same_v<T, double>) {
          p[i] = dist(rng);
        } else {
          p[i] = kernels::from_math<T>(static_cast<float>(dist(rng)));
        }
      }
    }
    return kernels::KernelStatus();
  });
  return t;
}

// Operands for add/sub/mul: floats in [-1, 1), integers over the whole type
// (products and sums wrap).
Tensor any_values(const Shape& shape, DType dtype, uint32_t seed, int64_t misalign = 0) {
  const double range = dtype_is_floating(dtype) ? 1.0 : 1e300;
  return random_tensor(shape, dtype, seed, -range, range, misalign);
}

bool same_bits(const Tensor& x, const Tensor& y) {
  return x.dtype() == y.dtype() && x.shape() == y.shape() &&
         (x.nbytes() == 0 || std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0);
}

// The largest error / tolerance per kind of check, printed by each test that
// compares with a tolerance, so a run shows how much room each bound leaves.
std::map<std::string, double> worst_ratio;

void note_worst(const std::string& what, double ratio) {
  double& w = worst_ratio[what];
  w = std::max(w, ratio);
}

void print_worst() {
  for (const auto& [what, ratio] : worst_ratio) {
    std::printf("  worst error/tolerance %-28s %.3g\n", what.c_str(), ratio);
  }
  worst_ratio.clear();
}

// Every element of floating `got` within tol(i) of want(i).
void expect_near_all(const Tensor& got, const std::function<double(int64_t)>& want,
                     const std::function<double(int64_t)>& tol, const std::string& label,
                     const std::string& what) {
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = get(got, i), w = want(i), e = std::fabs(g - w), t = tol(i);
    if (!(e <= t)) {
      ADD_FAILURE() << label << " element " << i << ": got " << g << ", want " << w << " +- " << t;
      return;
    }
    if (t > 0) worst = std::max(worst, e / t);
  }
  note_worst(what, worst);
}

// Every element of integer `got` equal to want(i).
void expect_eq_all(const Tensor& got, const std::function<int64_t(int64_t)>& want,
                   const std::string& label) {
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (get_int(got, i) != want(i)) {
      ADD_FAILURE() << label << " element " << i << ": got " << get_int(got, i) << ", want "
                    << want(i);
      return;
    }
  }
}

const Shape kShapes[] = {{37}, {7, 13}, {3, 5, 33}, {2, 3, 4, 129}, {1}};

std::string label(absl::string_view op, DType t, const Shape& s) {
  return absl::StrCat(op, " ", dtype_name(t), " ", s.to_string());
}

// ---- Elementwise on the CPU against the reference.

TEST(OpsCpuTest, AddSubMulMatchReference) {
  auto ctx = cpu_context();
  uint32_t seed = 1;
  for (DType t : kAllTypes) {
    for (const Shape& s : kShapes) {
      const Tensor a = any_values(s, t, seed++, /*misalign=*/1), b = any_values(s, t, seed++);
      struct Op {
        const char* name;
        absl::Status (*run)(Context&, Tensor&, const Tensor&, const Tensor&);
        double (*ref)(double, double);
        uint64_t (*ref_int)(uint64_t, uint64_t);
      };
      const Op ops[] = {
          {"add", add, [](double x, double y) { return x + y; },
           [](uint64_t x, uint64_t y) { return x + y; }},
          {"sub", sub, [](double x, double y) { return x - y; },
           [](uint64_t x, uint64_t y) { return x - y; }},
          {"mul", mul, [](double x, double y) { return x * y; },
           [](uint64_t x, uint64_t y) { return x * y; }},
      };
      for (const Op& op : ops) {
        const std::string what = label(op.name, t, s);
        Tensor out = poisoned(s, t);
        ASSERT_TRUE(op.run(*ctx, out, a, b).ok()) << what;
        if (dtype_is_floating(t)) {
          auto ref = [&](int64_t i) { return op.ref(get(a, i), get(b, i)); };
          expect_near_all(
              out, ref,
              [&](int64_t i) {
                return (unit_roundoff(t) + math_roundoff(t)) * std::fabs(ref(i)) +
                       smallest_subnormal(t);
              },
              what, absl::StrCat(op.name, " ", dtype_name(t)));
        } else {
          expect_eq_all(
              out,
              [&](int64_t i) {
                return wrap(t, op.ref_int(uint64_t(get_int(a, i)), uint64_t(get_int(b, i))));
              },
              what);
        }
      }
      // The allocating form gives the same bits.
      Tensor out = poisoned(s, t);
      ASSERT_TRUE(sub(*ctx, out, a, b).ok());
      EXPECT_TRUE(same_bits(must(sub(*ctx, a, b)), out)) << label("sub", t, s);
    }
  }
  print_worst();
}

TEST(OpsCpuTest, ScaleAndAxpbyMatchReference) {
  auto ctx = cpu_context();
  uint32_t seed = 100;
  const double alpha = 0.7, beta = -1.3;  // not exact in any float type
  for (DType t : kFloatTypes) {
    for (const Shape& s : kShapes) {
      const Tensor a = random_tensor(s, t, seed++), b = random_tensor(s, t, seed++);
      const double ut = unit_roundoff(t), um = math_roundoff(t), dt = smallest_subnormal(t);
      Tensor out = poisoned(s, t);
      ASSERT_TRUE(scale(*ctx, out, a, alpha).ok());
      expect_near_all(
          out, [&](int64_t i) { return alpha * get(a, i); },
          [&](int64_t i) { return (ut + 2 * um) * std::fabs(alpha * get(a, i)) + dt; },
          label("scale", t, s), absl::StrCat("scale ", dtype_name(t)));
      EXPECT_TRUE(same_bits(must(scale(*ctx, a, alpha)), out));

      out = poisoned(s, t);
      ASSERT_TRUE(axpby(*ctx, out, a, b, alpha, beta).ok());
      auto ref = [&](int64_t i) { return alpha * get(a, i) + beta * get(b, i); };
      expect_near_all(
          out, ref,
          [&](int64_t i) {
            return ut * std::fabs(ref(i)) +
                   3 * um * (std::fabs(alpha * get(a, i)) + std::fabs(beta * get(b, i))) + dt;
          },
          label("axpby", t, s), absl::StrCat("axpby ", dtype_name(t)));
      EXPECT_TRUE(same_bits(must(axpby(*ctx, a, b, alpha, beta)), out));
    }
  }
  print_worst();
}

TEST(OpsCpuTest, InPlace) {
  auto ctx = cpu_context();
  const Tensor a0 = random_tensor({5, 9}, DType::kBF16, 7),
               b = random_tensor({5, 9}, DType::kBF16, 8);
  Tensor a = host_empty(a0.shape(), a0.dtype());  // a copy to update
  ASSERT_TRUE(a.copy_from(a0, Stream::cpu()).ok());
  const Tensor want = must(axpby(*ctx, a0, b, 0.9, 0.1));
  ASSERT_TRUE(axpby(*ctx, a, a, b, 0.9, 0.1).ok());
  EXPECT_TRUE(same_bits(a, want));
  ASSERT_TRUE(mul(*ctx, a, a, a).ok());  // out, a and b all one tensor
  EXPECT_TRUE(same_bits(a, must(mul(*ctx, want, want))));
}

// The value of float `x` cast to integer dtype t: truncated, saturated.
int64_t float_to_int(DType t, double x) {
  if (std::isnan(x)) return 0;
  double lo = 0, hi = 0;
  switch (t) {
    case DType::kI32: lo = -2147483648.0, hi = 2147483647.0; break;
    case DType::kI64: lo = -9223372036854775808.0, hi = 9223372036854775807.0; break;
    case DType::kU8: hi = 255; break;
    default: hi = 65535; break;
  }
  const double v = std::trunc(x);
  if (v <= lo) return t == DType::kI64 ? std::numeric_limits<int64_t>::min() : int64_t(lo);
  if (v >= hi) return t == DType::kI64 ? std::numeric_limits<int64_t>::max() : int64_t(hi);
  return int64_t(v);
}

TEST(OpsCpuTest, CastEveryPairMatchesReference) {
  auto ctx = cpu_context();
  uint32_t seed = 200;
  for (DType from : kAllTypes) {
    // Floats in [-300, 300) saturate uint8; negative integers wrap into unsigned types.
    const bool is_float = dtype_is_floating(from);
    const Tensor in =
        random_tensor({3, 67}, from, seed++, is_float ? -300 : -1000, is_float ? 300 : 1000);
    for (DType to : kAllTypes) {
      const std::string what = absl::StrCat("cast ", dtype_name(from), " -> ", dtype_name(to));
      Tensor out = poisoned(in.shape(), to);
      ASSERT_TRUE(cast(*ctx, out, in).ok()) << what;
      if (dtype_is_floating(to)) {
        expect_near_all(
            out, [&](int64_t i) { return get(in, i); },
            [&](int64_t i) {
              return unit_roundoff(to) * std::fabs(get(in, i)) + smallest_subnormal(to);
            },
            what, absl::StrCat("cast -> ", dtype_name(to)));
      } else if (is_float) {
        expect_eq_all(
            out, [&](int64_t i) { return float_to_int(to, get(in, i)); }, what);
      } else {
        expect_eq_all(
            out, [&](int64_t i) { return wrap(to, uint64_t(get_int(in, i))); }, what);
      }
      const Tensor made = must(cast(*ctx, in, to));
      EXPECT_TRUE(same_bits(made, out)) << what;
      EXPECT_NE(made.storage(), in.storage()) << what << ": always a new tensor";
    }
  }
  print_worst();
}

TEST(OpsCpuTest, CastInPlaceBetweenSameSizeDtypes) {
  auto ctx = cpu_context();
  Tensor x = random_tensor({41}, DType::kF32, 9, -50, 50);
  const Tensor want = must(cast(*ctx, x, DType::kI32));
  Tensor as_int = must(Tensor::from_storage(x.storage(), x.byte_offset(), x.shape(), DType::kI32));
  ASSERT_TRUE(cast(*ctx, as_int, x).ok());
  EXPECT_TRUE(same_bits(as_int, want));
}

// The stream-taking cast and add: the Context ones' values over flat views of
// any shapes with as many elements; mismatches are errors, never a partial copy.
TEST(OpsCpuTest, CastAndAddOnAStreamMatchTheContexts) {
  auto ctx = cpu_context();
  const Tensor x = random_tensor({6, 7}, DType::kF32, 21, -3, 3);
  const Tensor want = must(cast(*ctx, x, DType::kBF16));
  Tensor flat = must(Tensor::empty({42}, DType::kBF16, Stream::cpu()));
  ASSERT_TRUE(fill(*ctx, flat, 7.0).ok());
  ASSERT_TRUE(cast(Stream::cpu(), flat, x).ok());
  EXPECT_TRUE(same_bits(must(Tensor::from_storage(flat.storage(), flat.byte_offset(), {6, 7}, DType::kBF16)), want));
  const Tensor short_out = must(Tensor::empty({41}, DType::kBF16, Stream::cpu()));
  EXPECT_TRUE(contains(cast(Stream::cpu(), short_out, x).message(), "as many elements"));
  EXPECT_TRUE(contains(cast(Stream::cpu(), Tensor(), x).message(), "out is undefined"));

  const Tensor y = random_tensor({42}, DType::kF32, 22, -3, 3);
  Tensor sum = must(Tensor::from_storage(x.storage(), x.byte_offset(), {42}, DType::kF32));
  const Tensor want_sum = must(add(*ctx, sum, y));
  ASSERT_TRUE(add(Stream::cpu(), sum, sum, y).ok());  // in place, as ZeRO accumulates
  EXPECT_TRUE(same_bits(sum, want_sum));
  EXPECT_TRUE(contains(add(Stream::cpu(), sum, sum, flat).message(), "differ"));  // bfloat16 into float32
  EXPECT_TRUE(contains(add(Stream::cpu(), sum, sum, must(Tensor::empty({41}, DType::kF32, Stream::cpu())))
                           .message(),
                       "as many elements"));
}

TEST(OpsCpuTest, FillAndFull) {
  auto ctx = cpu_context();
  for (DType t : kAllTypes) {
    for (double value : {-2.7, 300.7, 1234.5678}) {
      const std::string what = absl::StrCat("fill ", dtype_name(t), " with ", value);
      Tensor out = poisoned({3, 11}, t);
      ASSERT_TRUE(fill(*ctx, out, value).ok()) << what;
      if (dtype_is_floating(t)) {
        expect_near_all(
            out, [&](int64_t) { return value; },
            [&](int64_t) { return unit_roundoff(t) * std::fabs(value); }, what,
            absl::StrCat("fill ", dtype_name(t)));
      } else {
        expect_eq_all(
            out, [&](int64_t) { return float_to_int(t, value); }, what);
      }
      EXPECT_TRUE(same_bits(must(full(*ctx, {3, 11}, t, value)), out)) << what;
    }
  }
  print_worst();
}

// ---- Reductions on the CPU against the reference.

// long double: the reference of a float64 sum must be more exact than the sum.
struct RowStats {
  long double sum = 0, abs_sum = 0;
  double max = -INFINITY;
};

// The reference of `op` for a row of n values, and its tolerance.
void check_reduction(const Tensor& got, const Tensor& in, ReduceOp op, int64_t rows, int64_t n,
                     const std::string& what) {
  std::vector<RowStats> stats(rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      const double x = get(in, r * n + j);
      stats[r].sum += x;
      stats[r].abs_sum += std::fabs(x);
      stats[r].max = std::max(stats[r].max, x);
    }
  }
  const double u_acc = math_roundoff(in.dtype()), u_out = unit_roundoff(got.dtype());
  const double depth =
      std::min<int64_t>(n, 1024) / 8 + 4 + std::ceil(std::log2(std::max(1.0, double(n) / 1024)));
  const double divisor = op == ReduceOp::kMean ? double(n) : 1.0;
  expect_near_all(
      got,
      [&](int64_t r) {
        return op == ReduceOp::kMax ? stats[r].max : double(stats[r].sum / divisor);
      },
      [&](int64_t r) {
        if (op == ReduceOp::kMax) {
          return got.dtype() == in.dtype() ? 0.0 : u_out * std::fabs(stats[r].max);
        }
        return double(u_acc * depth * stats[r].abs_sum + u_out * std::fabs(stats[r].sum)) / divisor;
      },
      what,
      absl::StrCat(reduce_op_name(op), " ", dtype_name(in.dtype()), "->", dtype_name(got.dtype())));
}

TEST(OpsCpuTest, ReductionsMatchReference) {
  auto ctx = cpu_context();
  const Shape shapes[] = {{37}, {7, 13}, {3, 5, 33}, {2, 3, 1025}, {1, 3001}, {4, 1}};
  uint32_t seed = 300;
  for (DType t : kFloatTypes) {
    for (const Shape& s : shapes) {
      const Tensor in = random_tensor(s, t, seed++, -1.0, 1.0, /*misalign=*/1);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
        for (DType out_dtype : {DType::kF32, t}) {
          const std::string what =
              absl::StrCat(label(reduce_op_name(op), t, s), " -> ", dtype_name(out_dtype));
          // Over the last dimension, into a poisoned out.
          const int64_t n = s[-1], rows = s.numel() / n;
          Tensor out = poisoned(must(Shape::make(s.dims().subspan(0, s.rank() - 1))), out_dtype);
          ASSERT_TRUE(reduce(*ctx, out, in, op, ReduceOver::kLastDim).ok()) << what;
          check_reduction(out, in, op, rows, n, what + " last dim");
          // Over everything, allocated.
          const Tensor all = must(reduce(*ctx, in, op, ReduceOver::kAll, out_dtype));
          EXPECT_EQ(all.shape(), Shape{});
          EXPECT_EQ(all.dtype(), out_dtype);
          check_reduction(all, in, op, 1, s.numel(), what + " all");
        }
      }
    }
  }
  print_worst();
}

TEST(OpsCpuTest, ReductionShorthandsAndEmptyRows) {
  auto ctx = cpu_context();
  const Tensor x = random_tensor({6, 17}, DType::kBF16, 11);
  EXPECT_TRUE(same_bits(must(sum(*ctx, x, ReduceOver::kLastDim)),
                        must(reduce(*ctx, x, ReduceOp::kSum, ReduceOver::kLastDim))));
  EXPECT_TRUE(same_bits(must(mean(*ctx, x, ReduceOver::kAll, DType::kF32)),
                        must(reduce(*ctx, x, ReduceOp::kMean, ReduceOver::kAll, DType::kF32))));
  Tensor m = poisoned({6}, DType::kBF16);
  ASSERT_TRUE(max(*ctx, m, x, ReduceOver::kLastDim).ok());
  EXPECT_TRUE(same_bits(m, must(reduce(*ctx, x, ReduceOp::kMax, ReduceOver::kLastDim))));
  // Rows of length 0: sum 0, mean NaN; no rows: an empty result.
  const Tensor empty_rows = host_empty({3, 0}, DType::kF32);
  const Tensor s = must(sum(*ctx, empty_rows, ReduceOver::kLastDim));
  const Tensor mu = must(mean(*ctx, empty_rows, ReduceOver::kLastDim));
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(get(s, i), 0.0);
    EXPECT_TRUE(std::isnan(get(mu, i)));
  }
  EXPECT_EQ(must(max(*ctx, host_empty({0, 5}, DType::kF32), ReduceOver::kLastDim)).shape(),
            Shape{0});
}

// ---- Random fills on the CPU against the reference.

uint32_t stream_word(uint64_t seed, uint64_t g) {
  return kernels::random::philox_stream_block(seed, g / 4).w[g % 4];
}

double uniform_ref(uint64_t seed, uint64_t g, double lo, double hi) {
  return lo + (hi - lo) * std::ldexp(double(stream_word(seed, g) >> 8), -24);
}

// Stream element g as a standard normal (Box-Muller on its word pair), and r.
double normal_ref(uint64_t seed, uint64_t g, double* r) {
  const uint64_t first = g / 4 * 4 + (g % 4 & 2);  // the pair's first element
  const double u1 = std::ldexp(double((stream_word(seed, first) >> 8) + 1), -24);
  const double theta = 2 * M_PI * std::ldexp(double(stream_word(seed, first + 1) >> 8), -24);
  *r = std::sqrt(-2 * std::log(u1));
  return g % 2 == 0 ? *r * std::cos(theta) : *r * std::sin(theta);
}

TEST(OpsCpuTest, RandomFillsMatchReferenceAndAdvanceTheOffset) {
  auto ctx = cpu_context(/*seed=*/20240520);
  const Shape shapes[] = {{37}, {7, 13}, {3, 5, 33}, {1}};
  for (DType t : kFloatTypes) {
    for (const Shape& s : shapes) {
      const double ut = unit_roundoff(t), um = math_roundoff(t), dt = smallest_subnormal(t);
      const double lo = -0.5, hi = 2.0, mu = 0.3, sigma = 1.7;
      RngState r = ctx->rng_state();
      Tensor out = poisoned(s, t);
      ASSERT_TRUE(fill_uniform(*ctx, out, lo, hi).ok());
      EXPECT_EQ(ctx->rng_state(), (RngState{r.seed, r.offset + uint64_t(s.numel())}));
      expect_near_all(
          out, [&](int64_t i) { return uniform_ref(r.seed, r.offset + i, lo, hi); },
          [&](int64_t i) {
            return 3 * um * (std::fabs(lo) + (hi - lo)) +
                   ut * std::fabs(uniform_ref(r.seed, r.offset + i, lo, hi)) + dt;
          },
          label("uniform", t, s), absl::StrCat("uniform ", dtype_name(t)));

      r = ctx->rng_state();
      out = poisoned(s, t);
      ASSERT_TRUE(fill_normal(*ctx, out, mu, sigma).ok());
      EXPECT_EQ(ctx->rng_state().offset, r.offset + uint64_t(s.numel()));
      auto ref = [&](int64_t i, double* radius) {
        return mu + sigma * normal_ref(r.seed, r.offset + i, radius);
      };
      expect_near_all(
          out,
          [&](int64_t i) {
            double rad;
            return ref(i, &rad);
          },
          [&](int64_t i) {
            double rad;
            const double v = ref(i, &rad);
            return sigma * 64 * std::ldexp(1.0, -24) * (1 + rad) + 2 * um * std::fabs(mu) +
                   ut * std::fabs(v) + dt;
          },
          label("normal", t, s), absl::StrCat("normal ", dtype_name(t)));
    }
  }
  print_worst();
}

TEST(OpsCpuTest, RandomCallsDrawFreshNumbersAndReproduce) {
  auto ctx = cpu_context(/*seed=*/7);
  const Tensor first = must(normal(*ctx, {5, 9}, DType::kF32));
  const Tensor second = must(normal(*ctx, {5, 9}, DType::kF32));
  int equal = 0;
  for (int64_t i = 0; i < first.numel(); ++i) equal += get(first, i) == get(second, i);
  EXPECT_EQ(equal, 0) << "a second call must draw fresh numbers";
  ctx->manual_seed(7);
  EXPECT_TRUE(same_bits(must(normal(*ctx, {5, 9}, DType::kF32)), first));
  EXPECT_TRUE(same_bits(must(normal(*ctx, {5, 9}, DType::kF32)), second));
  // Fills compose: [0, 45) at once equals [0, 17) then [17, 45) (an odd split
  // through a Box-Muller pair).
  ctx->manual_seed(7);
  Tensor parts = host_empty({45}, DType::kF32);
  Tensor head = must(parts.slice(0, 17)), tail = must(parts.slice(17, 45));
  ASSERT_TRUE(fill_normal(*ctx, head).ok());
  ASSERT_TRUE(fill_normal(*ctx, tail).ok());
  EXPECT_TRUE(same_bits(parts, must(first.reshape({45}))));
  // Another seed, another stream.
  ctx->manual_seed(8);
  const Tensor seed8 = must(uniform(*ctx, {5, 9}, DType::kF32));
  ctx->manual_seed(7);
  EXPECT_FALSE(same_bits(seed8, must(uniform(*ctx, {5, 9}, DType::kF32))));
}

// ---- The headers' examples.

TEST(OpsCpuTest, HeaderExamples) {
  auto context = cpu_context(/*seed=*/1234);
  Context& ctx = *context;
  // ops.h
  const Tensor x = must(ops::normal(ctx, {4, 7}, DType::kF32));
  Tensor y = must(ops::scale(ctx, x, 2.0));
  ASSERT_TRUE(ops::add(ctx, y, y, x).ok());
  const Tensor s = must(ops::sum(ctx, y, ops::ReduceOver::kLastDim));
  ASSERT_EQ(s.shape(), Shape{4});
  double row0 = 0;
  for (int j = 0; j < 7; ++j) row0 += 3 * get(x, j);
  EXPECT_NEAR(get(s, 0), row0, 1e-5);
  // elementwise.h
  const Tensor residual = random_tensor({4, 7}, DType::kF32, 1);
  const Tensor h = must(ops::add(ctx, x, residual));
  EXPECT_EQ(get(h, 5), static_cast<float>(get(x, 5) + get(residual, 5)));
  Tensor m = random_tensor({4, 7}, DType::kF32, 2), g = random_tensor({4, 7}, DType::kF32, 3);
  const double m5 = get(m, 5);
  ASSERT_TRUE(ops::axpby(ctx, m, m, g, 0.9, 0.1).ok());
  EXPECT_FLOAT_EQ(get(m, 5), 0.9 * m5 + 0.1 * get(g, 5));
  const Tensor w16 = must(ops::cast(ctx, x, DType::kBF16));
  EXPECT_EQ(w16.dtype(), DType::kBF16);
  const Tensor mask = must(ops::full(ctx, {4, 4}, DType::kF32, -1e4));
  EXPECT_EQ(get(mask, 15), -1e4);
  // reduction.h
  const Tensor act = random_tensor({2, 3, 8}, DType::kBF16, 4);
  EXPECT_EQ(must(ops::max(ctx, act, ops::ReduceOver::kLastDim)).shape(), Shape({2, 3}));
  const Tensor total = must(ops::sum(ctx, act, ops::ReduceOver::kAll, DType::kF32));
  EXPECT_EQ(total.dtype(), DType::kF32);
  EXPECT_EQ(total.shape(), Shape{});
  Tensor row_mean = poisoned({2, 3}, DType::kBF16);
  EXPECT_TRUE(ops::mean(ctx, row_mean, act, ops::ReduceOver::kLastDim).ok());
  // random.h
  ctx.manual_seed(1234);
  Tensor wte = host_empty({50, 16}, DType::kF32);
  ASSERT_TRUE(ops::fill_normal(ctx, wte, 0.0, 0.02).ok());
  const Tensor noise = must(ops::uniform(ctx, {8, 1024}, DType::kF32, -1.0, 1.0));
  EXPECT_EQ(ctx.rng_state(), (RngState{1234, 50 * 16 + 8 * 1024}));
  EXPECT_LT(std::fabs(get(wte, 0)), 0.02 * 5.78);
  EXPECT_GE(get(noise, 0), -1.0);
}

// ---- Errors.

TEST(OpsCpuTest, ErrorsNameShapesDtypesAndOperands) {
  auto ctx = cpu_context();
  Context& c = *ctx;
  auto make = [](const Shape& s, DType t = DType::kF32) { return random_tensor(s, t, 5, -2, 2); };
  Tensor a = make({2, 3}), b = make({3, 2}), out = make({2, 3});
  auto expect_invalid = [](const absl::Status& s, absl::string_view message) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(s.message(), message);
  };
  expect_invalid(add(c, out, a, b), "add: shapes [2, 3] and [3, 2] differ");
  expect_invalid(add(c, a, b).status(), "add: shapes [2, 3] and [3, 2] differ");
  expect_invalid(mul(c, out, a, make({2, 3}, DType::kBF16)),
                 "mul: dtypes float32 and bfloat16 differ");
  expect_invalid(sub(c, b, a, a), "sub: out is float32 [3, 2], but the result is float32 [2, 3]");
  Tensor bf = make({2, 3}, DType::kBF16);
  expect_invalid(sub(c, bf, a, a), "sub: out is bfloat16 [2, 3], but the result is float32 [2, 3]");
  expect_invalid(add(c, out, a, Tensor()), "add: b is undefined");
  Tensor undefined;
  expect_invalid(add(c, undefined, a, a), "add: out is undefined");
  // Partial overlap (in place, out == a, is fine).
  Tensor buffer = make({8});
  Tensor lo = must(buffer.slice(0, 4)), mid = must(buffer.slice(2, 6)),
         hi = must(buffer.slice(4, 8));
  EXPECT_TRUE(add(c, lo, lo, hi).ok());
  expect_invalid(add(c, mid, lo, hi),
                 "add: out (float32 [4] on cpu) partially overlaps a (float32 [4] on cpu); out "
                 "must be the same tensor or disjoint");
  Tensor ints = make({2, 3}, DType::kI32);
  expect_invalid(scale(c, ints, ints, 2.0),
                 "scale: dtype int32 is not supported (float32, float16, bfloat16, float64)");
  expect_invalid(axpby(c, ints, ints, 1.0, 1.0).status(),
                 "axpby: dtype int32 is not supported (float32, float16, bfloat16, float64)");
  expect_invalid(axpby(c, out, a, b, 1.0, 1.0), "axpby: shapes [2, 3] and [3, 2] differ");
  Tensor flat = make({6}, DType::kI32);
  expect_invalid(cast(c, flat, a), "cast: shapes [2, 3] (in) and [6] (out) differ");
  Tensor halves = must(Tensor::from_storage(a.storage(), 0, a.shape(), DType::kF16));
  EXPECT_TRUE(contains(cast(c, halves, a).message(),
                       "cast: out (float16 [2, 3] on cpu) overlaps in (float32 [2, 3] on cpu) "
                       "without being the same memory"));
  // Reductions.
  Tensor rows = make({2});
  expect_invalid(sum(c, rows, make({3, 4}), ReduceOver::kLastDim),
                 "sum: out is float32 [2], but the result is float32 [3]");
  expect_invalid(sum(c, rows, make({3, 4}), ReduceOver::kAll),
                 "sum: out is float32 [2], but the result is float32 []");
  expect_invalid(mean(c, make({2, 5}, DType::kBF16), ReduceOver::kLastDim, DType::kF16).status(),
                 "mean: the output dtype must be float32 or the input's bfloat16, not float16");
  expect_invalid(max(c, make({4}, DType::kI64), ReduceOver::kAll).status(),
                 "max: dtype int64 is not supported (float32, float16, bfloat16, float64)");
  expect_invalid(sum(c, make({}), ReduceOver::kLastDim).status(),
                 "sum: float32 [] on cpu is a scalar, which has no last dimension; use "
                 "ReduceOver::kAll");
  expect_invalid(max(c, host_empty({3, 0}, DType::kF32), ReduceOver::kLastDim).status(),
                 "max: the last dimension of float32 [3, 0] on cpu is empty");
  expect_invalid(max(c, host_empty({0, 2}, DType::kF32), ReduceOver::kAll).status(),
                 "max: float32 [0, 2] on cpu has no elements");
  Tensor wide = make({4, 4}), flat_wide = must(wide.reshape({16}));
  Tensor inside = must(flat_wide.slice(0, 4));
  EXPECT_TRUE(contains(sum(c, inside, wide, ReduceOver::kLastDim).message(),
                       "sum: out (float32 [4] on cpu) overlaps in (float32 [4, 4] on cpu)"));
  // Random fills: nothing is reserved when a call fails.
  const RngState before = c.rng_state();
  expect_invalid(fill_uniform(c, ints),
                 "uniform: dtype int32 is not supported (float32, float16, bfloat16, float64)");
  expect_invalid(fill_uniform(c, a, 1.0, 0.0),
                 "uniform: the bounds must be finite with lo <= hi (and hi - lo finite), not lo "
                 "= 1, hi = 0");
  expect_invalid(normal(c, {3}, DType::kF32, 0.0, -1.0).status(),
                 "normal: mean must be finite and std finite and >= 0, not mean = 0, std = -1");
  expect_invalid(fill_normal(c, undefined), "normal: out is undefined");
  EXPECT_EQ(c.rng_state(), before);
}

// ---- CUDA against the CPU.

#if COLOSSAL_WITH_CUDA
std::unique_ptr<Context> cuda_context(uint64_t seed = 0) {
  return must(Context::create(Device::cuda(0), seeded(seed)));
}

// A device copy of `host`, `misalign` elements into its storage.
Tensor to_device(Context& gpu, const Tensor& host, int64_t misalign = 0) {
  Tensor storage =
      must(Tensor::empty({host.numel() + misalign}, host.dtype(), gpu.compute_stream()));
  Tensor t =
      must(must(storage.slice(misalign, misalign + host.numel())).reshape(host.shape().dims()));
  COLOSSAL_CHECK_OK(t.copy_from(host, gpu.compute_stream()));
  return t;
}

Tensor to_host(Context& gpu, const Tensor& t) {
  Tensor host = must(t.to(Device::cpu(), gpu.compute_stream()));
  gpu.synchronize();
  return host;
}

// Shapes for the device: odd tails, and sizes past the vectorised kernels' tiles.
const Shape kDeviceShapes[] = {{37}, {3, 5, 33}, {1000, 1001}, {1}};
#endif

TEST(OpsCudaTest, ElementwiseIsBitIdenticalToCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  auto cpu = cpu_context();
  auto gpu = cuda_context();
  uint32_t seed = 1000;
  for (DType t : kAllTypes) {
    for (const Shape& s : kDeviceShapes) {
      for (int64_t misalign : {0, 1}) {
        const std::string what = absl::StrCat(label("elementwise", t, s), " misalign ", misalign);
        const Tensor a = any_values(s, t, seed++), b = any_values(s, t, seed++);
        const Tensor da = to_device(*gpu, a, misalign), db = to_device(*gpu, b);
        EXPECT_TRUE(same_bits(to_host(*gpu, must(add(*gpu, da, db))), must(add(*cpu, a, b))))
            << what;
        EXPECT_TRUE(same_bits(to_host(*gpu, must(sub(*gpu, da, db))), must(sub(*cpu, a, b))))
            << what;
        EXPECT_TRUE(same_bits(to_host(*gpu, must(mul(*gpu, da, db))), must(mul(*cpu, a, b))))
            << what;
        if (dtype_is_floating(t)) {
          EXPECT_TRUE(
              same_bits(to_host(*gpu, must(scale(*gpu, da, 0.7))), must(scale(*cpu, a, 0.7))))
              << what;
          Tensor in_place = to_device(*gpu, a, misalign);
          ASSERT_TRUE(axpby(*gpu, in_place, in_place, db, 0.9, -1.3).ok());
          EXPECT_TRUE(same_bits(to_host(*gpu, in_place), must(axpby(*cpu, a, b, 0.9, -1.3))))
              << what;
        }
        for (DType to : kAllTypes) {
          EXPECT_TRUE(same_bits(to_host(*gpu, must(cast(*gpu, da, to))), must(cast(*cpu, a, to))))
              << what << " cast to " << dtype_name(to);
          Tensor on_stream = must(Tensor::empty({s.numel()}, to, gpu->compute_stream()));
          ASSERT_TRUE(cast(gpu->compute_stream(), on_stream, da).ok()) << what;
          EXPECT_TRUE(same_bits(to_host(*gpu, on_stream), must(cast(*cpu, must(Tensor::from_storage(
              a.storage(), a.byte_offset(), {s.numel()}, t)), to))))
              << what << " cast on a stream to " << dtype_name(to);
        }
        Tensor sum = to_device(*gpu, a, misalign);
        ASSERT_TRUE(add(gpu->compute_stream(), sum, sum, db).ok()) << what;
        EXPECT_TRUE(same_bits(to_host(*gpu, sum), must(add(*cpu, a, b)))) << what << " add on a stream";
        // A CUDA tensor and a CPU stream, or tensors on two devices, are refused.
        EXPECT_FALSE(cast(Stream::cpu(), to_device(*gpu, a), da).ok()) << what;
        EXPECT_FALSE(cast(gpu->compute_stream(), must(Tensor::empty(s, t, Stream::cpu())), da).ok()) << what;
        Tensor filled = to_device(*gpu, a, misalign);
        ASSERT_TRUE(fill(*gpu, filled, -123.456).ok());
        EXPECT_TRUE(same_bits(to_host(*gpu, filled), must(full(*cpu, s, t, -123.456)))) << what;
      }
    }
  }
#endif
}

TEST(OpsCudaTest, ReductionsMatchCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  auto cpu = cpu_context();
  auto gpu = cuda_context();
  // Thread-, warp- and block-per-row paths; rows split over blocks (scratch).
  const Shape shapes[] = {{4096, 7}, {2049, 33}, {65, 1500}, {3, 70001}, {1000, 1000}, {37}};
  uint32_t seed = 2000;
  for (DType t : kFloatTypes) {
    for (const Shape& s : shapes) {
      const Tensor in = random_tensor(s, t, seed++);
      const Tensor din = to_device(*gpu, in, 1);
      for (ReduceOver over : {ReduceOver::kLastDim, ReduceOver::kAll}) {
        const int64_t n = over == ReduceOver::kAll ? s.numel() : s[-1];
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
          for (DType out_dtype : {DType::kF32, t}) {
            const std::string what =
                absl::StrCat(label(reduce_op_name(op), t, s), " -> ", dtype_name(out_dtype),
                             over == ReduceOver::kAll ? " all" : " last dim");
            const Tensor want = must(reduce(*cpu, in, op, over, out_dtype));
            const Tensor got = to_host(*gpu, must(reduce(*gpu, din, op, over, out_dtype)));
            if (op == ReduceOp::kMax) {
              EXPECT_TRUE(same_bits(got, want)) << what;
              continue;
            }
            const double u_acc = math_roundoff(t), u_out = unit_roundoff(out_dtype);
            const double divisor = op == ReduceOp::kMean ? double(n) : 1.0;
            expect_near_all(
                got, [&](int64_t i) { return get(want, i); },
                [&](int64_t i) {
                  return 32 * u_acc * std::sqrt(double(n)) / divisor +
                         2 * u_out * std::fabs(get(want, i));
                },
                what, absl::StrCat("cuda ", reduce_op_name(op), " ", dtype_name(t)));
          }
        }
      }
    }
  }
  print_worst();
#endif
}

TEST(OpsCudaTest, RandomFillsAreBitIdenticalToCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  auto cpu = cpu_context(/*seed=*/99);
  auto gpu = cuda_context(/*seed=*/99);
  for (DType t : kFloatTypes) {
    for (const Shape& s : kDeviceShapes) {
      const std::string what = label("random", t, s);
      // Successive calls on each side, so the offsets must advance alike.
      EXPECT_TRUE(same_bits(to_host(*gpu, must(uniform(*gpu, s, t, -3.0, 5.0))),
                            must(uniform(*cpu, s, t, -3.0, 5.0))))
          << what;
      EXPECT_TRUE(same_bits(to_host(*gpu, must(normal(*gpu, s, t, 0.5, 2.0))),
                            must(normal(*cpu, s, t, 0.5, 2.0))))
          << what;
      Tensor dout = to_device(*gpu, host_empty(s, t), 1);
      Tensor out = host_empty(s, t, 1);
      ASSERT_TRUE(fill_normal(*gpu, dout).ok());
      ASSERT_TRUE(fill_normal(*cpu, out).ok());
      EXPECT_TRUE(same_bits(to_host(*gpu, dout), out)) << what;
      EXPECT_EQ(gpu->rng_state(), cpu->rng_state());
    }
  }
#endif
}

TEST(OpsCudaTest, TensorsOnAnotherDeviceAreErrors) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  auto cpu = cpu_context();
  auto gpu = cuda_context();
  const Tensor host = random_tensor({2, 3}, DType::kF32, 1);
  Tensor device = to_device(*gpu, host);
  absl::Status s = add(*gpu, device, device, host);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "add: b is float32 [2, 3] on cpu, not on the context's device cuda:0");
  EXPECT_EQ(sum(*cpu, device, ReduceOver::kAll).status().message(),
            "sum: in is float32 [2, 3] on cuda:0, not on the context's device cpu");
  EXPECT_EQ(fill_uniform(*cpu, device).message(),
            "uniform: out is float32 [2, 3] on cuda:0, not on the context's device cpu");
  Tensor host_out = host_empty({2, 3}, DType::kF32);
  EXPECT_EQ(cast(*gpu, host_out, device).message(),
            "cast: out is float32 [2, 3] on cpu, not on the context's device cuda:0");
#endif
}

}  // namespace
}  // namespace colossal::core::ops
