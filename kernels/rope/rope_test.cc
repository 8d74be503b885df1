// kernels/rope: the CPU path against an independent long double evaluation of
// the rotation on fresh random data (outputs poisoned with NaN before every
// call), the backward as the exact transpose of the forward in float64,
// rope_inv_freq against hand-computed values (plain and Llama 3 scaling), and
// the CUDA path against the CPU path with per-dtype tolerances derived below.
#include "kernels/rope/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/half.h"
#include "tests/util/gpu_test.h"
#include "tests/util/host_buffer.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::rope {
namespace {

using Buf = testing::HostBuffer;

constexpr DType kCpuTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};

struct Case {
  int64_t batch, seq, q_heads, kv_heads, head_dim;
  double theta;
  bool llama3;
};

// GQA (8 / 2), MHA, MQA, D = 2, 6, 8, 64, 128; seq not a power of two; one long
// sequence (angles up to ~3000 rad).
const Case kCases[] = {
    {1, 1, 1, 1, 2, 10000.0, false},     {2, 7, 3, 1, 6, 10000.0, false},
    {2, 37, 8, 2, 64, 500000.0, true},   {1, 100, 4, 4, 128, 10000.0, false},
    {3, 13, 8, 2, 128, 500000.0, true},  {2, 9, 2, 1, 8, 10000.0, false},
    {1, 3001, 1, 1, 8, 10000.0, false},
};

std::string label(const Case& c, DType dtype) {
  return std::string(dtype_name(dtype)) + " B" + std::to_string(c.batch) + " T" + std::to_string(c.seq) +
         " H" + std::to_string(c.q_heads) + " KV" + std::to_string(c.kv_heads) + " D" +
         std::to_string(c.head_dim);
}

std::vector<float> inv_freq_for(const Case& c) {
  std::vector<float> f(c.head_dim / 2);
  const Llama3RopeScaling s{32.0, 1.0, 4.0, 8192};
  EXPECT_TRUE(rope_inv_freq(f.data(), c.head_dim, c.theta, c.llama3 ? &s : nullptr).ok());
  return f;
}

// Every byte 0xFF: NaN in float16, bfloat16, float32 and float64, so an
// element a kernel forgets to write fails every comparison.
void poison_nan(Buf* b) { std::memset(b->data(), 0xFF, b->bytes()); }

// Relative rounding of one stored output and an absolute floor for the type's
// subnormal range.
double round_tol(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 1.2e-7;   // 2^-23
    case DType::kF16: return 1.0e-3;   // 2^-10
    case DType::kBF16: return 8.0e-3;  // 2^-7
    default: return 0.0;               // float64: no rounding beyond kF64Math's
  }
}
double abs_floor(DType dtype) { return dtype == DType::kF16 ? 6.0e-8 : 1.0e-30; }
// The CPU's double cos/sin/products against long double: a few double ulps of
// the terms' size (|x[i]| + |x[i + D/2]|), before the output's one rounding.
constexpr double kF64Math = 1e-15;

// The packed row of Hugging Face's rotation, evaluated independently in long
// double from the inputs as doubles: sign +1 forward (q, k, v -> packed),
// -1 the transpose (packed -> dq, dk, dv). `compact[g]` are q, k, v.
struct Reference {
  const Case& c;
  const std::vector<float>& inv_freq;
  int64_t R() const { return c.q_heads + 2 * c.kv_heads; }
  // Index of element e of head h in row r of the packed buffer and of its
  // compact buffer (g: 0 q, 1 k, 2 v).
  int64_t packed_index(int64_t r, int64_t h, int64_t e) const { return (r * R() + h) * c.head_dim + e; }
  void compact_of(int64_t r, int64_t h, int64_t e, int* g, int64_t* idx) const {
    const int64_t D = c.head_dim;
    if (h < c.q_heads) {
      *g = 0, *idx = (r * c.q_heads + h) * D + e;
    } else if (h < c.q_heads + c.kv_heads) {
      *g = 1, *idx = (r * c.kv_heads + h - c.q_heads) * D + e;
    } else {
      *g = 2, *idx = (r * c.kv_heads + h - c.q_heads - c.kv_heads) * D + e;
    }
  }
  // Output element e of head h of row r, the input read through `in(h, e)`.
  template <typename In>
  long double rotate(int64_t r, int64_t h, int64_t e, long double sign, In in, long double* scale) const {
    const int64_t half = c.head_dim / 2, i = e % half;
    const long double x = in(h, i), y = in(h, i + half);
    *scale = std::fabs(x) + std::fabs(y);
    if (h >= c.q_heads + c.kv_heads) return in(h, e);  // v: copied
    const float a = static_cast<float>(r % c.seq) * inv_freq[i];
    const long double cs = std::cos(static_cast<long double>(a));
    const long double sn = sign * std::sin(static_cast<long double>(a));
    return e < half ? x * cs - y * sn : y * cs + x * sn;
  }
};

