// multi_tensor: l2_norm against a float64 reference (CPU) and against the CPU path
// (CUDA), deterministic across threads and runs; non-finite detection; the clip
// coefficient; scale bit for bit (CPU vs expected, CUDA vs CPU) in every dtype
// pair, in place, with a device scale factor and in every launch mode.
#include "kernels/multi_tensor/multi_tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/half.h"
#include "tests/util/gpu_test.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::multi_tensor {
namespace {

using Code = KernelStatus::Code;
constexpr float kInf = std::numeric_limits<float>::infinity();

double get(DType t, const void* b, int64_t i) {
  switch (t) {
    case DType::kF16: return half_to_float(static_cast<const Half*>(b)[i]);
    case DType::kBF16: return bfloat16_to_float(static_cast<const BFloat16*>(b)[i]);
    case DType::kF64: return static_cast<const double*>(b)[i];
    default: return static_cast<const float*>(b)[i];
  }
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

void put(DType t, void* b, int64_t i, double x) {
  switch (t) {
    case DType::kF16: static_cast<Half*>(b)[i] = float_to_half(static_cast<float>(x)); break;
    case DType::kBF16: static_cast<BFloat16*>(b)[i] = float_to_bfloat16(static_cast<float>(x)); break;
    case DType::kF64: static_cast<double*>(b)[i] = x; break;
    default: static_cast<float*>(b)[i] = static_cast<float>(x); break;
  }
}

// Tensor sizes of a long list: odd, tiny, empty, and across 16384/32768-element chunks.
std::vector<int64_t> list_sizes(int count) {
  const int64_t pattern[] = {1, 3, 0, 17, 1000, 5, 4096, 33, 0, 16385, 2, 770, 65537, 64, 9};
  std::vector<int64_t> sizes;
  for (int i = 0; i < count; ++i) {
    const int64_t s = pattern[i % 15];
    sizes.push_back(s == 65537 && i > 20 ? 129 : s);
  }
  return sizes;
}

// A list of tensors carved from one buffer at irregular offsets (gaps of 0..3
// elements), filled with random values in [-2, 2) with exact dtype values.
struct HostList {
  DType t;
  std::vector<int64_t> sizes, at;
  std::vector<uint8_t> bytes;

  HostList(DType t_, const std::vector<int64_t>& sizes_, uint32_t seed) : t(t_), sizes(sizes_) {
    int64_t pos = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      pos += i % 4;
      at.push_back(pos);
      pos += sizes[i];
    }
    bytes.resize((pos + 8) * dtype_size(t));
    testing::poison(bytes.data(), bytes.size());
    const auto f = testing::random_floats(pos, seed, -2.0f, 2.0f);
    for (int64_t i = 0; i < pos; ++i) put(t, bytes.data(), i, f[i]);
  }
  void* element(size_t tensor, int64_t i) {
    return bytes.data() + (at[tensor] + i) * dtype_size(t);
  }
  std::vector<TensorRef> refs(uint8_t* base) const {
    std::vector<TensorRef> out;
    for (size_t i = 0; i < sizes.size(); ++i) {
      out.push_back(TensorRef{base + at[i] * dtype_size(t), sizes[i]});
    }
    return out;
  }
  // Each tensor's sum of squares in double.
  std::vector<double> reference() const {
    std::vector<double> sq;
    for (size_t i = 0; i < sizes.size(); ++i) {
      double s = 0;
      for (int64_t k = 0; k < sizes[i]; ++k) {
        const double x = get(t, bytes.data(), at[i] + k);
        s += x * x;
      }
      sq.push_back(s);
    }
    return sq;
  }
};

// The CPU path sums in double: only the final rounding to float remains (4 ulps).
constexpr double kCpuNormTol = 2.5e-7;

TEST(L2NormCpuTest, MatchesFloat64Reference) {
  uint32_t seed = 1;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    for (const auto& sizes : {list_sizes(200), std::vector<int64_t>{65537},
                              std::vector<int64_t>{100003, 1, 0, 3}}) {
      HostList list(t, sizes, seed++);
      const auto refs = list.refs(list.bytes.data());
      std::vector<float> per(sizes.size() + 2);
      testing::poison(per.data(), per.size() * 4);
      const float guard = per[0];
      float norm = -1, found = 0, coef = -1;
      ASSERT_TRUE(l2_norm_cpu(&norm, per.data() + 1, &found, &coef, refs.data(), refs.size(), t,
                              1.0f)
                      .ok());
      const auto sq = list.reference();
      double total = 0;
      for (size_t i = 0; i < sq.size(); ++i) {
        total += sq[i];
        ASSERT_NEAR(per[i + 1], std::sqrt(sq[i]), kCpuNormTol * std::sqrt(sq[i]))
            << dtype_name(t) << " tensor " << i;
      }
      EXPECT_EQ(bits_of(per.front()), bits_of(guard));
      EXPECT_EQ(bits_of(per.back()), bits_of(guard));
      EXPECT_NEAR(norm, std::sqrt(total), kCpuNormTol * std::sqrt(total)) << dtype_name(t);
      EXPECT_EQ(found, 0.0f);
      EXPECT_NEAR(coef, std::min(1.0, 1.0 / (std::sqrt(total) + 1e-6)), 1e-7);
    }
  }
}