void expect_close(double got, long double want, double scale, DType dtype, double math_tol,
                  const std::string& what) {
  const double w = static_cast<double>(want);
  ASSERT_LE(std::fabs(got - w), round_tol(dtype) * std::fabs(w) + math_tol * scale + abs_floor(dtype))
      << what << " got " << got << " want " << w;
}

// ------------------------------------------------------------------ CPU ----

TEST(RopeCpuTest, ForwardAndBackwardMatchReference) {
  uint32_t seed = 1;
  for (const Case& c : kCases) {
    const std::vector<float> inv_freq = inv_freq_for(c);
    const Reference ref{c, inv_freq};
    const int64_t rows = c.batch * c.seq, D = c.head_dim;
    const int64_t nq = rows * c.q_heads * D, nk = rows * c.kv_heads * D, np = rows * ref.R() * D;
    for (DType dtype : kCpuTypes) {
      const std::string what = label(c, dtype);
      const Buf q = Buf::random(dtype, nq, seed++, -2.0f, 2.0f);
      const Buf k = Buf::random(dtype, nk, seed++, -2.0f, 2.0f);
      const Buf v = Buf::random(dtype, nk, seed++, -2.0f, 2.0f);
      const Buf dqkv = Buf::random(dtype, np, seed++, -3.0f, 3.0f);
      Buf qkv(dtype, np), dq(dtype, nq), dk(dtype, nk), dv(dtype, nk);
      for (Buf* b : {&qkv, &dq, &dk, &dv}) poison_nan(b);
      ASSERT_TRUE(rope_pack_forward_cpu(qkv.data(), q.data(), k.data(), v.data(), inv_freq.data(), nullptr, c.batch,
                                        c.seq, c.q_heads, c.kv_heads, D, dtype).ok());
      ASSERT_TRUE(rope_pack_backward_cpu(dq.data(), dk.data(), dv.data(), dqkv.data(), inv_freq.data(), nullptr,
                                         c.batch, c.seq, c.q_heads, c.kv_heads, D, dtype).ok());
      const Buf* compact_in[3] = {&q, &k, &v};
      const Buf* compact_out[3] = {&dq, &dk, &dv};
      // Every dtype computes in double: kF64Math bounds that before the rounding.
      const double math_tol = kF64Math;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t h = 0; h < ref.R(); ++h) {
          for (int64_t e = 0; e < D; ++e) {
            long double scale = 0;
            const long double want_fwd = ref.rotate(r, h, e, 1.0L, [&](int64_t hh, int64_t ee) {
              int g;
              int64_t idx;
              ref.compact_of(r, hh, ee, &g, &idx);
              return static_cast<long double>(compact_in[g]->get(idx));
            }, &scale);
            expect_close(qkv.get(ref.packed_index(r, h, e)), want_fwd, scale, dtype, math_tol,
                         what + " forward r=" + std::to_string(r) + " h=" + std::to_string(h) +
                             " e=" + std::to_string(e));
            const long double want_bwd = ref.rotate(r, h, e, -1.0L, [&](int64_t hh, int64_t ee) {
              return static_cast<long double>(dqkv.get(ref.packed_index(r, hh, ee)));
            }, &scale);
            int g;
            int64_t idx;
            ref.compact_of(r, h, e, &g, &idx);
            expect_close(compact_out[g]->get(idx), want_bwd, scale, dtype, math_tol,
                         what + " backward r=" + std::to_string(r) + " h=" + std::to_string(h) +
                             " e=" + std::to_string(e));
          }
        }
      }
      // v is copied bit for bit both ways.
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t w = c.kv_heads * D;
        for (int64_t e = 0; e < w; ++e) {
          const int64_t p = r * ref.R() * D + (c.q_heads + c.kv_heads) * D + e;
          ASSERT_EQ(qkv.get(p), v.get(r * w + e)) << what;
          ASSERT_EQ(dv.get(r * w + e), dqkv.get(p)) << what;
        }
      }
    }
  }
}

// <dqkv, rope(x)> == <rope^T(dqkv), x> in float64 for x = (q, k, v).
TEST(RopeCpuTest, BackwardIsTheTransposeFloat64) {
  const DType f64 = DType::kF64;
  uint32_t seed = 500;
  for (const Case& c : kCases) {
    const std::vector<float> inv_freq = inv_freq_for(c);
    const int64_t rows = c.batch * c.seq, D = c.head_dim;
    const int64_t nq = rows * c.q_heads * D, nk = rows * c.kv_heads * D,
                  np = rows * (c.q_heads + 2 * c.kv_heads) * D;
    const Buf q = Buf::random(f64, nq, seed++), k = Buf::random(f64, nk, seed++),
              v = Buf::random(f64, nk, seed++), dqkv = Buf::random(f64, np, seed++);
    Buf qkv(f64, np), dq(f64, nq), dk(f64, nk), dv(f64, nk);
    for (Buf* b : {&qkv, &dq, &dk, &dv}) poison_nan(b);
    ASSERT_TRUE(rope_pack_forward_cpu(qkv.data(), q.data(), k.data(), v.data(), inv_freq.data(), nullptr, c.batch,
                                      c.seq, c.q_heads, c.kv_heads, D, f64).ok());
    ASSERT_TRUE(rope_pack_backward_cpu(dq.data(), dk.data(), dv.data(), dqkv.data(), inv_freq.data(), nullptr,
                                       c.batch, c.seq, c.q_heads, c.kv_heads, D, f64).ok());
    long double lhs = 0, rhs = 0, mag = 0;
    for (int64_t i = 0; i < np; ++i) {
      lhs += static_cast<long double>(dqkv.get(i)) * qkv.get(i);
      mag += std::fabs(dqkv.get(i) * qkv.get(i));
    }
    for (auto [g, x] : {std::pair{&dq, &q}, std::pair{&dk, &k}, std::pair{&dv, &v}}) {
      for (int64_t i = 0; i < g->size(); ++i) rhs += static_cast<long double>(g->get(i)) * x->get(i);
    }
    // Each side's terms carry a few double ulps (cos, sin, products, one rounding).
    EXPECT_LE(std::fabs(static_cast<double>(lhs - rhs)), 1e-14 * static_cast<double>(mag) + 1e-300)
        << label(c, f64) << " lhs " << static_cast<double>(lhs) << " rhs " << static_cast<double>(rhs);
  }
}

TEST(RopeCpuTest, SameBitsWhateverTheThreadCount) {
  // 2 x 2048 rows x 48 heads x 64 runs on the OpenMP team; a call of seq <= 21
  // (21 x 3072 < 2^16 elements) on the calling thread. Row r of the big run must
  // equal the last row of a batch-1 run of seq r % 2048 + 1 holding the same data.
  const Case c{2, 2048, 32, 8, 64, 500000.0, true};
  const std::vector<float> inv_freq = inv_freq_for(c);
  const int64_t rows = c.batch * c.seq, D = c.head_dim, R = c.q_heads + 2 * c.kv_heads;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Buf q = Buf::random(dtype, rows * c.q_heads * D, 900), k = Buf::random(dtype, rows * c.kv_heads * D, 901),
              v = Buf::random(dtype, rows * c.kv_heads * D, 902);
    Buf qkv(dtype, rows * R * D);
    poison_nan(&qkv);
    ASSERT_TRUE(rope_pack_forward_cpu(qkv.data(), q.data(), k.data(), v.data(), inv_freq.data(), nullptr, c.batch,
                                      c.seq, c.q_heads, c.kv_heads, D, dtype).ok());
    const size_t es = dtype_size(dtype);
    for (int64_t r : {int64_t{0}, int64_t{5}, int64_t{20}, int64_t{2048 + 3}, int64_t{2048 + 20}}) {
      // One row, batch 1, seq r % seq + 1: its last row has the same position.
      const int64_t t = r % c.seq, seq1 = t + 1;
      Buf q1(dtype, seq1 * c.q_heads * D), k1(dtype, seq1 * c.kv_heads * D), v1(dtype, seq1 * c.kv_heads * D),
          out1(dtype, seq1 * R * D);
      poison_nan(&out1);
      std::memcpy(static_cast<uint8_t*>(q1.data()) + t * c.q_heads * D * es,
                  static_cast<const uint8_t*>(q.data()) + r * c.q_heads * D * es, c.q_heads * D * es);
      std::memcpy(static_cast<uint8_t*>(k1.data()) + t * c.kv_heads * D * es,
                  static_cast<const uint8_t*>(k.data()) + r * c.kv_heads * D * es, c.kv_heads * D * es);
      std::memcpy(static_cast<uint8_t*>(v1.data()) + t * c.kv_heads * D * es,
                  static_cast<const uint8_t*>(v.data()) + r * c.kv_heads * D * es, c.kv_heads * D * es);
      ASSERT_TRUE(rope_pack_forward_cpu(out1.data(), q1.data(), k1.data(), v1.data(), inv_freq.data(), nullptr, 1, seq1,
                                        c.q_heads, c.kv_heads, D, dtype).ok());
      EXPECT_EQ(std::memcmp(static_cast<const uint8_t*>(out1.data()) + t * R * D * es,
                            static_cast<const uint8_t*>(qkv.data()) + r * R * D * es, R * D * es),
                0)
          << dtype_name(dtype) << " row " << r;
    }
  }
}