// The SIMD loops this CPU can run, and the scalar one.
std::vector<CpuIsa> cpu_isas() {
  static bool told = false;
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (cpu_isa_available(isa)) {
      out.push_back(isa);
    } else if (!told) {
      std::printf("note: this CPU lacks %s; its loop is not tested here\n", cpu_isa_name(isa));
    }
  }
  told = true;
  return out;
}

// The same bits for any thread count and SIMD loop, per tensor too; a loop
// the CPU lacks, or no loop at all, is refused.
TEST(L2NormCpuTest, SameBitsForAnyThreadCountAndIsa) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    HostList list(t, {300001, 7, 65536, 0, 99999}, 11);
    const auto refs = list.refs(list.bytes.data());
    bool first = true;
    float first_norm = 0;
    std::vector<float> first_per;
    for (CpuIsa isa : cpu_isas()) {
      for (int threads : {1, 3, 8}) {
        float norm = 0;
        std::vector<float> per(refs.size());
        ASSERT_TRUE(l2_norm_cpu(&norm, per.data(), nullptr, nullptr, refs.data(), refs.size(), t,
                                0.0f, threads, isa)
                        .ok());
        if (first) {
          first_norm = norm;
          first_per = per;
          first = false;
        }
        const std::string what = std::string(dtype_name(t)) + " " + cpu_isa_name(isa) + " " +
                                 std::to_string(threads);
        EXPECT_EQ(bits_of(norm), bits_of(first_norm)) << what;
        for (size_t i = 0; i < per.size(); ++i) EXPECT_EQ(bits_of(per[i]), bits_of(first_per[i])) << what;
      }
    }
  }
  float norm = 0;
  const float x[2] = {3.0f, 4.0f};
  const TensorRef ref{x, 2};
  EXPECT_EQ(l2_norm_cpu(&norm, nullptr, nullptr, nullptr, &ref, 1, DType::kF32, 0.0f, 1,
                        static_cast<CpuIsa>(42))
                .code(),
            Code::kInvalidArgument);
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!cpu_isa_available(isa)) {
      EXPECT_EQ(l2_norm_cpu(&norm, nullptr, nullptr, nullptr, &ref, 1, DType::kF32, 0.0f, 1, isa).code(),
                Code::kUnsupported);
    }
  }
}

TEST(L2NormCpuTest, FlagsNonFiniteElementsOnly) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    for (double bad : {double(kInf), -double(kInf), std::nan("")}) {
      for (CpuIsa isa : cpu_isas()) {
        HostList list(t, list_sizes(40), 21);
        put(t, list.element(12, 40000), 0, bad);  // tensor 12 has 65537 elements
        const auto refs = list.refs(list.bytes.data());
        std::vector<float> per(refs.size());
        float norm = 0, found = 0;
        ASSERT_TRUE(l2_norm_cpu(&norm, per.data(), &found, nullptr, refs.data(), refs.size(), t, 0,
                                0, isa)
                        .ok());
        EXPECT_EQ(found, 1.0f) << dtype_name(t) << " " << cpu_isa_name(isa);
        EXPECT_FALSE(std::isfinite(norm));
        EXPECT_FALSE(std::isfinite(per[12]));
        EXPECT_TRUE(std::isfinite(per[11]));
      }
    }
  }
  // Finite float64 values whose squares overflow are not "found inf"; the flag is
  // never cleared either.
  const double big[3] = {1e200, -1e200, 3.0};
  const TensorRef ref{big, 3};
  float norm = 0, found = 0;
  ASSERT_TRUE(l2_norm_cpu(&norm, nullptr, &found, nullptr, &ref, 1, DType::kF64, 0).ok());
  EXPECT_EQ(found, 0.0f);
  EXPECT_EQ(norm, kInf);
  found = 1.0f;
  const float small[2] = {3.0f, 4.0f};
  const TensorRef s{small, 2};
  ASSERT_TRUE(l2_norm_cpu(&norm, nullptr, &found, nullptr, &s, 1, DType::kF32, 0).ok());
  EXPECT_EQ(norm, 5.0f);
  EXPECT_EQ(found, 1.0f);
}

TEST(L2NormCpuTest, ClipCoefficientAndEmptyLists) {
  const float x[2] = {3.0f, 4.0f};
  const TensorRef ref{x, 2};
  float norm = 0, coef = 0;
  ASSERT_TRUE(l2_norm_cpu(&norm, nullptr, nullptr, &coef, &ref, 1, DType::kF32, 1.0f).ok());
  EXPECT_FLOAT_EQ(coef, static_cast<float>(1.0 / (5.0 + 1e-6)));
  ASSERT_TRUE(l2_norm_cpu(&norm, nullptr, nullptr, &coef, &ref, 1, DType::kF32, 10.0f).ok());
  EXPECT_EQ(coef, 1.0f);
  EXPECT_EQ(l2_norm_cpu(&norm, nullptr, nullptr, &coef, &ref, 1, DType::kF32, 0.0f).code(),
            Code::kInvalidArgument);
  // No tensors, or only empty ones: norm 0, per-tensor norms 0, coefficient 1.
  norm = -1;
  ASSERT_TRUE(l2_norm_cpu(&norm, nullptr, nullptr, &coef, nullptr, 0, DType::kF32, 1.0f).ok());
  EXPECT_EQ(norm, 0.0f);
  EXPECT_EQ(coef, 1.0f);
  const TensorRef empties[2] = {{nullptr, 0}, {x, 0}};
  float per[2] = {-1, -1};
  ASSERT_TRUE(l2_norm_cpu(&norm, per, nullptr, nullptr, empties, 2, DType::kBF16, 0).ok());
  EXPECT_EQ(per[0], 0.0f);
  EXPECT_EQ(per[1], 0.0f);
}

// The expected output of scale for one element, computed independently.
double expected_scaled(DType in, DType out, double x, float s) {
  if (in == DType::kF64 || out == DType::kF64) {
    const double y = x * static_cast<double>(s);
    if (out == DType::kF64) return y;
    std::vector<uint8_t> b(8);
    put(out, b.data(), 0, static_cast<float>(y));
    return get(out, b.data(), 0);
  }
  const float y = static_cast<float>(x) * s;  // one float multiply
  std::vector<uint8_t> b(8);
  put(out, b.data(), 0, y);
  return get(out, b.data(), 0);
}

constexpr DType kCpuTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};

TEST(ScaleCpuTest, EveryDtypePairMatchesExpectedBits) {
  uint32_t seed = 100;
  for (DType in : kCpuTypes) {
    for (DType out : kCpuTypes) {
      HostList src(in, list_sizes(60), seed++);
      HostList dst(out, list_sizes(60), seed++);
      testing::poison(dst.bytes.data(), dst.bytes.size());
      std::vector<ScaleTensor> ts;
      for (size_t i = 0; i < src.sizes.size(); ++i) {
        ts.push_back(ScaleTensor{src.element(i, 0), dst.element(i, 0), src.sizes[i]});
      }
      const float factor = 0.75f, scale = 1.0f / 3.0f;
      float found = 0;
      ASSERT_TRUE(scale_cpu(&found, ts.data(), &factor, ts.size(), in, out, scale, 3).ok());
      EXPECT_EQ(found, 0.0f);
      const float s = scale * factor;
      for (size_t i = 0; i < ts.size(); ++i) {
        for (int64_t k = 0; k < src.sizes[i]; ++k) {
          const double want = expected_scaled(in, out, get(in, ts[i].in, k), s);
          ASSERT_EQ(get(out, ts[i].out, k), want)
              << dtype_name(in) << "->" << dtype_name(out) << " tensor " << i << " k " << k;
        }
      }
      // Gaps between tensors stay poisoned: nothing outside [out, out + n) is written.
      HostList untouched(out, list_sizes(60), 0);
      testing::poison(untouched.bytes.data(), untouched.bytes.size());
      for (size_t i = 0; i + 1 < ts.size(); ++i) {
        const int64_t gap_begin = dst.at[i] + dst.sizes[i], gap_end = dst.at[i + 1];
        const size_t es = dtype_size(out);
        ASSERT_EQ(std::memcmp(dst.bytes.data() + gap_begin * es,
                              untouched.bytes.data() + gap_begin * es, (gap_end - gap_begin) * es),
                  0);
      }
    }
  }
}

TEST(ScaleCpuTest, InPlaceAndNonFiniteFlags) {
  std::vector<float> x = {1.0f, -2.0f, 3.5f, 1e5f};
  ScaleTensor t{x.data(), x.data(), 4};
  float found = 0;
  ASSERT_TRUE(scale_cpu(&found, &t, nullptr, 1, DType::kF32, DType::kF32, 0.5f).ok());
  EXPECT_EQ(x, (std::vector<float>{0.5f, -1.0f, 1.75f, 5e4f}));
  EXPECT_EQ(found, 0.0f);
  // float32 -> float16 overflow of the output.
  std::vector<Half> h(4);
  ScaleTensor to_half{x.data(), h.data(), 4};
  ASSERT_TRUE(scale_cpu(&found, &to_half, nullptr, 1, DType::kF32, DType::kF16, 2.0f).ok());
  EXPECT_EQ(found, 1.0f);
  EXPECT_EQ(h[3].bits, 0x7c00);
  // A NaN input.
  found = 0;
  x[1] = std::nanf("");
  ASSERT_TRUE(scale_cpu(&found, &t, nullptr, 1, DType::kF32, DType::kF32, 1.0f).ok());
  EXPECT_EQ(found, 1.0f);
  // In place across different element sizes is refused.
  ScaleTensor mixed{x.data(), x.data(), 2};
  EXPECT_EQ(scale_cpu(&found, &mixed, nullptr, 1, DType::kF32, DType::kBF16, 1.0f).code(),
            Code::kInvalidArgument);
}