// Given positions, row r is rotated by positions[r]: bit for bit the row of a
// batch-1 call at that position (forward and backward), and positions r % seq
// are the call without them.
TEST(RopeCpuTest, PositionsRotateEachRowByItsOwn) {
  const Case c{2, 37, 8, 2, 64, 500000.0, true};
  const std::vector<float> inv_freq = inv_freq_for(c);
  const int64_t rows = c.batch * c.seq, D = c.head_dim, R = c.q_heads + 2 * c.kv_heads;
  std::vector<int32_t> positions(rows), plain(rows);
  uint32_t state = 12345;
  for (int64_t r = 0; r < rows; ++r) {
    state = state * 1664525u + 1013904223u;
    positions[r] = static_cast<int32_t>(state >> 8) % 300;
    plain[r] = static_cast<int32_t>(r % c.seq);
  }
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const size_t es = dtype_size(dtype);
    const Buf q = Buf::random(dtype, rows * c.q_heads * D, 31), k = Buf::random(dtype, rows * c.kv_heads * D, 32),
              v = Buf::random(dtype, rows * c.kv_heads * D, 33), dqkv = Buf::random(dtype, rows * R * D, 34);
    Buf qkv(dtype, rows * R * D), dq(dtype, rows * c.q_heads * D), dk(dtype, rows * c.kv_heads * D),
        dv(dtype, rows * c.kv_heads * D);
    for (Buf* b : {&qkv, &dq, &dk, &dv}) poison_nan(b);
    ASSERT_TRUE(rope_pack_forward_cpu(qkv.data(), q.data(), k.data(), v.data(), inv_freq.data(), positions.data(),
                                      c.batch, c.seq, c.q_heads, c.kv_heads, D, dtype).ok());
    ASSERT_TRUE(rope_pack_backward_cpu(dq.data(), dk.data(), dv.data(), dqkv.data(), inv_freq.data(),
                                       positions.data(), c.batch, c.seq, c.q_heads, c.kv_heads, D, dtype).ok());
    for (int64_t r = 0; r < rows; r += 5) {
      const int64_t t = positions[r], seq1 = t + 1;
      auto row_at_t = [&](const Buf& from, int64_t width) {
        Buf one(dtype, seq1 * width);
        std::memcpy(static_cast<uint8_t*>(one.data()) + t * width * es,
                    static_cast<const uint8_t*>(from.data()) + r * width * es, width * es);
        return one;
      };
      const Buf q1 = row_at_t(q, c.q_heads * D), k1 = row_at_t(k, c.kv_heads * D), v1 = row_at_t(v, c.kv_heads * D),
                g1 = row_at_t(dqkv, R * D);
      Buf out1(dtype, seq1 * R * D), dq1(dtype, seq1 * c.q_heads * D), dk1(dtype, seq1 * c.kv_heads * D),
          dv1(dtype, seq1 * c.kv_heads * D);
      ASSERT_TRUE(rope_pack_forward_cpu(out1.data(), q1.data(), k1.data(), v1.data(), inv_freq.data(), nullptr, 1,
                                        seq1, c.q_heads, c.kv_heads, D, dtype).ok());
      ASSERT_TRUE(rope_pack_backward_cpu(dq1.data(), dk1.data(), dv1.data(), g1.data(), inv_freq.data(), nullptr, 1,
                                         seq1, c.q_heads, c.kv_heads, D, dtype).ok());
      auto same_row = [&](const Buf& one, const Buf& all, int64_t width) {
        return std::memcmp(static_cast<const uint8_t*>(one.data()) + t * width * es,
                           static_cast<const uint8_t*>(all.data()) + r * width * es, width * es) == 0;
      };
      EXPECT_TRUE(same_row(out1, qkv, R * D)) << dtype_name(dtype) << " row " << r << " position " << t;
      EXPECT_TRUE(same_row(dq1, dq, c.q_heads * D)) << dtype_name(dtype) << " row " << r;
      EXPECT_TRUE(same_row(dk1, dk, c.kv_heads * D)) << dtype_name(dtype) << " row " << r;
    }
    Buf with(dtype, rows * R * D), without(dtype, rows * R * D);
    ASSERT_TRUE(rope_pack_forward_cpu(with.data(), q.data(), k.data(), v.data(), inv_freq.data(), plain.data(),
                                      c.batch, c.seq, c.q_heads, c.kv_heads, D, dtype).ok());
    ASSERT_TRUE(rope_pack_forward_cpu(without.data(), q.data(), k.data(), v.data(), inv_freq.data(), nullptr,
                                      c.batch, c.seq, c.q_heads, c.kv_heads, D, dtype).ok());
    EXPECT_TRUE(with.same_bits(without)) << dtype_name(dtype);
  }
}

TEST(RopeCpuTest, InvFreqHandValues) {
  // theta 10000, D 8: 10000^-(0, 1/4, 1/2, 3/4) rounded to float32.
  float f[32];
  ASSERT_TRUE(rope_inv_freq(f, 8, 10000.0, nullptr).ok());
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], 0.1f);
  EXPECT_EQ(f[2], 0.01f);
  EXPECT_EQ(f[3], 0.001f);

  // Llama 3.2: theta 500000, D 64, factor 32, low 1, high 4, original 8192, so
  // low_freq_wavelen 8192 and high_freq_wavelen 2048. wavelen = 2 pi / inv_freq:
  //   i 14: 1956.5 < 2048 -> unchanged (0.0032114461...)
  //   i 15: 2948.3 -> smooth = (8192 / 2948.3 - 1) / 3 = 0.59285,
  //         (1 - smooth) * f / 32 + smooth * f with f = 0.0021311196 -> 0.00129054801
  //   i 16: f = 500000^-1/2 = 0.00141421356, wavelen 4442.9, smooth 0.28128 -> 0.000429556792
  //   i 17: smooth 0.074527 -> 9.70828696e-05
  //   i 18: 10089 > 8192 -> f / 32 = 0.000622772437 / 32 = 1.94616387e-05
  //   i 31: f / 32 = 3.01385808e-06 / 32 = 9.41830649e-08
  const Llama3RopeScaling l32{32.0, 1.0, 4.0, 8192};
  ASSERT_TRUE(rope_inv_freq(f, 64, 500000.0, &l32).ok());
  const std::pair<int, double> want32[] = {{0, 1.0},
                                           {1, 0.6636012196540833},
                                           {14, 0.0032114461064338684},
                                           {15, 0.0012905480107292533},
                                           {16, 0.00042955679236911237},
                                           {17, 9.70828696154058e-05},
                                           {18, 1.9461638657958247e-05},
                                           {31, 9.418306490260875e-08}};
  for (auto [i, w] : want32) EXPECT_NEAR(f[i], w, 1.2e-7 * w) << "llama3 factor 32, i=" << i;
  // Llama 3.1's factor 8: the medium band at i 16 is 0.000524846.
  const Llama3RopeScaling l8{8.0, 1.0, 4.0, 8192};
  ASSERT_TRUE(rope_inv_freq(f, 64, 500000.0, &l8).ok());
  EXPECT_NEAR(f[16], 0.000524846138432622, 1.2e-7 * 0.000524846);
  EXPECT_NEAR(f[18], 7.784655463183299e-05, 1.2e-7 * 7.78e-05);
  EXPECT_EQ(f[14], 0.0032114461064338684f);

  // Unscaled values equal the formula at every i, one rounding from double.
  ASSERT_TRUE(rope_inv_freq(f, 64, 500000.0, nullptr).ok());
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(f[i], static_cast<float>(1.0L / std::pow(500000.0L, (2.0L * i) / 64.0L))) << "i=" << i;
  }
}