TEST(MultiTensorCpuTest, RejectsBadArguments) {
  float x[4] = {1, 2, 3, 4}, norm = 0;
  const TensorRef ok{x, 4}, null_data{nullptr, 4}, negative{x, -1};
  const TensorRef misaligned{reinterpret_cast<char*>(x) + 1, 2};
  EXPECT_EQ(l2_norm_cpu(nullptr, nullptr, nullptr, nullptr, &ok, 1, DType::kF32, 0).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(l2_norm_cpu(&norm, nullptr, nullptr, nullptr, &null_data, 1, DType::kF32, 0).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(l2_norm_cpu(&norm, nullptr, nullptr, nullptr, &negative, 1, DType::kF32, 0).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(l2_norm_cpu(&norm, nullptr, nullptr, nullptr, &misaligned, 1, DType::kF32, 0).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(l2_norm_cpu(&norm, nullptr, nullptr, nullptr, nullptr, 2, DType::kF32, 0).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(l2_norm_cpu(&norm, nullptr, nullptr, nullptr, &ok, 1, DType::kI32, 0).code(),
            Code::kUnsupported);
  const ScaleTensor null_out{x, nullptr, 4}, neg{x, x, -2};
  EXPECT_EQ(scale_cpu(nullptr, &null_out, nullptr, 1, DType::kF32, DType::kF32, 1).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(scale_cpu(nullptr, &neg, nullptr, 1, DType::kF32, DType::kF32, 1).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(scale_cpu(nullptr, nullptr, nullptr, -1, DType::kF32, DType::kF32, 1).code(),
            Code::kInvalidArgument);
  const ScaleTensor fine{x, x, 4};
  EXPECT_EQ(scale_cpu(nullptr, &fine, nullptr, 1, DType::kU8, DType::kF32, 1).code(),
            Code::kUnsupported);
  EXPECT_TRUE(scale_cpu(nullptr, nullptr, nullptr, 0, DType::kF32, DType::kF32, 1).ok());
}

// accumulate: every result is the dtype's rounding of acc + part (float math,
// double for float64), the norm of the results matches the float64 reference
// and is l2_norm_cpu's of the results bit for bit, with the same bits for any
// thread count and SIMD loop (scalar, AVX2, AVX-512).
TEST(AccumulateCpuTest, SumsAndNormMatchReferences) {
  uint32_t seed = 40;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    for (const auto& sizes : {list_sizes(120), std::vector<int64_t>{100003, 1, 0, 3}}) {
      const HostList acc0(t, sizes, seed++), part(t, sizes, seed++);
      std::vector<uint8_t> expected = acc0.bytes;  // the same layout: tensor i at acc0.at[i]
      for (size_t i = 0; i < sizes.size(); ++i) {
        for (int64_t k = 0; k < sizes[i]; ++k) {
          const int64_t a = acc0.at[i] + k, b = part.at[i] + k;
          const double sum = t == DType::kF64
                                 ? get(t, acc0.bytes.data(), a) + get(t, part.bytes.data(), b)
                                 : static_cast<double>(static_cast<float>(get(t, acc0.bytes.data(), a)) +
                                                       static_cast<float>(get(t, part.bytes.data(), b)));
          put(t, expected.data(), a, sum);
        }
      }
      bool first = true;
      float first_norm = 0;
      for (CpuIsa isa : cpu_isas()) {
        for (int threads : {1, 3, 8}) {
          const std::string what =
              std::string(dtype_name(t)) + " " + cpu_isa_name(isa) + " threads " + std::to_string(threads);
          HostList acc = acc0;
          const auto acc_refs = acc.refs(acc.bytes.data());
          const auto part_refs = part.refs(const_cast<uint8_t*>(part.bytes.data()));
          std::vector<AccumulateTensor> list;
          for (size_t i = 0; i < sizes.size(); ++i) {
            list.push_back({const_cast<void*>(acc_refs[i].data), part_refs[i].data, sizes[i]});
          }
          float norm = -1, found = 0;
          ASSERT_TRUE(accumulate_cpu(&norm, &found, list.data(), static_cast<int64_t>(list.size()), t,
                                     threads, isa)
                          .ok());
          EXPECT_EQ(found, 0.0f);
          // The elements outside the tensors (gaps, the tail) are untouched: whole-buffer equality.
          ASSERT_EQ(acc.bytes, expected) << what;
          double ref_sq = 0;
          for (double sq : acc.reference()) ref_sq += sq;
          EXPECT_NEAR(norm, std::sqrt(ref_sq), kCpuNormTol * std::sqrt(ref_sq)) << what;
          float l2 = 0;
          ASSERT_TRUE(l2_norm_cpu(&l2, nullptr, nullptr, nullptr, acc_refs.data(),
                                  static_cast<int64_t>(acc_refs.size()), t, 0.0f, threads, isa)
                          .ok());
          EXPECT_EQ(bits_of(norm), bits_of(l2)) << what;
          if (first) first_norm = norm;
          first = false;
          EXPECT_EQ(bits_of(norm), bits_of(first_norm)) << what;
        }
      }
    }
  }
}

TEST(AccumulateCpuTest, FlagsNonFiniteResultsAndRejectsBadArguments) {
  std::vector<float> acc = {1.0f, 2.0f, 3.0f}, part = {kInf, 0.0f, 1.0f};
  AccumulateTensor x{acc.data(), part.data(), 3};
  float norm = 0, found = 0;
  ASSERT_TRUE(accumulate_cpu(&norm, &found, &x, 1, DType::kF32).ok());
  EXPECT_EQ(found, 1.0f);
  EXPECT_TRUE(std::isinf(acc[0]));
  EXPECT_EQ(acc[2], 4.0f);
  // Finite parts whose sum overflows float16 are flagged too.
  std::vector<Half> h = {float_to_half(60000.0f)}, hp = {float_to_half(60000.0f)};
  AccumulateTensor xh{h.data(), hp.data(), 1};
  found = 0;
  ASSERT_TRUE(accumulate_cpu(nullptr, &found, &xh, 1, DType::kF16).ok());
  EXPECT_EQ(found, 1.0f);

  std::vector<float> buf(8, 1.0f);
  const AccumulateTensor overlap{buf.data(), buf.data() + 2, 4}, neg{buf.data(), buf.data() + 4, -1};
  const AccumulateTensor null_part{buf.data(), nullptr, 2};
  const AccumulateTensor misaligned{reinterpret_cast<char*>(buf.data()) + 1, buf.data() + 4, 2};
  EXPECT_EQ(accumulate_cpu(&norm, nullptr, &overlap, 1, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(accumulate_cpu(&norm, nullptr, &neg, 1, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(accumulate_cpu(&norm, nullptr, &null_part, 1, DType::kF32).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(accumulate_cpu(&norm, nullptr, &misaligned, 1, DType::kF32).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(accumulate_cpu(&norm, nullptr, nullptr, 2, DType::kF32).code(), Code::kInvalidArgument);
  const AccumulateTensor fine{buf.data(), buf.data() + 4, 4};
  EXPECT_EQ(accumulate_cpu(&norm, nullptr, &fine, 1, DType::kI32).code(), Code::kUnsupported);
  norm = -1;
  ASSERT_TRUE(accumulate_cpu(&norm, nullptr, nullptr, 0, DType::kF32).ok());
  EXPECT_EQ(norm, 0.0f);
}

// The usage example of multi_tensor.h.
TEST(MultiTensorCpuTest, HeaderExample) {
  std::vector<float> a = {3.0f, 0.0f}, b = {4.0f};
  const TensorRef grads[2] = {{a.data(), 2}, {b.data(), 1}};
  float norm = 0, found_inf = 0;
  ASSERT_TRUE(l2_norm_cpu(&norm, nullptr, &found_inf, nullptr, grads, 2, DType::kF32, 0).ok());
  EXPECT_EQ(norm, 5.0f);
  ScaleTensor unscale[1] = {{a.data(), a.data(), 2}};
  ASSERT_TRUE(scale_cpu(&found_inf, unscale, nullptr, 1, DType::kF32, DType::kF32, 1.0f / 1024)
                  .ok());
  EXPECT_EQ(a[0], 3.0f / 1024);
  EXPECT_EQ(found_inf, 0.0f);
}

#if COLOSSAL_WITH_CUDA
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// A HostList mirrored on the device.
struct DeviceList {
  HostList host;
  uint8_t* dev = nullptr;

  DeviceList(DType t, const std::vector<int64_t>& sizes, uint32_t seed)
      : DeviceList(HostList(t, sizes, seed)) {}
  explicit DeviceList(HostList h) : host(std::move(h)) {
    if (cudaMalloc(&dev, host.bytes.size()) != cudaSuccess) dev = nullptr;
    if (dev != nullptr) {
      cudaMemcpy(dev, host.bytes.data(), host.bytes.size(), cudaMemcpyHostToDevice);
    }
  }
  DeviceList(const DeviceList&) = delete;
  ~DeviceList() { cudaFree(dev); }
  std::vector<TensorRef> refs() const { return host.refs(dev); }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> out(host.bytes.size());
    cudaMemcpy(out.data(), dev, out.size(), cudaMemcpyDeviceToHost);
    return out;
  }
  uint8_t* dev_element(size_t tensor, int64_t i) {
    return dev + (host.at[tensor] + i) * dtype_size(host.t);
  }
};

// Norm outputs on the device: [guard][norm][found][coef][per-tensor x T][guard].
struct NormOut {
  int64_t count;
  float* dev = nullptr;
  std::vector<float> host;
  explicit NormOut(int64_t tensors) : count(tensors + 5), host(tensors + 5) {
    testing::poison(host.data(), host.size() * 4);
    host[2] = 0.0f;  // found_inf starts clear
    cudaMalloc(&dev, count * 4);
    cudaMemcpy(dev, host.data(), count * 4, cudaMemcpyHostToDevice);
  }
  ~NormOut() { cudaFree(dev); }
  float* norm() { return dev + 1; }
  float* found() { return dev + 2; }
  float* coef() { return dev + 3; }
  float* per() { return dev + 4; }
  std::vector<float> download() {
    std::vector<float> out(count);
    cudaMemcpy(out.data(), dev, count * 4, cudaMemcpyDeviceToHost);
    return out;
  }
};

// float32 chunk sums against the CPU's double: 16384 squares per chunk summed in
// 4 x 256 interleaved float chains of 16, then trees; relative error well under 1e-5.
constexpr double kCudaNormTol = 1e-5;
#endif  // COLOSSAL_WITH_CUDA

TEST(L2NormCudaTest, MatchesCpuAndIsDeterministic) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 300;
  const std::vector<std::vector<int64_t>> lists = {
      list_sizes(200),                  // > 96 tensors: table uploaded to scratch
      list_sizes(90),                   // table in kernel parameters
      {(int64_t{1} << 22) + 3},         // one large tensor
      {0, 0, 0},                        // only empty tensors
      {1},
  };
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const auto& sizes : lists) {
      DeviceList list(t, sizes, seed++);
      ASSERT_NE(list.dev, nullptr);
      const auto drefs = list.refs();
      const int64_t bytes = l2_norm_cuda_scratch_bytes(drefs.data(), drefs.size());
      void* scratch = nullptr;
      CUDA_OK(cudaMalloc(&scratch, bytes));
      NormOut out(drefs.size());
      std::vector<float> first;
      for (int run = 0; run < 2; ++run) {
        ASSERT_TRUE(l2_norm_cuda(out.norm(), out.per(), out.found(), out.coef(), drefs.data(),
                                 scratch, bytes, drefs.size(), t, 2.0f, nullptr)
                        .ok());
        const auto got = out.download();
        if (run == 0) first = got;
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(bits_of(got[i]), bits_of(first[i])) << "run-to-run difference at " << i;
        }
      }
      const auto hrefs = list.host.refs(list.host.bytes.data());
      float norm = 0, found = 0, coef = 0;
      std::vector<float> per(hrefs.size());
      ASSERT_TRUE(l2_norm_cpu(&norm, per.data(), &found, &coef, hrefs.data(), hrefs.size(), t,
                              2.0f)
                      .ok());
      const std::string what = std::string(dtype_name(t)) + " tensors=" +
                               std::to_string(sizes.size());
      EXPECT_EQ(bits_of(first[0]), bits_of(out.host[0])) << "front guard " << what;
      EXPECT_EQ(bits_of(first.back()), bits_of(out.host.back())) << "back guard " << what;
      EXPECT_NEAR(first[1], norm, kCudaNormTol * norm) << what;
      EXPECT_EQ(first[2], 0.0f) << what;
      EXPECT_NEAR(first[3], coef, kCudaNormTol * coef) << what;
      for (size_t i = 0; i < per.size(); ++i) {
        ASSERT_NEAR(first[4 + i], per[i], kCudaNormTol * per[i]) << what << " tensor " << i;
      }
      CUDA_OK(cudaFree(scratch));
    }
  }
  // No tensors at all: norm 0, coefficient 1.
  const int64_t bytes = l2_norm_cuda_scratch_bytes(nullptr, 0);
  void* scratch = nullptr;
  CUDA_OK(cudaMalloc(&scratch, bytes));
  NormOut out(0);
  ASSERT_TRUE(l2_norm_cuda(out.norm(), nullptr, out.found(), out.coef(), nullptr, scratch, bytes, 0,
                           DType::kF32, 1.0f, nullptr)
                  .ok());
  const auto got = out.download();
  EXPECT_EQ(got[1], 0.0f);
  EXPECT_EQ(got[3], 1.0f);
  CUDA_OK(cudaFree(scratch));
#endif
}

TEST(L2NormCudaTest, FlagsNonFinite) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  // Element 40000 of tensor 12 sits in a vector; tensor 4 starts 27 elements in, so
  // its element 0 is before the first vector and element 999 after the last one;
  // tensor 0 has a single element; element 16384 of tensor 9 is a chunk of its own.
  const std::pair<size_t, int64_t> spots[] = {{12, 40000}, {4, 0}, {4, 999}, {0, 0}, {9, 16384}};
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const auto& spot : spots) {
      for (float bad : {kInf, std::nanf("")}) {
        DeviceList list(t, list_sizes(120), 400);
        std::vector<uint8_t> one(8);
        put(t, one.data(), 0, bad);
        CUDA_OK(cudaMemcpy(list.dev_element(spot.first, spot.second), one.data(), dtype_size(t),
                           cudaMemcpyHostToDevice));
        const auto drefs = list.refs();
        const int64_t bytes = l2_norm_cuda_scratch_bytes(drefs.data(), drefs.size());
        void* scratch = nullptr;
        CUDA_OK(cudaMalloc(&scratch, bytes));
        NormOut out(drefs.size());
        ASSERT_TRUE(l2_norm_cuda(out.norm(), out.per(), out.found(), nullptr, drefs.data(),
                                 scratch, bytes, drefs.size(), t, 0.0f, nullptr)
                        .ok());
        const auto got = out.download();
        EXPECT_EQ(got[2], 1.0f) << dtype_name(t) << " tensor " << spot.first;
        EXPECT_FALSE(std::isfinite(got[1]));
        EXPECT_FALSE(std::isfinite(got[4 + spot.first]));
        EXPECT_TRUE(std::isfinite(got[4 + spot.first + 1]));
        CUDA_OK(cudaFree(scratch));
      }
    }
  }
#endif
}

// accumulate_cuda gives accumulate_cpu's bits: the sums and the norm, over
// lists across 32768-element pieces, with float32 subnormals among the values
// (a flush to zero would change both); twice, for run-to-run equality.
TEST(AccumulateCudaTest, MatchesCpuBitForBit) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 700;
  const std::vector<std::vector<int64_t>> lists = {
      list_sizes(120), {100003, 1, 0, 3}, {(int64_t{1} << 20) + 7}, {0}, {}};
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const auto& sizes : lists) {
      const std::string what = std::string(dtype_name(t)) + " tensors=" + std::to_string(sizes.size());
      HostList acc0(t, sizes, seed++), part(t, sizes, seed++);
      if (t != DType::kF16 && !sizes.empty() && sizes[0] > 40) {  // bfloat16 and float32 reach them
        for (int64_t i = 0; i < 40; ++i) {
          put(t, part.element(0, i), 0, (i % 2 ? -1.0 : 1.0) * 3e-39 * (i + 1));
          put(t, acc0.element(0, i), 0, (i % 3 ? 1.0 : -1.0) * 1e-39 * (i + 2));
        }
      }
      HostList expected = acc0;
      std::vector<AccumulateTensor> host_list;
      for (size_t i = 0; i < sizes.size(); ++i) {
        host_list.push_back({expected.element(i, 0), part.element(i, 0), sizes[i]});
      }
      float cpu_norm = -1, cpu_found = 0;
      ASSERT_TRUE(accumulate_cpu(&cpu_norm, &cpu_found, host_list.data(),
                                 static_cast<int64_t>(host_list.size()), t)
                      .ok());
      for (int run = 0; run < 2; ++run) {
        DeviceList dacc(acc0), dpart(part);
        ASSERT_NE(dacc.dev, nullptr);
        ASSERT_NE(dpart.dev, nullptr);
        std::vector<AccumulateTensor> list;
        for (size_t i = 0; i < sizes.size(); ++i) {
          list.push_back({dacc.dev_element(i, 0), dpart.dev_element(i, 0), sizes[i]});
        }
        const int64_t n = static_cast<int64_t>(list.size());
        const int64_t bytes = accumulate_cuda_scratch_bytes(list.data(), n);
        void* scratch = nullptr;
        CUDA_OK(cudaMalloc(&scratch, bytes));
        NormOut out(0);
        ASSERT_TRUE(accumulate_cuda(out.norm(), out.found(), list.data(), scratch, bytes, n, t, nullptr)
                        .ok());
        const auto got = out.download();
        EXPECT_EQ(dacc.download(), expected.bytes) << what;  // the gaps and the tail untouched too
        EXPECT_EQ(bits_of(got[1]), bits_of(cpu_norm)) << what << ": " << got[1] << " vs " << cpu_norm;
        EXPECT_EQ(got[2], 0.0f) << what;
        EXPECT_EQ(bits_of(got[0]), bits_of(out.host[0])) << "front guard " << what;
        EXPECT_EQ(bits_of(got[3]), bits_of(out.host[3])) << "clip slot untouched " << what;
        CUDA_OK(cudaFree(scratch));
      }
    }
  }
#endif
}

// An inf in a part, or finite parts whose sum overflows float16, set found_inf;
// the arguments accumulate_cpu refuses are refused.
TEST(AccumulateCudaTest, FlagsNonFiniteAndRejectsBadArguments) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t spot : {int64_t{0}, int64_t{32767}, int64_t{32768}, int64_t{99999}}) {
      DeviceList acc(t, {100000}, 800), part(t, {100000}, 801);
      std::vector<uint8_t> one(8);
      put(t, one.data(), 0, kInf);
      CUDA_OK(cudaMemcpy(part.dev_element(0, spot), one.data(), dtype_size(t), cudaMemcpyHostToDevice));
      const AccumulateTensor x{acc.dev_element(0, 0), part.dev_element(0, 0), 100000};
      const int64_t bytes = accumulate_cuda_scratch_bytes(&x, 1);
      void* scratch = nullptr;
      CUDA_OK(cudaMalloc(&scratch, bytes));
      NormOut out(0);
      ASSERT_TRUE(accumulate_cuda(out.norm(), out.found(), &x, scratch, bytes, 1, t, nullptr).ok());
      const auto got = out.download();
      EXPECT_EQ(got[2], 1.0f) << dtype_name(t) << " at " << spot;
      EXPECT_FALSE(std::isfinite(got[1]));
      CUDA_OK(cudaFree(scratch));
    }
  }
  DeviceList h(DType::kF16, {2}, 802), hp(DType::kF16, {2}, 803);
  std::vector<uint8_t> big(4);
  put(DType::kF16, big.data(), 0, 60000.0);
  put(DType::kF16, big.data(), 1, 60000.0);
  CUDA_OK(cudaMemcpy(h.dev_element(0, 0), big.data(), 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(hp.dev_element(0, 0), big.data(), 4, cudaMemcpyHostToDevice));
  const AccumulateTensor xh{h.dev_element(0, 0), hp.dev_element(0, 0), 2};
  const int64_t bytes = accumulate_cuda_scratch_bytes(&xh, 1);
  void* scratch = nullptr;
  CUDA_OK(cudaMalloc(&scratch, bytes));
  NormOut out(0);
  ASSERT_TRUE(accumulate_cuda(nullptr, out.found(), &xh, scratch, bytes, 1, DType::kF16, nullptr).ok());
  EXPECT_EQ(out.download()[2], 1.0f);

  DeviceList buf(DType::kF32, {8}, 804);
  float* b = reinterpret_cast<float*>(buf.dev_element(0, 0));
  const AccumulateTensor overlap{b, b + 2, 4}, neg{b, b + 4, -1}, null_part{b, nullptr, 2};
  const AccumulateTensor misaligned{reinterpret_cast<char*>(b) + 1, b + 4, 2}, fine{b, b + 4, 4};
  for (const AccumulateTensor* x : {&overlap, &neg, &null_part, &misaligned}) {
    EXPECT_EQ(accumulate_cuda(out.norm(), nullptr, x, scratch, bytes, 1, DType::kF32, nullptr).code(),
              Code::kInvalidArgument);
  }
  EXPECT_EQ(accumulate_cuda(out.norm(), nullptr, &fine, nullptr, bytes, 1, DType::kF32, nullptr).code(),
            Code::kInvalidArgument);  // no scratch
  EXPECT_EQ(accumulate_cuda(out.norm(), nullptr, &fine, scratch, 8, 1, DType::kF32, nullptr).code(),
            Code::kInvalidArgument);  // too little
  EXPECT_EQ(accumulate_cuda(out.norm(), nullptr, &fine, scratch, bytes, 1, DType::kF64, nullptr).code(),
            Code::kUnsupported);
  CUDA_OK(cudaFree(scratch));
#endif
}