TEST(RopeCpuTest, RejectsBadArguments) {
  using Code = KernelStatus::Code;
  float a[64] = {1}, b[64] = {1}, c[64] = {1}, d[64] = {1}, inv[4] = {1, 0.5f, 0.25f, 0.125f};
  // head_dim odd, sizes non-positive, null pointers.
  EXPECT_EQ(rope_pack_forward_cpu(a, b, c, d, inv, nullptr, 1, 1, 1, 1, 3, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(rope_pack_forward_cpu(a, b, c, d, inv, nullptr, 0, 1, 1, 1, 2, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(rope_pack_forward_cpu(a, b, c, d, inv, nullptr, 1, -1, 1, 1, 2, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(rope_pack_forward_cpu(a, b, c, d, inv, nullptr, 1, 1, 0, 1, 2, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(rope_pack_forward_cpu(a, b, c, d, inv, nullptr, 1, 1, 1, 0, 2, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(rope_pack_forward_cpu(a, b, c, d, inv, nullptr, 1, 1, 1, 1, 0, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(rope_pack_forward_cpu(nullptr, b, c, d, inv, nullptr, 1, 1, 1, 1, 2, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(rope_pack_forward_cpu(a, b, nullptr, d, inv, nullptr, 1, 1, 1, 1, 2, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(rope_pack_forward_cpu(a, b, c, d, nullptr, nullptr, 1, 1, 1, 1, 2, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(rope_pack_forward_cpu(a, b, c, d, inv, nullptr, 1, 1, 1, 1, 2, DType::kI32).code(), Code::kUnsupported);
  EXPECT_EQ(rope_pack_backward_cpu(a, b, c, d, inv, nullptr, 1, 1, 1, 1, 5, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(rope_pack_backward_cpu(a, nullptr, c, d, inv, nullptr, 1, 1, 1, 1, 2, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(rope_pack_backward_cpu(a, b, c, nullptr, inv, nullptr, 1, 1, 1, 1, 2, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(rope_pack_backward_cpu(a, b, c, d, inv, nullptr, 1, 1, 1, 1, 2, DType::kU8).code(), Code::kUnsupported);
  EXPECT_EQ(a[0], 1.0f);  // nothing written on an error
  float f[4];
  EXPECT_EQ(rope_inv_freq(nullptr, 8, 10000.0, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(rope_inv_freq(f, 7, 10000.0, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(rope_inv_freq(f, 0, 10000.0, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(rope_inv_freq(f, 8, 0.0, nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(rope_inv_freq(f, 8, INFINITY, nullptr).code(), Code::kInvalidArgument);
  const Llama3RopeScaling equal_factors{8.0, 4.0, 4.0, 8192}, no_len{8.0, 1.0, 4.0, 0}, zero{0.0, 1.0, 4.0, 8192};
  EXPECT_EQ(rope_inv_freq(f, 8, 10000.0, &equal_factors).code(), Code::kInvalidArgument);
  EXPECT_EQ(rope_inv_freq(f, 8, 10000.0, &no_len).code(), Code::kInvalidArgument);
  EXPECT_EQ(rope_inv_freq(f, 8, 10000.0, &zero).code(), Code::kInvalidArgument);
}

// ----------------------------------------------------------------- CUDA ----

#if COLOSSAL_WITH_CUDA
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

constexpr DType kCudaTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// CUDA against the CPU (double math, one rounding). The device's angle is the
// same float32 product; its sincosf is within 2 ulp (<= 2^-23 absolute for
// values in [-1, 1]); the two products and the FMA add at most 2^-24 each of
// |x[i]| + |x[i + D/2]|. So before the final rounding the float32 result is
// within 2^-22 (|x[i]| + |x[i + D/2]|) of the exact one; after it, the two
// roundings may differ by one output ulp (round_tol). kCudaMath = 2^-22 with margin.
constexpr double kCudaMath = 3e-7;

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DevicePtr = std::unique_ptr<uint8_t, CudaFree>;

// A device copy of `host`, `offset` elements into its allocation (offset 1
// misaligns it and so takes the scalar path). Poisoned with NaN around it.
DevicePtr to_device(const Buf& host, int64_t offset, void** at) {
  const size_t es = dtype_size(host.dtype()), total = host.bytes() + 2 * offset * es + 64;
  void* p = nullptr;
  if (cudaMalloc(&p, total) != cudaSuccess) return nullptr;
  DevicePtr owner(static_cast<uint8_t*>(p));
  std::vector<uint8_t> init(total, 0xFF);
  std::memcpy(init.data() + offset * es, host.data(), host.bytes());
  if (cudaMemcpy(p, init.data(), total, cudaMemcpyHostToDevice) != cudaSuccess) return nullptr;
  *at = owner.get() + offset * es;
  return owner;
}

void from_device(Buf* host, const void* at) {
  ASSERT_EQ(cudaMemcpy(host->data(), at, host->bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
}
#endif

TEST(RopeCudaTest, MatchesCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 2000;
  std::vector<Case> cases(std::begin(kCases), std::end(kCases));
  cases.push_back({8, 257, 32, 8, 64, 500000.0, true});  // Llama-3.2-1B heads
  for (const Case& c : cases) {
    const std::vector<float> inv_freq = inv_freq_for(c);
    const int64_t rows = c.batch * c.seq, D = c.head_dim, R = c.q_heads + 2 * c.kv_heads;
    const int64_t nq = rows * c.q_heads * D, nk = rows * c.kv_heads * D, np = rows * R * D;
    void* d_inv = nullptr;
    CUDA_OK(cudaMalloc(&d_inv, inv_freq.size() * sizeof(float)));
    DevicePtr inv_owner(static_cast<uint8_t*>(d_inv));
    CUDA_OK(cudaMemcpy(d_inv, inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice));
    for (DType dtype : kCudaTypes) {
      for (int64_t offset : {0, 1}) {
        const std::string what = label(c, dtype) + " offset " + std::to_string(offset);
        const Buf q = Buf::random(dtype, nq, seed++, -2.0f, 2.0f), k = Buf::random(dtype, nk, seed++, -2.0f, 2.0f),
                  v = Buf::random(dtype, nk, seed++, -2.0f, 2.0f), dqkv = Buf::random(dtype, np, seed++, -3.0f, 3.0f);
        Buf want_qkv(dtype, np), want_dq(dtype, nq), want_dk(dtype, nk), want_dv(dtype, nk);
        ASSERT_TRUE(rope_pack_forward_cpu(want_qkv.data(), q.data(), k.data(), v.data(), inv_freq.data(), nullptr, c.batch,
                                          c.seq, c.q_heads, c.kv_heads, D, dtype).ok());
        ASSERT_TRUE(rope_pack_backward_cpu(want_dq.data(), want_dk.data(), want_dv.data(), dqkv.data(),
                                           inv_freq.data(), nullptr, c.batch, c.seq, c.q_heads, c.kv_heads, D, dtype).ok());
        Buf out_qkv(dtype, np), out_dq(dtype, nq), out_dk(dtype, nk), out_dv(dtype, nk);
        void *pq, *pk, *pv, *pdqkv, *pqkv, *pdq, *pdk, *pdv;
        for (Buf* b : {&out_qkv, &out_dq, &out_dk, &out_dv}) poison_nan(b);
        DevicePtr o1 = to_device(q, offset, &pq), o2 = to_device(k, offset, &pk), o3 = to_device(v, offset, &pv),
                  o4 = to_device(dqkv, offset, &pdqkv), o5 = to_device(out_qkv, offset, &pqkv),
                  o6 = to_device(out_dq, offset, &pdq), o7 = to_device(out_dk, offset, &pdk),
                  o8 = to_device(out_dv, offset, &pdv);
        ASSERT_TRUE(o1 && o2 && o3 && o4 && o5 && o6 && o7 && o8) << what;
        ASSERT_TRUE(rope_pack_forward_cuda(pqkv, pq, pk, pv, static_cast<const float*>(d_inv), nullptr, c.batch, c.seq,
                                           c.q_heads, c.kv_heads, D, dtype, nullptr).ok());
        ASSERT_TRUE(rope_pack_backward_cuda(pdq, pdk, pdv, pdqkv, static_cast<const float*>(d_inv), nullptr, c.batch,
                                            c.seq, c.q_heads, c.kv_heads, D, dtype, nullptr).ok());
        CUDA_OK(cudaDeviceSynchronize());
        from_device(&out_qkv, pqkv);
        from_device(&out_dq, pdq);
        from_device(&out_dk, pdk);
        from_device(&out_dv, pdv);
        // Scale of element e: |x[i]| + |x[i + D/2]| of its pair in the input.
        auto check = [&](const Buf& got, const Buf& want, const Buf& in, const std::string& name) {
          const int64_t half = D / 2;
          for (int64_t idx = 0; idx < got.size(); ++idx) {
            const int64_t head_base = idx - idx % D, i = idx % half;
            const double scale = std::fabs(in.get(head_base + i)) + std::fabs(in.get(head_base + i + half));
            expect_close(got.get(idx), want.get(idx), scale, dtype, kCudaMath, what + " " + name + " idx " +
                                                                                  std::to_string(idx));
            if (::testing::Test::HasFatalFailure()) return;
          }
        };
        // The forward's input for packed element p: rebuild a packed copy of q, k, v.
        Buf packed_in(dtype, np);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t e = 0; e < R * D; ++e) {
            const int64_t h = e / D, j = e % D;
            double x;
            if (h < c.q_heads) x = q.get((r * c.q_heads + h) * D + j);
            else if (h < c.q_heads + c.kv_heads) x = k.get((r * c.kv_heads + h - c.q_heads) * D + j);
            else x = v.get((r * c.kv_heads + h - c.q_heads - c.kv_heads) * D + j);
            packed_in.set(r * R * D + e, x);
          }
        }
        check(out_qkv, want_qkv, packed_in, "forward");
        // Backward inputs, head by head in the compact layouts.
        Buf in_dq(dtype, nq), in_dk(dtype, nk);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t e = 0; e < c.q_heads * D; ++e) in_dq.set(r * c.q_heads * D + e, dqkv.get(r * R * D + e));
          for (int64_t e = 0; e < c.kv_heads * D; ++e) {
            in_dk.set(r * c.kv_heads * D + e, dqkv.get(r * R * D + c.q_heads * D + e));
          }
        }
        check(out_dq, want_dq, in_dq, "dq");
        check(out_dk, want_dk, in_dk, "dk");
        EXPECT_TRUE(out_dv.same_bits(want_dv)) << what << " dv is a copy";
      }
    }
  }
#endif
}

// Positions on the device: the CUDA call with them against the CPU call with
// the same positions (the tolerance of MatchesCpu, which this case's rows keep).
TEST(RopeCudaTest, PositionsMatchCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const Case c{2, 45, 8, 2, 64, 500000.0, true};
  const std::vector<float> inv_freq = inv_freq_for(c);
  const int64_t rows = c.batch * c.seq, D = c.head_dim, R = c.q_heads + 2 * c.kv_heads, half = D / 2;
  std::vector<int32_t> positions(rows);
  for (int64_t r = 0; r < rows; ++r) positions[r] = static_cast<int32_t>((r * 7919) % 3001);
  void *d_inv = nullptr, *d_pos = nullptr;
  CUDA_OK(cudaMalloc(&d_inv, inv_freq.size() * sizeof(float)));
  DevicePtr inv_owner(static_cast<uint8_t*>(d_inv));
  CUDA_OK(cudaMalloc(&d_pos, rows * sizeof(int32_t)));
  DevicePtr pos_owner(static_cast<uint8_t*>(d_pos));
  CUDA_OK(cudaMemcpy(d_inv, inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_pos, positions.data(), rows * sizeof(int32_t), cudaMemcpyHostToDevice));
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Buf q = Buf::random(dtype, rows * c.q_heads * D, 41, -2.0f, 2.0f),
              k = Buf::random(dtype, rows * c.kv_heads * D, 42, -2.0f, 2.0f),
              v = Buf::random(dtype, rows * c.kv_heads * D, 43, -2.0f, 2.0f);
    Buf want(dtype, rows * R * D), got(dtype, rows * R * D);
    poison_nan(&got);
    ASSERT_TRUE(rope_pack_forward_cpu(want.data(), q.data(), k.data(), v.data(), inv_freq.data(), positions.data(),
                                      c.batch, c.seq, c.q_heads, c.kv_heads, D, dtype).ok());
    void *pq, *pk, *pv, *pqkv;
    DevicePtr o1 = to_device(q, 0, &pq), o2 = to_device(k, 0, &pk), o3 = to_device(v, 0, &pv),
              o4 = to_device(got, 0, &pqkv);
    ASSERT_TRUE(o1 && o2 && o3 && o4);
    ASSERT_TRUE(rope_pack_forward_cuda(pqkv, pq, pk, pv, static_cast<const float*>(d_inv),
                                       static_cast<const int32_t*>(d_pos), c.batch, c.seq, c.q_heads, c.kv_heads,
                                       D, dtype, nullptr).ok());
    CUDA_OK(cudaDeviceSynchronize());
    from_device(&got, pqkv);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t h = 0; h < c.q_heads + c.kv_heads; ++h) {
        const Buf& in = h < c.q_heads ? q : k;
        const int64_t width = h < c.q_heads ? c.q_heads : c.kv_heads, hh = h < c.q_heads ? h : h - c.q_heads;
        for (int64_t j = 0; j < D; ++j) {
          const int64_t base = (r * width + hh) * D, i = j % half;
          const double scale = std::fabs(in.get(base + i)) + std::fabs(in.get(base + i + half));
          const int64_t idx = (r * R + h) * D + j;
          expect_close(got.get(idx), want.get(idx), scale, dtype, kCudaMath,
                       std::string(dtype_name(dtype)) + " row " + std::to_string(r));
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
#endif
}

TEST(RopeCudaTest, RejectsBadArguments) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  using Code = KernelStatus::Code;
  void* p = nullptr;
  const DevicePtr owner = to_device(Buf::random(DType::kF32, 4096, 77), 0, &p);
  ASSERT_TRUE(owner);
  const float* inv = static_cast<const float*>(p);
  auto forward = [&](const void* q, int64_t seq, int64_t head_dim, DType dtype) {
    return rope_pack_forward_cuda(p, q, p, p, inv, nullptr, 1, seq, 1, 1, head_dim, dtype, nullptr).code();
  };
  auto backward = [&](const float* f, int64_t q_heads) {
    return rope_pack_backward_cuda(p, p, p, p, f, nullptr, 1, 1, q_heads, 1, 2, DType::kF32, nullptr).code();
  };
  EXPECT_EQ(forward(p, 1, 3, DType::kF32), Code::kInvalidArgument);        // odd head_dim
  EXPECT_EQ(forward(p, 0, 2, DType::kF32), Code::kInvalidArgument);        // seq 0
  EXPECT_EQ(forward(nullptr, 1, 2, DType::kF32), Code::kInvalidArgument);  // null q
  EXPECT_EQ(forward(p, 1, 2, DType::kF64), Code::kUnsupported);
  EXPECT_EQ(backward(nullptr, 1), Code::kInvalidArgument);                 // null inv_freq
  EXPECT_EQ(backward(inv, -1), Code::kInvalidArgument);
  CUDA_OK(cudaDeviceSynchronize());
#endif
}

}  // namespace
}  // namespace colossal::kernels::rope