TEST(ScaleCudaTest, MatchesCpuBitForBitInEveryMode) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  constexpr DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  enum Mode { kParamTable, kScratch, kBatches, kInPlace };
  uint32_t seed = 500;
  float* d_factor = nullptr;
  float* d_found = nullptr;
  const float factor = 0.8125f;
  CUDA_OK(cudaMalloc(&d_factor, 4));
  CUDA_OK(cudaMalloc(&d_found, 4));
  CUDA_OK(cudaMemcpy(d_factor, &factor, 4, cudaMemcpyHostToDevice));
  for (Mode mode : {kParamTable, kScratch, kBatches, kInPlace}) {
    for (DType in : kTypes) {
      for (DType out : kTypes) {
        if (mode == kInPlace && in != out) continue;
        const auto sizes = list_sizes(mode == kParamTable ? 80 : 200);
        DeviceList src(in, sizes, seed++);
        DeviceList dst(out, sizes, seed++);
        const float scale = 1.0f / 3.0f;
        std::vector<ScaleTensor> dts, hts;
        for (size_t i = 0; i < sizes.size(); ++i) {
          const bool inplace = mode == kInPlace;
          dts.push_back(ScaleTensor{src.dev_element(i, 0),
                                    inplace ? src.dev_element(i, 0) : dst.dev_element(i, 0),
                                    sizes[i]});
          hts.push_back(ScaleTensor{src.host.element(i, 0),
                                    inplace ? src.host.element(i, 0) : dst.host.element(i, 0),
                                    sizes[i]});
        }
        const int64_t bytes = scale_cuda_scratch_bytes(dts.size());
        void* scratch = nullptr;
        if (mode == kScratch) {
          CUDA_OK(cudaMalloc(&scratch, bytes));
        }
        const float zero = 0.0f;
        CUDA_OK(cudaMemcpy(d_found, &zero, 4, cudaMemcpyHostToDevice));
        ASSERT_TRUE(scale_cuda(d_found, dts.data(), d_factor, scratch, bytes, dts.size(), in, out,
                               scale, nullptr)
                        .ok());
        float found_cpu = 0, found_gpu = -1;
        ASSERT_TRUE(scale_cpu(&found_cpu, hts.data(), &factor, hts.size(), in, out, scale).ok());
        CUDA_OK(cudaMemcpy(&found_gpu, d_found, 4, cudaMemcpyDeviceToHost));
        EXPECT_EQ(found_gpu, found_cpu);
        const DeviceList& result = mode == kInPlace ? src : dst;
        const auto got = result.download();
        ASSERT_EQ(std::memcmp(got.data(), result.host.bytes.data(), got.size()), 0)
            << "mode " << int(mode) << " " << dtype_name(in) << "->" << dtype_name(out);
        CUDA_OK(cudaFree(scratch));
      }
    }
  }
  // Overflow of the output and a non-finite input both set the device flag.
  for (float value : {1e30f, kInf}) {
    DeviceList src(DType::kF32, {5000}, 600);
    DeviceList dst(DType::kF16, {5000}, 601);
    CUDA_OK(cudaMemcpy(src.dev_element(0, 4321), &value, 4, cudaMemcpyHostToDevice));
    const auto dts = std::vector<ScaleTensor>{{src.dev_element(0, 0), dst.dev_element(0, 0), 5000}};
    const float zero = 0.0f;
    CUDA_OK(cudaMemcpy(d_found, &zero, 4, cudaMemcpyHostToDevice));
    ASSERT_TRUE(scale_cuda(d_found, dts.data(), nullptr, nullptr, 0, 1, DType::kF32, DType::kF16,
                           1.0f, nullptr)
                    .ok());
    float found = 0;
    CUDA_OK(cudaMemcpy(&found, d_found, 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(found, 1.0f) << value;
  }
  CUDA_OK(cudaFree(d_factor));
  CUDA_OK(cudaFree(d_found));
#endif
}

TEST(MultiTensorCudaTest, RejectsBadArguments) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  DeviceList list(DType::kF32, list_sizes(100), 700);
  const auto refs = list.refs();
  const int64_t bytes = l2_norm_cuda_scratch_bytes(refs.data(), refs.size());
  void* scratch = nullptr;
  CUDA_OK(cudaMalloc(&scratch, bytes + 16));
  NormOut out(refs.size());
  const auto norm = [&](void* s, int64_t b, DType t) {
    return l2_norm_cuda(out.norm(), nullptr, nullptr, nullptr, refs.data(), s, b, refs.size(), t,
                        0.0f, nullptr)
        .code();
  };
  EXPECT_EQ(norm(nullptr, bytes, DType::kF32), Code::kInvalidArgument);
  EXPECT_EQ(norm(scratch, bytes - 1, DType::kF32), Code::kInvalidArgument);
  EXPECT_EQ(norm(static_cast<char*>(scratch) + 8, bytes, DType::kF32), Code::kInvalidArgument);
  EXPECT_EQ(norm(scratch, bytes, DType::kF64), Code::kUnsupported);
  std::vector<ScaleTensor> st;
  for (const TensorRef& r : refs) st.push_back(ScaleTensor{r.data, const_cast<void*>(r.data), r.n});
  const int64_t sbytes = scale_cuda_scratch_bytes(st.size());
  EXPECT_EQ(scale_cuda(nullptr, st.data(), nullptr, scratch, sbytes - 1, st.size(), DType::kF32,
                       DType::kF32, 1.0f, nullptr)
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(scale_cuda(nullptr, st.data(), nullptr, nullptr, 0, st.size(), DType::kF32,
                       DType::kBF16, 1.0f, nullptr)
                .code(),
            Code::kInvalidArgument);  // in place across element sizes
  CUDA_OK(cudaFree(scratch));
#endif
}

}  // namespace
}  // namespace colossal::kernels::multi_tensor
