// Fused attention, causal and full masks: the CPU path against an explicit
// float64 definition (the full score matrix) and against finite differences;
// the CUDA path (bf16/fp16, head_dim 64/96/128) against the CPU path run in
// float64 on the
// same rounded inputs, forward (o, lse) and backward (dq, dk, dv), on fresh
// random data over odd sequence lengths, several batch x head combinations,
// grouped-query heads (kv heads shared by 2, 3, 4 query heads, and multi-query),
// packed [B, T, (H + 2 KV) D] inputs (and padded row strides). Outputs are
// NaN-poisoned before every run; gaps between strided rows must stay untouched.
// Every CUDA case runs the forward through both kernels explicitly (the
// portable one and, on compute capability 9.0, the Hopper one), each feeding
// the one backward.
#include "kernels/attention/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/attention_internal.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/half.h"
#include "tests/util/gpu_test.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::attention {
namespace {

using Code = KernelStatus::Code;

// One problem: H query heads over KV kv heads; qkv packed as [B, T, qkv_stride]
// (q at column 0, k at C = H * D, v at C + KV * D), o / d_o as [B, T, o_stride].
struct Problem {
  int64_t B, H, KV, T, D;
  int64_t pad = 0;  // extra elements at the end of every row (strided layout)
  AttentionMask mask = AttentionMask::kCausal;
  int64_t C() const { return H * D; }
  int64_t CKV() const { return KV * D; }
  int64_t group() const { return H / KV; }
  int64_t k_col() const { return C(); }
  int64_t v_col() const { return C() + CKV(); }
  int64_t qkv_width() const { return C() + 2 * CKV(); }  // columns q, k, v own
  int64_t qkv_stride() const { return qkv_width() + pad; }
  int64_t o_stride() const { return C() + pad; }
  int64_t qkv_elems() const { return B * T * qkv_stride(); }
  int64_t o_elems() const { return B * T * o_stride(); }
  int64_t rows() const { return B * H * T; }
  std::string label(DType dtype) const {
    return std::string(dtype_name(dtype)) + " B=" + std::to_string(B) + " H=" + std::to_string(H) +
           " KV=" + std::to_string(KV) + " T=" + std::to_string(T) + " D=" + std::to_string(D) +
           " pad=" + std::to_string(pad) + (mask == AttentionMask::kFull ? " full" : " causal");
  }
};

// n elements of `dtype` uniform in [lo, hi), as raw bytes.
std::vector<uint8_t> random_bytes(DType dtype, int64_t n, uint32_t seed, float lo, float hi) {
  std::vector<uint8_t> out(n * dtype_size(dtype));
  if (dtype == DType::kF64) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    for (int64_t i = 0; i < n; ++i) reinterpret_cast<double*>(out.data())[i] = dist(rng);
    return out;
  }
  const std::vector<float> f = testing::random_floats(n, seed, lo, hi);
  (void)dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i) reinterpret_cast<T*>(out.data())[i] = from_float<T>(f[i]);
    return KernelStatus();
  });
  return out;
}

std::vector<double> to_doubles(DType dtype, const void* bytes, int64_t n) {
  std::vector<double> out(n);
  (void)dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i) {
      out[i] = static_cast<double>(to_math(static_cast<const T*>(bytes)[i]));
    }
    return KernelStatus();
  });
  return out;
}

// Element (b, t, h, c) of a strided tensor.
int64_t at(const Problem& p, int64_t stride, int64_t b, int64_t t, int64_t h, int64_t c) {
  return (b * p.T + t) * stride + h * p.D + c;
}

// The definition, in float64, with the whole T x T matrix: o = softmax(scale q k^T,
// masked) v with k, v of kv head h / group; lse per row. Query i sees keys
// j <= i (causal) or every j < T (full). q, k, v are views into `qkv`
// (columns 0, k_col, v_col).
void explicit_forward(const Problem& p, const std::vector<double>& qkv, double scale,
                      std::vector<double>& o, std::vector<double>& lse) {
  o.assign(p.o_elems(), 0.0);
  lse.assign(p.rows(), 0.0);
  const int64_t qs = p.qkv_stride();
  std::vector<double> s(p.T * p.T);
  for (int64_t b = 0; b < p.B; ++b) {
    for (int64_t h = 0; h < p.H; ++h) {
      const int64_t kvh = h / p.group();
      for (int64_t i = 0; i < p.T; ++i) {
        const int64_t n = p.mask == AttentionMask::kFull ? p.T : i + 1;  // keys j < n
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < p.D; ++c) {
            dot += qkv[at(p, qs, b, i, h, c)] * qkv[p.k_col() + at(p, qs, b, j, kvh, c)];
          }
          s[i * p.T + j] = scale * dot;
          m = std::max(m, s[i * p.T + j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += std::exp(s[i * p.T + j] - m);
        lse[(b * p.H + h) * p.T + i] = m + std::log(sum);
        for (int64_t c = 0; c < p.D; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j) {
            acc += std::exp(s[i * p.T + j] - m) / sum * qkv[p.v_col() + at(p, qs, b, j, kvh, c)];
          }
          o[at(p, p.o_stride(), b, i, h, c)] = acc;
        }
      }
    }
  }
}

// |got - want| <= rtol * |want| + atol * max(max|want|, scale_floor)
// elementwise over the elements `mask` selects (the tensor's own elements,
// not stride gaps). scale_floor: the magnitude of related outputs, for a
// tensor whose exact value is 0 (dq and dk at T = 1, where P = 1).
struct Tolerance {
  double rtol, atol;
};

void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  const std::vector<bool>& mask, Tolerance tol, const std::string& what,
                  double scale_floor = 0) {
  ASSERT_EQ(got.size(), want.size());
  double scale = scale_floor;
  for (size_t i = 0; i < want.size(); ++i) {
    if (mask[i]) scale = std::max(scale, std::fabs(want[i]));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!mask[i]) continue;
    const double bound = tol.rtol * std::fabs(want[i]) + tol.atol * scale + 1e-30;
    if (!(std::fabs(got[i] - want[i]) <= bound)) {
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << " want " << want[i]
                    << " bound " << bound << " (max |want| " << scale << ")";
      return;
    }
  }
}

// Which elements of a [B, T, stride] tensor belong to columns [col0, col0 + width).
std::vector<bool> columns(const Problem& p, int64_t stride, int64_t col0, int64_t width) {
  std::vector<bool> m(p.B * p.T * stride, false);
  for (int64_t r = 0; r < p.B * p.T; ++r) {
    for (int64_t c = 0; c < width; ++c) m[r * stride + col0 + c] = true;
  }
  return m;
}

std::vector<bool> all_of(size_t n) { return std::vector<bool>(n, true); }

// Byte offset `col` elements into a buffer of `dtype`.
const uint8_t* at_col(const void* base, int64_t col, DType dtype) {
  return static_cast<const uint8_t*>(base) + col * dtype_size(dtype);
}
uint8_t* at_col(void* base, int64_t col, DType dtype) {
  return static_cast<uint8_t*>(base) + col * dtype_size(dtype);
}

// The CPU forward and backward of problem p over packed qkv / dqkv buffers.
KernelStatus forward_cpu(const Problem& p, void* o, float* lse, const void* qkv, DType dtype,
                         float scale) {
  return attention_forward_cpu(o, lse, qkv, at_col(qkv, p.k_col(), dtype),
                               at_col(qkv, p.v_col(), dtype), p.B, p.H, p.KV, p.T, p.D,
                               p.qkv_stride(), p.o_stride(), dtype, scale, p.mask);
}

KernelStatus backward_cpu(const Problem& p, void* dqkv, const void* d_o, const void* qkv,
                          DType dtype, float scale) {
  return attention_backward_cpu(
      dqkv, at_col(dqkv, p.k_col(), dtype), at_col(dqkv, p.v_col(), dtype), d_o, qkv,
      at_col(qkv, p.k_col(), dtype), at_col(qkv, p.v_col(), dtype), nullptr, nullptr, p.B, p.H,
      p.KV, p.T, p.D, p.qkv_stride(), p.o_stride(), dtype, scale, p.mask);
}

// ---------------------------------------------------------------------------
// CPU.

// The CPU forward of every problem under `mask` against explicit_forward.
void check_forward_explicit(AttentionMask mask, uint32_t seed) {
  Problem problems[] = {{1, 1, 1, 1, 3},      {2, 3, 3, 7, 4},   {1, 2, 2, 33, 8, 5},
                        {2, 1, 1, 17, 64},    {2, 8, 2, 13, 4},  {1, 4, 1, 19, 8, 3},
                        {1, 6, 3, 70, 16, 2}, {1, 4, 2, 1, 5},   {1, 2, 1, 11, 96, 8}};
  for (Problem& p : problems) p.mask = mask;
  for (DType dtype : {DType::kF64, DType::kF32, DType::kBF16}) {
    for (const Problem& p : problems) {
      const std::string what = p.label(dtype);
      const auto qkv = random_bytes(dtype, p.qkv_elems(), seed++, -2.0f, 2.0f);
      const size_t es = dtype_size(dtype);
      std::vector<uint8_t> o(p.o_elems() * es);
      std::vector<float> lse(p.rows());
      testing::poison(o.data(), o.size());
      testing::poison(lse.data(), lse.size() * sizeof(float));
      const double scale = 1.0 / std::sqrt(static_cast<double>(p.D));
      ASSERT_TRUE(
          forward_cpu(p, o.data(), lse.data(), qkv.data(), dtype, static_cast<float>(scale)).ok())
          << what;
      std::vector<double> o_ref, lse_ref;
      explicit_forward(p, to_doubles(dtype, qkv.data(), p.qkv_elems()),
                       static_cast<float>(scale), o_ref, lse_ref);
      const Tolerance tol = dtype == DType::kF64   ? Tolerance{1e-12, 1e-14}
                            : dtype == DType::kF32 ? Tolerance{1e-6, 1e-7}
                                                   : Tolerance{4e-3, 1e-6};
      expect_close(to_doubles(dtype, o.data(), p.o_elems()), o_ref,
                   columns(p, p.o_stride(), 0, p.C()), tol, what + " o");
      std::vector<double> lse_d(lse.begin(), lse.end());
      expect_close(lse_d, lse_ref, all_of(lse_d.size()), {1e-6, 1e-7}, what + " lse");
    }
  }
}

TEST(AttentionCpuTest, ForwardMatchesExplicitDefinition) {
  check_forward_explicit(AttentionMask::kCausal, 1);
}

TEST(AttentionCpuTest, FullMaskForwardMatchesExplicitDefinition) {
  check_forward_explicit(AttentionMask::kFull, 50);
}

// The two masks agree where they select the same keys: the last position of
// every sequence sees every key under both, so its o and lse match exactly;
// the causal_* entry points are the kCausal calls, bit for bit.
TEST(AttentionCpuTest, FullMaskLastRowMatchesCausal) {
  const Problem causal{2, 4, 2, 23, 8, 3};
  Problem full = causal;
  full.mask = AttentionMask::kFull;
  const auto qkv = random_bytes(DType::kF64, causal.qkv_elems(), 77, -2.0f, 2.0f);
  std::vector<double> o_c(causal.o_elems()), o_f(causal.o_elems()), o_w(causal.o_elems());
  std::vector<float> lse_c(causal.rows()), lse_f(causal.rows()), lse_w(causal.rows());
  ASSERT_TRUE(forward_cpu(causal, o_c.data(), lse_c.data(), qkv.data(), DType::kF64, 0.4f).ok());
  ASSERT_TRUE(forward_cpu(full, o_f.data(), lse_f.data(), qkv.data(), DType::kF64, 0.4f).ok());
  const double* q = reinterpret_cast<const double*>(qkv.data());
  ASSERT_TRUE(causal_attention_forward_cpu(o_w.data(), lse_w.data(), q, q + causal.k_col(),
                                           q + causal.v_col(), causal.B, causal.H, causal.KV,
                                           causal.T, causal.D, causal.qkv_stride(),
                                           causal.o_stride(), DType::kF64, 0.4f)
                  .ok());
  const std::vector<bool> o_mask = columns(causal, causal.o_stride(), 0, causal.C());
  for (size_t i = 0; i < o_c.size(); ++i) {
    if (o_mask[i]) {
      ASSERT_EQ(o_c[i], o_w[i]) << "causal_* differs from kCausal at " << i;
    }
  }
  EXPECT_EQ(std::memcmp(lse_c.data(), lse_w.data(), lse_c.size() * sizeof(float)), 0);
  bool differs = false;
  for (int64_t b = 0; b < causal.B; ++b) {
    for (int64_t h = 0; h < causal.H; ++h) {
      const int64_t last = causal.T - 1, row = (b * causal.H + h) * causal.T;
      EXPECT_EQ(lse_c[row + last], lse_f[row + last]);
      differs = differs || lse_c[row] != lse_f[row];
      for (int64_t c = 0; c < causal.D; ++c) {
        const int64_t i = at(causal, causal.o_stride(), b, last, h, c);
        EXPECT_EQ(o_c[i], o_f[i]);
      }
    }
  }
  EXPECT_TRUE(differs) << "the first rows must differ between the masks";
}

// d/dx of L = sum(w * o) by central differences in float64, for every element
// of q, k and v, against the backward with d_o = w. With grouped heads, the
// difference through a k or v element moves every query head of its group:
// the sum over the group comes from the definition, not from the kernel.
void check_backward_finite_differences(AttentionMask mask, uint32_t seed) {
  Problem problems[] = {{2, 2, 2, 5, 3, 1}, {1, 4, 2, 5, 3, 1}, {2, 3, 1, 4, 2}};
  for (Problem& p : problems) p.mask = mask;
  for (const Problem& p : problems) {
    SCOPED_TRACE(p.label(DType::kF64));
    const double h = 1e-6;
    const float scale = 0.7f;
    auto qkv_b = random_bytes(DType::kF64, p.qkv_elems(), seed++, -1.5f, 1.5f);
    const auto w_b = random_bytes(DType::kF64, p.o_elems(), seed++, -1.0f, 1.0f);
    double* qkv = reinterpret_cast<double*>(qkv_b.data());
    const double* w = reinterpret_cast<const double*>(w_b.data());
    std::vector<double> o(p.o_elems()), dqkv(p.qkv_elems(), std::nan(""));
    const std::vector<bool> o_mask = columns(p, p.o_stride(), 0, p.C());
    auto loss = [&]() {
      EXPECT_TRUE(forward_cpu(p, o.data(), nullptr, qkv, DType::kF64, scale).ok());
      double l = 0;
      for (int64_t i = 0; i < p.o_elems(); ++i) l += o_mask[i] ? w[i] * o[i] : 0.0;
      return l;
    };
    ASSERT_TRUE(backward_cpu(p, dqkv.data(), w, qkv, DType::kF64, scale).ok());
    int checked = 0;
    for (int64_t i = 0; i < p.qkv_elems(); ++i) {
      if (i % p.qkv_stride() >= p.qkv_width()) {
        EXPECT_TRUE(std::isnan(dqkv[i])) << "stride gap " << i << " was written";
        continue;
      }
      const double saved = qkv[i];
      qkv[i] = saved + h;
      const double up = loss();
      qkv[i] = saved - h;
      const double down = loss();
      qkv[i] = saved;
      const double numeric = (up - down) / (2 * h);
      ASSERT_NEAR(dqkv[i], numeric, 1e-7 + 1e-6 * std::fabs(numeric)) << "element " << i;
      ++checked;
    }
    EXPECT_EQ(checked, p.B * p.T * p.qkv_width());
  }
}

TEST(AttentionCpuTest, BackwardMatchesFiniteDifferences) {
  check_backward_finite_differences(AttentionMask::kCausal, 100);
}

TEST(AttentionCpuTest, FullMaskBackwardMatchesFiniteDifferences) {
  check_backward_finite_differences(AttentionMask::kFull, 150);
}

// Grouped-query attention is multi-head attention with each kv head repeated
// for its group's query heads: the grouped call against the kv_heads == heads
// call on an explicitly repeated [B, T, 3C] buffer. o, lse and dq are the same
// computation (exactly equal); dk, dv of a kv head are the sums of the
// repeated heads' (summed in another order: float64 rounding apart).
TEST(AttentionCpuTest, GroupedMatchesRepeatedKvHeads) {
  const Problem problems[] = {{2, 8, 2, 23, 8, 3},
                              {1, 4, 1, 40, 16},
                              {1, 6, 3, 9, 5},
                              {2, 8, 2, 23, 8, 3, AttentionMask::kFull},
                              {1, 6, 3, 9, 5, 0, AttentionMask::kFull}};
  uint32_t seed = 300;
  for (const Problem& p : problems) {
    SCOPED_TRACE(p.label(DType::kF64));
    const Problem mha{p.B, p.H, p.H, p.T, p.D, 0, p.mask};
    const float scale = 0.3f;
    const auto qkv_b = random_bytes(DType::kF64, p.qkv_elems(), seed++, -2.0f, 2.0f);
    const auto do_b = random_bytes(DType::kF64, p.o_elems(), seed++, -1.0f, 1.0f);
    const double* qkv = reinterpret_cast<const double*>(qkv_b.data());
    // The repeated buffer (no padding) and d_o laid out for it.
    std::vector<double> rep(mha.qkv_elems()), do_rep(mha.o_elems());
    for (int64_t row = 0; row < p.B * p.T; ++row) {
      const double* src = qkv + row * p.qkv_stride();
      double* dst = rep.data() + row * mha.qkv_stride();
      for (int64_t h = 0; h < p.H; ++h) {
        for (int64_t c = 0; c < p.D; ++c) {
          const int64_t kv = (h / p.group()) * p.D + c;
          dst[h * p.D + c] = src[h * p.D + c];
          dst[mha.k_col() + h * p.D + c] = src[p.k_col() + kv];
          dst[mha.v_col() + h * p.D + c] = src[p.v_col() + kv];
          do_rep[row * mha.o_stride() + h * p.D + c] =
              reinterpret_cast<const double*>(do_b.data())[row * p.o_stride() + h * p.D + c];
        }
      }
    }
    std::vector<double> o(p.o_elems(), std::nan("")), o_rep(mha.o_elems(), std::nan(""));
    std::vector<float> lse(p.rows(), NAN), lse_rep(p.rows(), NAN);
    std::vector<double> dqkv(p.qkv_elems(), std::nan("")), dqkv_rep(mha.qkv_elems(), std::nan(""));
    ASSERT_TRUE(forward_cpu(p, o.data(), lse.data(), qkv, DType::kF64, scale).ok());
    ASSERT_TRUE(
        forward_cpu(mha, o_rep.data(), lse_rep.data(), rep.data(), DType::kF64, scale).ok());
    ASSERT_TRUE(backward_cpu(p, dqkv.data(), do_b.data(), qkv, DType::kF64, scale).ok());
    ASSERT_TRUE(
        backward_cpu(mha, dqkv_rep.data(), do_rep.data(), rep.data(), DType::kF64, scale).ok());
    EXPECT_EQ(std::memcmp(lse.data(), lse_rep.data(), lse.size() * sizeof(float)), 0);
    double dkv_scale = 0;
    for (double x : dqkv_rep) dkv_scale = std::max(dkv_scale, std::fabs(x));
    for (int64_t row = 0; row < p.B * p.T; ++row) {
      for (int64_t h = 0; h < p.H; ++h) {
        for (int64_t c = 0; c < p.D; ++c) {
          ASSERT_EQ(o[row * p.o_stride() + h * p.D + c], o_rep[row * mha.o_stride() + h * p.D + c]);
          ASSERT_EQ(dqkv[row * p.qkv_stride() + h * p.D + c],
                    dqkv_rep[row * mha.qkv_stride() + h * p.D + c]);
        }
      }
      for (int64_t g = 0; g < p.KV; ++g) {
        for (int64_t c = 0; c < p.D; ++c) {
          double dk = 0, dv = 0;
          for (int64_t h = g * p.group(); h < (g + 1) * p.group(); ++h) {
            dk += dqkv_rep[row * mha.qkv_stride() + mha.k_col() + h * p.D + c];
            dv += dqkv_rep[row * mha.qkv_stride() + mha.v_col() + h * p.D + c];
          }
          const double* got = dqkv.data() + row * p.qkv_stride() + g * p.D + c;
          ASSERT_NEAR(got[p.k_col()], dk, 1e-13 * dkv_scale) << "dk row " << row;
          ASSERT_NEAR(got[p.v_col()], dv, 1e-13 * dkv_scale) << "dv row " << row;
        }
      }
      for (int64_t c = p.qkv_width(); c < p.qkv_stride(); ++c) {
        ASSERT_TRUE(std::isnan(dqkv[row * p.qkv_stride() + c])) << "stride gap written";
      }
    }
  }
}

TEST(AttentionCpuTest, RejectsBadArguments) {
  std::vector<float> a(64), b(64);
  EXPECT_EQ(causal_attention_forward_cpu(b.data(), nullptr, a.data(), a.data(), a.data(), 1, 1, 1,
                                         4, 2, 1, 2, DType::kF32, 1.0f)
                .code(),
            Code::kInvalidArgument);  // qkv stride < heads * head_dim
  EXPECT_EQ(causal_attention_forward_cpu(a.data(), nullptr, a.data(), a.data(), a.data(), 1, 1, 1,
                                         4, 2, 2, 2, DType::kF32, 1.0f)
                .code(),
            Code::kInvalidArgument);  // o overlaps q
  EXPECT_EQ(causal_attention_forward_cpu(b.data(), nullptr, a.data(), a.data(), a.data(), 1, 1, 1,
                                         4, 2, 2, 2, DType::kI32, 1.0f)
                .code(),
            Code::kUnsupported);
  EXPECT_EQ(causal_attention_forward_cpu(nullptr, nullptr, a.data(), a.data(), a.data(), 1, 1, 1,
                                         4, 2, 2, 2, DType::kF32, 1.0f)
                .code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(causal_attention_forward_cpu(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 1, 1,
                                           4, 2, 2, 2, DType::kF32, 1.0f)
                  .ok());
  EXPECT_EQ(causal_attention_backward_cpu(a.data(), b.data(), b.data(), b.data(), a.data(),
                                          a.data(), a.data(), nullptr, nullptr, 1, 1, 1, 4, 2, 2,
                                          2, DType::kF32, 1.0f)
                .code(),
            Code::kInvalidArgument);  // dq overlaps q
  EXPECT_EQ(attention_forward_cpu(b.data(), nullptr, a.data(), a.data(), a.data(), 1, 1, 1, 4, 2,
                                  2, 2, DType::kF32, 1.0f, static_cast<AttentionMask>(7))
                .code(),
            Code::kInvalidArgument);  // no such mask
  EXPECT_TRUE(attention_forward_cpu(b.data(), nullptr, a.data(), a.data(), a.data(), 1, 1, 1, 4, 2,
                                    2, 2, DType::kF32, 1.0f, AttentionMask::kFull)
                  .ok());
  // heads must be a multiple of kv_heads (and kv_heads >= 1), forward and backward.
  for (int64_t kv : {int64_t{3}, int64_t{0}, int64_t{8}, int64_t{-2}}) {
    EXPECT_EQ(causal_attention_forward_cpu(b.data(), nullptr, a.data(), a.data(), a.data(), 1, 4,
                                           kv, 2, 2, 8, 8, DType::kF32, 1.0f)
                  .code(),
              Code::kInvalidArgument)
        << "kv_heads " << kv;
    std::vector<float> dq(64), dk(64), dv(64);
    EXPECT_EQ(causal_attention_backward_cpu(dq.data(), dk.data(), dv.data(), b.data(), a.data(),
                                            a.data(), a.data(), nullptr, nullptr, 1, 4, kv, 2, 2,
                                            8, 8, DType::kF32, 1.0f)
                  .code(),
              Code::kInvalidArgument)
        << "kv_heads " << kv;
  }
  // k and v span kv_heads heads, not heads: packed [q | k | v] rows (4 query
  // heads, 1 kv head, D = 1: stride 6) of 2 positions with the outputs right
  // after them in the same allocation do not overlap the inputs.
  std::vector<float> buf(2 * 6 + 2 * 6, 0.5f), d_o(2 * 4, 1.0f);
  float* qkv = buf.data();
  float* out = buf.data() + 2 * 6;
  EXPECT_TRUE(causal_attention_forward_cpu(out, nullptr, qkv, qkv + 4, qkv + 5, 1, 4, 1, 2, 1, 6,
                                           4, DType::kF32, 1.0f)
                  .ok());
  EXPECT_TRUE(causal_attention_backward_cpu(out, out + 4, out + 5, d_o.data(), qkv, qkv + 4,
                                            qkv + 5, nullptr, nullptr, 1, 4, 1, 2, 1, 6, 4,
                                            DType::kF32, 1.0f)
                  .ok());
}

// ---------------------------------------------------------------------------
// Varlen layout.

// cu_seqlens of sequences of `lens` positions.
std::vector<int32_t> cu_seqlens_of(const std::vector<int32_t>& lens) {
  std::vector<int32_t> cu(lens.size() + 1, 0);
  for (size_t i = 0; i < lens.size(); ++i) cu[i + 1] = cu[i] + lens[i];
  return cu;
}

// The varlen problem over `cu`: its rows are those of the flat Problem
// {1, H, KV, total, D, pad, mask} (qkv_stride, o_stride, elems, columns), and
// its lse [H, total] has that problem's rows() floats.
Problem flat_problem(const std::vector<int32_t>& cu, int64_t H, int64_t KV, int64_t D,
                     int64_t pad, AttentionMask mask) {
  return {1, H, KV, cu.back(), D, pad, mask};
}

std::string varlen_label(const Problem& flat, const std::vector<int32_t>& cu, DType dtype) {
  std::string lens;
  for (size_t i = 0; i + 1 < cu.size(); ++i) lens += (i ? "," : "") + std::to_string(cu[i + 1] - cu[i]);
  return flat.label(dtype) + " varlen {" + lens + "}";
}

KernelStatus varlen_forward_cpu(const Problem& f, const std::vector<int32_t>& cu, void* o,
                                float* lse, const void* qkv, DType dtype, float scale) {
  return attention_varlen_forward_cpu(o, lse, qkv, at_col(qkv, f.k_col(), dtype),
                                      at_col(qkv, f.v_col(), dtype), cu.data(),
                                      static_cast<int64_t>(cu.size()) - 1, f.T, f.H, f.KV, f.D,
                                      f.qkv_stride(), f.o_stride(), dtype, scale, f.mask);
}

KernelStatus varlen_backward_cpu(const Problem& f, const std::vector<int32_t>& cu, void* dqkv,
                                 const void* d_o, const void* qkv, DType dtype, float scale) {
  return attention_varlen_backward_cpu(
      dqkv, at_col(dqkv, f.k_col(), dtype), at_col(dqkv, f.v_col(), dtype), d_o, qkv,
      at_col(qkv, f.k_col(), dtype), at_col(qkv, f.v_col(), dtype), nullptr, nullptr, cu.data(),
      static_cast<int64_t>(cu.size()) - 1, f.T, f.H, f.KV, f.D, f.qkv_stride(), f.o_stride(),
      dtype, scale, f.mask);
}

// The varlen CPU calls are the batch CPU calls on each sequence alone (a batch
// of one at the sequence's rows): o, lse (moved from [1, H, L] to the
// sequence's columns of [H, total]), dq, dk and dv equal to the bit, stride
// gaps untouched (both sides start from the same poison and are compared
// whole). Empty sequences first, last and between; multi-head, grouped and
// multi-query heads; padded rows.
TEST(AttentionCpuTest, VarlenMatchesEachSequenceAlone) {
  const std::vector<std::vector<int32_t>> lengths = {
      {1, 77, 0, 200, 128}, {5, 70, 33}, {0, 0, 17, 0}, {64}, {0}, {2, 1, 3}};
  struct Heads {
    int64_t H, KV, D, pad;
  };
  const Heads heads[] = {{2, 2, 8, 0}, {4, 2, 5, 3}, {3, 1, 16, 0}};
  uint32_t seed = 400;
  for (DType dtype : {DType::kF64, DType::kBF16}) {
    const size_t es = dtype_size(dtype);
    for (AttentionMask mask : {AttentionMask::kCausal, AttentionMask::kFull}) {
      for (const Heads& hd : heads) {
        if (dtype != DType::kF64 && hd.KV == hd.H) continue;  // 16-bit: grouped heads only
        for (const std::vector<int32_t>& lens : lengths) {
          const std::vector<int32_t> cu = cu_seqlens_of(lens);
          const Problem f = flat_problem(cu, hd.H, hd.KV, hd.D, hd.pad, mask);
          SCOPED_TRACE(varlen_label(f, cu, dtype));
          const float scale = 0.35f;
          const auto qkv = random_bytes(dtype, f.qkv_elems(), seed++, -2.0f, 2.0f);
          const auto d_o = random_bytes(dtype, f.o_elems(), seed++, -1.0f, 1.0f);
          std::vector<uint8_t> o(f.o_elems() * es), o_seq(o.size());
          std::vector<uint8_t> dqkv(f.qkv_elems() * es), dqkv_seq(dqkv.size());
          std::vector<float> lse(f.rows()), lse_seq(f.rows());
          for (auto* b : {&o, &o_seq, &dqkv, &dqkv_seq}) testing::poison(b->data(), b->size());
          testing::poison(lse.data(), lse.size() * sizeof(float));
          testing::poison(lse_seq.data(), lse_seq.size() * sizeof(float));
          ASSERT_TRUE(varlen_forward_cpu(f, cu, o.data(), lse.data(), qkv.data(), dtype, scale).ok());
          ASSERT_TRUE(varlen_backward_cpu(f, cu, dqkv.data(), d_o.data(), qkv.data(), dtype, scale).ok());
          for (size_t i = 0; i + 1 < cu.size(); ++i) {
            const int64_t r = cu[i], L = cu[i + 1] - cu[i];
            if (L == 0) continue;
            const Problem one{1, f.H, f.KV, L, f.D, f.pad, mask};
            const size_t qoff = r * f.qkv_stride() * es, ooff = r * f.o_stride() * es;
            std::vector<float> l(one.rows());
            ASSERT_TRUE(forward_cpu(one, o_seq.data() + ooff, l.data(), qkv.data() + qoff, dtype, scale).ok());
            for (int64_t h = 0; h < f.H; ++h) {
              for (int64_t t = 0; t < L; ++t) lse_seq[h * f.T + r + t] = l[h * L + t];
            }
            ASSERT_TRUE(backward_cpu(one, dqkv_seq.data() + qoff, d_o.data() + ooff,
                                     qkv.data() + qoff, dtype, scale)
                            .ok());
          }
          EXPECT_EQ(o, o_seq) << "o";
          EXPECT_TRUE(lse.empty() ||  // (empty vectors may be null: memcmp must not see them)
                      std::memcmp(lse.data(), lse_seq.data(), lse.size() * sizeof(float)) == 0)
              << "lse";
          EXPECT_EQ(dqkv, dqkv_seq) << "dq, dk, dv";
        }
      }
    }
  }
}

// Equal lengths: the varlen calls are the batch calls (lse transposed from
// [B, H, T] to [H, B * T]).
TEST(AttentionCpuTest, VarlenOfEqualLengthsIsTheBatch) {
  const Problem p{3, 4, 2, 21, 8, 2, AttentionMask::kCausal};
  for (AttentionMask mask : {AttentionMask::kCausal, AttentionMask::kFull}) {
    Problem b = p;
    b.mask = mask;
    const std::vector<int32_t> cu = cu_seqlens_of(std::vector<int32_t>(b.B, b.T));
    const Problem f = flat_problem(cu, b.H, b.KV, b.D, b.pad, mask);
    const auto qkv = random_bytes(DType::kF64, b.qkv_elems(), 500, -2.0f, 2.0f);
    const auto d_o = random_bytes(DType::kF64, b.o_elems(), 501, -1.0f, 1.0f);
    std::vector<double> o(b.o_elems(), 0.0), o_v(b.o_elems(), 0.0);
    std::vector<double> g(b.qkv_elems(), 0.0), g_v(b.qkv_elems(), 0.0);
    std::vector<float> lse(b.rows()), lse_v(b.rows());
    ASSERT_TRUE(forward_cpu(b, o.data(), lse.data(), qkv.data(), DType::kF64, 0.5f).ok());
    ASSERT_TRUE(backward_cpu(b, g.data(), d_o.data(), qkv.data(), DType::kF64, 0.5f).ok());
    ASSERT_TRUE(varlen_forward_cpu(f, cu, o_v.data(), lse_v.data(), qkv.data(), DType::kF64, 0.5f).ok());
    ASSERT_TRUE(varlen_backward_cpu(f, cu, g_v.data(), d_o.data(), qkv.data(), DType::kF64, 0.5f).ok());
    EXPECT_EQ(o, o_v);
    EXPECT_EQ(g, g_v);
    for (int64_t s = 0; s < b.B; ++s) {
      for (int64_t h = 0; h < b.H; ++h) {
        for (int64_t t = 0; t < b.T; ++t) {
          ASSERT_EQ(lse[(s * b.H + h) * b.T + t], lse_v[h * f.T + s * b.T + t]);
        }
      }
    }
  }
}

// cu_seqlens is checked in full on the CPU, forward and backward alike, with
// a message naming what is wrong; sequences may be empty, and so may all of them.
TEST(AttentionCpuTest, VarlenRejectsBadCuSeqlens) {
  std::vector<float> qkv(64, 0.5f), o(64), d_o(64, 1.0f), dqkv(64);
  std::vector<float> lse(64);
  auto fwd = [&](const int32_t* cu, int64_t num_seqs, int64_t total) {
    return attention_varlen_forward_cpu(o.data(), lse.data(), qkv.data(), qkv.data() + 1,
                                        qkv.data() + 2, cu, num_seqs, total, 1, 1, 1, 3, 1,
                                        DType::kF32, 1.0f, AttentionMask::kCausal);
  };
  auto bwd = [&](const int32_t* cu, int64_t num_seqs, int64_t total) {
    return attention_varlen_backward_cpu(dqkv.data(), dqkv.data() + 1, dqkv.data() + 2,
                                         d_o.data(), qkv.data(), qkv.data() + 1, qkv.data() + 2,
                                         nullptr, nullptr, cu, num_seqs, total, 1, 1, 1, 3, 1,
                                         DType::kF32, 1.0f, AttentionMask::kFull);
  };
  struct Bad {
    std::vector<int32_t> cu;
    int64_t num_seqs, total;
    const char* message;
  };
  const Bad bad[] = {{{1, 3, 5}, 2, 5, "cu_seqlens[0] is not 0"},
                     {{0, 3, 2, 5}, 3, 5, "cu_seqlens decreases"},
                     {{0, 3, 4}, 2, 5, "cu_seqlens[num_seqs] is not total_tokens"},
                     {{0, 3, 6}, 2, 5, "cu_seqlens[num_seqs] is not total_tokens"},
                     {{0}, 0, 5, "total_tokens > 0 but no sequence"},
                     {{0, 5}, -1, 5, "negative size"},
                     {{0, 5}, 1, -5, "negative size"}};
  for (const Bad& b : bad) {
    for (const KernelStatus& s : {fwd(b.cu.data(), b.num_seqs, b.total),
                                  bwd(b.cu.data(), b.num_seqs, b.total)}) {
      EXPECT_EQ(s.code(), Code::kInvalidArgument) << b.message;
      EXPECT_NE(std::string(s.message()).find(b.message), std::string::npos)
          << "got \"" << s.message() << "\", want \"" << b.message << "\"";
    }
  }
  for (const KernelStatus& s : {fwd(nullptr, 1, 5), bwd(nullptr, 1, 5)}) {
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(std::string(s.message()).find("null cu_seqlens"), std::string::npos) << s.message();
  }
  const std::vector<int32_t> good = {0, 2, 2, 5}, none = {0, 0, 0};
  EXPECT_TRUE(fwd(good.data(), 3, 5).ok());
  EXPECT_TRUE(bwd(good.data(), 3, 5).ok());
  EXPECT_TRUE(fwd(none.data(), 2, 0).ok());
  EXPECT_TRUE(bwd(none.data(), 2, 0).ok());
  // o overlapping q is refused as in the batch layout.
  EXPECT_EQ(attention_varlen_forward_cpu(qkv.data(), nullptr, qkv.data(), qkv.data() + 1,
                                         qkv.data() + 2, good.data(), 3, 5, 1, 1, 1, 3, 1,
                                         DType::kF32, 1.0f, AttentionMask::kCausal)
                .code(),
            Code::kInvalidArgument);
}

// ---------------------------------------------------------------------------
// CUDA.

#if COLOSSAL_WITH_CUDA
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// Tolerances of the CUDA path against the exact result on the same rounded
// inputs (see expect_close). P and dS are rounded to the input type before
// their tensor-core products and every output is rounded once, so errors are a
// few ulps of the input type relative to the output's own scale: bfloat16 has
// 8 significant bits (ulp/2 = 2^-9 = 2e-3), float16 11 (2.4e-4). With grouped
// heads dk and dv sum group-many such terms in fp32: the error and the scale
// (max |want|) grow alike, so the relative bound is the same.
Tolerance cuda_tolerance(DType dtype, bool gradient) {
  if (dtype == DType::kBF16) return gradient ? Tolerance{2e-2, 2e-2} : Tolerance{1e-2, 1e-2};
  return gradient ? Tolerance{4e-3, 4e-3} : Tolerance{2e-3, 2e-3};
}

struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (cudaMalloc(&p, std::max<size_t>(n, 16)) != cudaSuccess) p = nullptr;
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  uint8_t* u8() const { return static_cast<uint8_t*>(p); }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> h(bytes);
    EXPECT_EQ(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

// 0xFF bytes: NaN as bfloat16, float16 and float32.
void poison_nan(const DeviceBuffer& b) { ASSERT_EQ(cudaMemset(b.p, 0xFF, b.bytes), cudaSuccess); }

bool all_nan_outside(DType dtype, const std::vector<uint8_t>& bytes, const std::vector<bool>& mask) {
  const std::vector<double> v = to_doubles(dtype, bytes.data(), mask.size());
  for (size_t i = 0; i < mask.size(); ++i) {
    if (!mask[i] && !std::isnan(v[i])) return false;
  }
  return true;
}

// The elements of a packed qkv-layout tensor that q, k and v (or dq, dk, dv)
// own: every column but the row padding.
std::vector<bool> qkv_columns(const Problem& p) {
  return columns(p, p.qkv_stride(), 0, p.qkv_width());
}

using internal::BackwardPath;
using internal::ForwardPath;

// The CUDA forward (through `path`) and backward of problem p over packed
// device buffers.
KernelStatus forward_cuda(const Problem& p, const DeviceBuffer& o, const DeviceBuffer& lse,
                          const DeviceBuffer& qkv, DType dtype, float scale, cudaStream_t stream,
                          ForwardPath path) {
  return internal::attention_forward_cuda_path(
      path, p.mask, o.p, static_cast<float*>(lse.p), qkv.p, at_col(qkv.p, p.k_col(), dtype),
      at_col(qkv.p, p.v_col(), dtype), p.B, p.H, p.KV, p.T, p.D, p.qkv_stride(), p.o_stride(),
      dtype, scale, stream);
}

KernelStatus backward_cuda(const Problem& p, const DeviceBuffer& dqkv, const DeviceBuffer& d_o,
                           const DeviceBuffer& qkv, const DeviceBuffer& o, const DeviceBuffer& lse,
                           const DeviceBuffer& ws, DType dtype, float scale, cudaStream_t stream,
                           BackwardPath path) {
  return internal::attention_backward_cuda_path(
      path, p.mask, dqkv.p, at_col(dqkv.p, p.k_col(), dtype), at_col(dqkv.p, p.v_col(), dtype),
      d_o.p, qkv.p,
      at_col(qkv.p, p.k_col(), dtype), at_col(qkv.p, p.v_col(), dtype), o.p,
      static_cast<const float*>(lse.p), ws.p, p.B, p.H, p.KV, p.T, p.D, p.qkv_stride(),
      p.o_stride(), dtype, scale, stream);
}

// The device buffers of one forward + backward (batch or varlen layout).
struct RunBuffers {
  DeviceBuffer qkv, d_o, o, dqkv, lse, ws;
  RunBuffers(const Problem& p, DType dtype, size_t ws_bytes)
      : qkv(p.qkv_elems() * dtype_size(dtype)),
        d_o(p.o_elems() * dtype_size(dtype)),
        o(p.o_elems() * dtype_size(dtype)),
        dqkv(p.qkv_elems() * dtype_size(dtype)),
        lse(p.rows() * sizeof(float)),
        ws(ws_bytes) {}
};

// Uploads qkv_h and do_h and NaN-poisons every output and the workspace.
void upload_and_poison(const RunBuffers& r, const std::vector<uint8_t>& qkv_h,
                       const std::vector<uint8_t>& do_h) {
  ASSERT_TRUE(r.qkv.p && r.d_o.p && r.o.p && r.dqkv.p && r.lse.p && r.ws.p) << "cudaMalloc failed";
  ASSERT_EQ(qkv_h.size(), r.qkv.bytes);
  ASSERT_EQ(do_h.size(), r.d_o.bytes);
  CUDA_OK(cudaMemcpy(r.qkv.p, qkv_h.data(), qkv_h.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(r.d_o.p, do_h.data(), do_h.size(), cudaMemcpyHostToDevice));
  for (const DeviceBuffer* b : {&r.o, &r.lse, &r.dqkv, &r.ws}) poison_nan(*b);
}

// ... of one batch-layout problem, with a workspace enough for every path.
struct CudaRun : RunBuffers {
  CudaRun(const Problem& p, DType dtype)
      : RunBuffers(p, dtype, internal::fused_dq_workspace_bytes(p.B, p.H, p.T, p.D)) {}
};

// upload_and_poison, then the forward (through `path`) and the backward
// (through `bwd`) on `stream`, waiting for them.
void run_cuda(const Problem& p, DType dtype, const CudaRun& r, const std::vector<uint8_t>& qkv_h,
              const std::vector<uint8_t>& do_h, float scale, cudaStream_t stream,
              ForwardPath path, BackwardPath bwd) {
  upload_and_poison(r, qkv_h, do_h);
  if (::testing::Test::HasFatalFailure()) return;
  KernelStatus s = forward_cuda(p, r.o, r.lse, r.qkv, dtype, scale, stream, path);
  ASSERT_TRUE(s.ok()) << s.message();
  s = backward_cuda(p, r.dqkv, r.d_o, r.qkv, r.o, r.lse, r.ws, dtype, scale, stream, bwd);
  ASSERT_TRUE(s.ok()) << s.message();
  CUDA_OK(cudaStreamSynchronize(stream));
}

// With grouped heads: the same call on the kv heads repeated for every query
// head (kv_heads == heads) runs the forward and dQ kernels on the same values
// in the same order, so o, lse and dq must match it to the bit.
void check_cuda_against_repeated(DType dtype, const Problem& p, const std::vector<uint8_t>& qkv_h,
                                 const std::vector<uint8_t>& do_h,
                                 const std::vector<uint8_t>& o_got,
                                 const std::vector<uint8_t>& lse_got,
                                 const std::vector<uint8_t>& dqkv_got, float scale,
                                 cudaStream_t stream, ForwardPath path, BackwardPath bwd) {
  const Problem mha{p.B, p.H, p.H, p.T, p.D, p.pad, p.mask};
  const size_t es = dtype_size(dtype);
  std::vector<uint8_t> rep_h(mha.qkv_elems() * es, 0);
  for (int64_t row = 0; row < p.B * p.T; ++row) {
    const uint8_t* src = qkv_h.data() + row * p.qkv_stride() * es;
    uint8_t* dst = rep_h.data() + row * mha.qkv_stride() * es;
    std::memcpy(dst, src, p.C() * es);
    for (int64_t h = 0; h < p.H; ++h) {
      const int64_t kv = (h / p.group()) * p.D;
      std::memcpy(dst + (mha.k_col() + h * p.D) * es, src + (p.k_col() + kv) * es, p.D * es);
      std::memcpy(dst + (mha.v_col() + h * p.D) * es, src + (p.v_col() + kv) * es, p.D * es);
    }
  }
  const CudaRun r(mha, dtype);
  run_cuda(mha, dtype, r, rep_h, do_h, scale, stream, path, bwd);
  if (::testing::Test::HasFatalFailure()) return;
  const std::vector<uint8_t> o_rep = r.o.download(), lse_rep = r.lse.download();
  const std::vector<uint8_t> dqkv_rep = r.dqkv.download();
  const std::vector<bool> o_mask = columns(p, p.o_stride(), 0, p.C());
  for (int64_t i = 0; i < p.o_elems(); ++i) {
    if (o_mask[i] && std::memcmp(&o_got[i * es], &o_rep[i * es], es) != 0) {
      ADD_FAILURE() << p.label(dtype) << ": o differs from repeated kv heads at " << i;
      break;
    }
  }
  EXPECT_EQ(lse_got, lse_rep) << p.label(dtype) << ": lse differs from repeated kv heads";
  // The fused dQ adds the key tiles' parts in arrival order: its dq's last
  // bits may differ (it met the float64 reference already).
  if (bwd == BackwardPath::kHopperFusedDq) return;
  for (int64_t row = 0; row < p.B * p.T; ++row) {
    if (std::memcmp(&dqkv_got[row * p.qkv_stride() * es], &dqkv_rep[row * mha.qkv_stride() * es],
                    p.C() * es) != 0) {
      ADD_FAILURE() << p.label(dtype) << ": dq differs from repeated kv heads in row " << row;
      break;
    }
  }
}

// o and lse of a CUDA forward (bytes) against the float64 reference at the
// CUDA tolerances, and the stride gaps of o still NaN. p: the problem whose
// strides and columns the buffers have (the varlen layout: its flat problem).
void expect_forward_matches(DType dtype, const Problem& p, const std::vector<uint8_t>& o_got,
                            const std::vector<uint8_t>& lse_got, const std::vector<double>& o_ref,
                            const std::vector<float>& lse_ref, const std::string& what) {
  const std::vector<bool> o_mask = columns(p, p.o_stride(), 0, p.C());
  expect_close(to_doubles(dtype, o_got.data(), p.o_elems()), o_ref, o_mask,
               cuda_tolerance(dtype, false), what + " o");
  EXPECT_TRUE(all_nan_outside(dtype, o_got, o_mask)) << what << ": o written in a stride gap";
  std::vector<double> lse_d(lse_ref.begin(), lse_ref.end());
  expect_close(to_doubles(DType::kF32, lse_got.data(), p.rows()), lse_d, all_of(p.rows()),
               {1e-4, 1e-4}, what + " lse");
}

// expect_forward_matches, then dq, dk, dv (bytes) against the float64
// reference and the stride gaps of dqkv still NaN. Returns the gradients' scale, max |want| over dq, dk and dv:
// dq and dk are measured against it, since at T = 1 they are exactly 0
// (P = 1), and what the kernel returns there is the rounding of
// D = rowsum(dO * O) with O rounded to the 16-bit output.
double expect_cuda_matches(DType dtype, const Problem& p, const std::vector<uint8_t>& o_got,
                           const std::vector<uint8_t>& lse_got,
                           const std::vector<uint8_t>& dqkv_got, const std::vector<double>& o_ref,
                           const std::vector<float>& lse_ref, const std::vector<double>& dqkv_ref,
                           const std::string& what) {
  expect_forward_matches(dtype, p, o_got, lse_got, o_ref, lse_ref, what);
  const std::vector<double> dqkv_d = to_doubles(dtype, dqkv_got.data(), p.qkv_elems());
  const std::vector<bool> dqkv_mask = qkv_columns(p);
  double grad_scale = 0;
  for (int64_t i = 0; i < p.qkv_elems(); ++i) {
    if (dqkv_mask[i]) grad_scale = std::max(grad_scale, std::fabs(dqkv_ref[i]));
  }
  const char* names[3] = {" dq", " dk", " dv"};
  const int64_t col0[3] = {0, p.k_col(), p.v_col()}, width[3] = {p.C(), p.CKV(), p.CKV()};
  for (int part = 0; part < 3; ++part) {
    expect_close(dqkv_d, dqkv_ref, columns(p, p.qkv_stride(), col0[part], width[part]),
                 cuda_tolerance(dtype, true), what + names[part], grad_scale);
  }
  EXPECT_TRUE(all_nan_outside(dtype, dqkv_got, dqkv_mask)) << what << ": dqkv gap written";
  return grad_scale;
}

void check_cuda(DType dtype, const Problem& p, uint32_t seed, ForwardPath path,
                BackwardPath bwd) {
  SCOPED_TRACE(p.label(dtype));
  const std::string what = p.label(dtype);
  const size_t es = dtype_size(dtype);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.D)));
  const auto qkv_h = random_bytes(dtype, p.qkv_elems(), seed, -2.0f, 2.0f);
  const auto do_h = random_bytes(dtype, p.o_elems(), seed + 1, -1.0f, 1.0f);

  // Reference: the CPU path in float64 on the same (rounded) values.
  const std::vector<double> qkv_d = to_doubles(dtype, qkv_h.data(), p.qkv_elems());
  const std::vector<double> do_d = to_doubles(dtype, do_h.data(), p.o_elems());
  std::vector<double> o_ref(p.o_elems(), 0.0), dqkv_ref(p.qkv_elems(), 0.0);
  std::vector<float> lse_ref(p.rows());
  ASSERT_TRUE(
      forward_cpu(p, o_ref.data(), lse_ref.data(), qkv_d.data(), DType::kF64, scale).ok());
  ASSERT_TRUE(
      backward_cpu(p, dqkv_ref.data(), do_d.data(), qkv_d.data(), DType::kF64, scale).ok());

  const CudaRun r(p, dtype);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  run_cuda(p, dtype, r, qkv_h, do_h, scale, stream, path, bwd);
  if (::testing::Test::HasFatalFailure()) return;

  const std::vector<uint8_t> o_got = r.o.download(), dqkv_got = r.dqkv.download();
  const std::vector<uint8_t> lse_got = r.lse.download();
  const std::vector<bool> dqkv_mask = qkv_columns(p);
  const double grad_scale =
      expect_cuda_matches(dtype, p, o_got, lse_got, dqkv_got, o_ref, lse_ref, dqkv_ref, what);

  // Gradients are overwritten, never accumulated, and deterministic: a second
  // backward into buffers full of 1.0 gives the same bytes (the fused dQ's
  // dq: the same values within the tolerance, its adds' order may differ).
  const bool dq_exact = bwd != BackwardPath::kHopperFusedDq;
  const std::vector<bool> dq_mask = columns(p, p.qkv_stride(), 0, p.C());
  std::vector<uint8_t> ones(r.dqkv.bytes);
  (void)dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    for (size_t i = 0; i < ones.size() / es; ++i) {
      reinterpret_cast<T*>(ones.data())[i] = from_float<T>(1.0f);
    }
    return KernelStatus();
  });
  CUDA_OK(cudaMemcpy(r.dqkv.p, ones.data(), ones.size(), cudaMemcpyHostToDevice));
  const KernelStatus s =
      backward_cuda(p, r.dqkv, r.d_o, r.qkv, r.o, r.lse, r.ws, dtype, scale, stream, bwd);
  ASSERT_TRUE(s.ok()) << s.message();
  CUDA_OK(cudaStreamSynchronize(stream));
  const std::vector<uint8_t> again = r.dqkv.download();
  if (!dq_exact) {
    expect_close(to_doubles(dtype, again.data(), p.qkv_elems()), dqkv_ref, dq_mask,
                 cuda_tolerance(dtype, true), what + " dq (second backward)", grad_scale);
  }
  for (int64_t i = 0; i < p.qkv_elems(); ++i) {
    if (!dqkv_mask[i] || (!dq_exact && dq_mask[i])) continue;
    if (std::memcmp(again.data() + i * es, dqkv_got.data() + i * es, es) != 0) {
      ADD_FAILURE() << what << ": second backward differs at element " << i;
      break;
    }
  }
  if (p.KV != p.H) {
    check_cuda_against_repeated(dtype, p, qkv_h, do_h, o_got, lse_got, dqkv_got, scale, stream,
                                path, bwd);
  }
  CUDA_OK(cudaStreamDestroy(stream));
}
#endif

// The kernels a CUDA case runs: each case below runs once per choice,
// explicitly, and skips the Hopper kernels where the device is not compute
// capability 9.0.
//   kPortable        portable forward, portable backward
//   kHopper          Hopper forward, Hopper backward
//   kHopperBackward  portable forward (its lse), Hopper backward
//   kHopperFusedDq   Hopper forward, Hopper backward with dQ fused into dK/dV
// (The Hopper forward feeding the portable backward: HopperForwardDrivesBackwardLikePortable.)
enum class Kernel { kPortable, kHopper, kHopperBackward, kHopperFusedDq };

std::string kernel_name(const ::testing::TestParamInfo<Kernel>& info) {
  switch (info.param) {
    case Kernel::kHopper:
      return "Hopper";
    case Kernel::kHopperBackward:
      return "HopperBackward";
    case Kernel::kHopperFusedDq:
      return "HopperFusedDq";
    default:
      return "Portable";
  }
}

// Whether this build and device run the Hopper forward.
bool hopper_available() {
#if COLOSSAL_WITH_CUDA
  return internal::hopper_device();
#else
  return false;
#endif
}

#define COLOSSAL_REQUIRE_KERNEL(kernel)                                                     \
  do {                                                                                      \
    COLOSSAL_REQUIRE_GPU();                                                                 \
    if ((kernel) != Kernel::kPortable && !hopper_available()) {                             \
      GTEST_SKIP() << "the Hopper kernels need a compute capability 9.0 device (H100/H200)"; \
    }                                                                                       \
  } while (0)

#if COLOSSAL_WITH_CUDA
ForwardPath path_of(Kernel kernel) {
  return kernel == Kernel::kHopper || kernel == Kernel::kHopperFusedDq ? ForwardPath::kHopper
                                                                       : ForwardPath::kPortable;
}
BackwardPath backward_of(Kernel kernel) {
  switch (kernel) {
    case Kernel::kPortable:
      return BackwardPath::kPortable;
    case Kernel::kHopperFusedDq:
      return BackwardPath::kHopperFusedDq;
    default:
      return BackwardPath::kHopper;
  }
}

// check_cuda for every problem in both 16-bit dtypes, fresh data for each.
template <size_t N>
void check_cuda_all(const Problem (&problems)[N], uint32_t seed, Kernel kernel) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const Problem& p : problems) {
      check_cuda(dtype, p, seed, path_of(kernel), backward_of(kernel));
      seed += 2;
    }
  }
}

// The forward alone (o and lse) against the float64 CPU path on the same
// rounded inputs, outputs NaN-poisoned first; stride gaps of o stay NaN.
void check_forward(DType dtype, const Problem& p, uint32_t seed, Kernel kernel) {
  SCOPED_TRACE(p.label(dtype));
  const std::string what = p.label(dtype);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.D)));
  const auto qkv_h = random_bytes(dtype, p.qkv_elems(), seed, -2.0f, 2.0f);
  const std::vector<double> qkv_d = to_doubles(dtype, qkv_h.data(), p.qkv_elems());
  std::vector<double> o_ref(p.o_elems(), 0.0);
  std::vector<float> lse_ref(p.rows());
  ASSERT_TRUE(
      forward_cpu(p, o_ref.data(), lse_ref.data(), qkv_d.data(), DType::kF64, scale).ok());

  DeviceBuffer qkv(p.qkv_elems() * dtype_size(dtype)), o(p.o_elems() * dtype_size(dtype)),
      lse(p.rows() * sizeof(float));
  ASSERT_TRUE(qkv.p && o.p && lse.p) << "cudaMalloc failed";
  CUDA_OK(cudaMemcpy(qkv.p, qkv_h.data(), qkv_h.size(), cudaMemcpyHostToDevice));
  poison_nan(o);
  poison_nan(lse);
  const KernelStatus s = forward_cuda(p, o, lse, qkv, dtype, scale, nullptr, path_of(kernel));
  ASSERT_TRUE(s.ok()) << s.message();
  CUDA_OK(cudaDeviceSynchronize());

  const std::vector<uint8_t> o_got = o.download(), lse_got = lse.download();
  expect_forward_matches(dtype, p, o_got, lse_got, o_ref, lse_ref, what);
}

// check_forward for every problem in both 16-bit dtypes, seeds from `seed` on.
template <size_t N>
void check_forward_all(const Problem (&problems)[N], uint32_t& seed, Kernel kernel) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const Problem& p : problems) check_forward(dtype, p, seed++, kernel);
  }
}
#endif

class AttentionCudaKernelTest : public ::testing::TestWithParam<Kernel> {};

TEST_P(AttentionCudaKernelTest, HeadDim64MatchesFloat64Reference) {
  COLOSSAL_REQUIRE_KERNEL(GetParam());
#if COLOSSAL_WITH_CUDA
  const Problem problems[] = {{1, 1, 1, 1, 64},    {2, 3, 3, 17, 64},    {1, 2, 2, 129, 64},
                              {1, 1, 1, 1000, 64}, {3, 2, 2, 64, 64},    {2, 2, 2, 200, 64, 8},
                              {1, 12, 12, 128, 64}};
  check_cuda_all(problems, 1000, GetParam());
#endif
}

TEST_P(AttentionCudaKernelTest, HeadDim128MatchesFloat64Reference) {
  COLOSSAL_REQUIRE_KERNEL(GetParam());
#if COLOSSAL_WITH_CUDA
  const Problem problems[] = {{1, 1, 1, 1, 128}, {2, 2, 2, 33, 128}, {1, 1, 1, 300, 128, 8},
                              {1, 2, 2, 129, 128}};
  check_cuda_all(problems, 2000, GetParam());
#endif
}

// Grouped-query heads (Llama): kv heads shared by 2, 3, 4 query heads and one
// shared by all (multi-query), odd lengths, several key blocks so dK/dV's
// pipeline crosses from one query head of the group to the next.
TEST_P(AttentionCudaKernelTest, GroupedQueryHeadDim64MatchesFloat64Reference) {
  COLOSSAL_REQUIRE_KERNEL(GetParam());
#if COLOSSAL_WITH_CUDA
  const Problem problems[] = {{1, 8, 2, 129, 64}, {2, 4, 1, 200, 64, 8}, {1, 6, 2, 77, 64},
                              {1, 4, 2, 1, 64},   {1, 32, 8, 257, 64}};
  check_cuda_all(problems, 3000, GetParam());
#endif
}

TEST_P(AttentionCudaKernelTest, GroupedQueryHeadDim128MatchesFloat64Reference) {
  COLOSSAL_REQUIRE_KERNEL(GetParam());
#if COLOSSAL_WITH_CUDA
  const Problem problems[] = {{1, 8, 2, 100, 128}, {1, 4, 1, 300, 128, 8}, {2, 6, 3, 65, 128},
                              {1, 32, 8, 130, 128}};
  check_cuda_all(problems, 4000, GetParam());
#endif
}

// The forward alone over the shapes the Hopper kernel's tiles (128 queries x
// 128 keys) make interesting: one row (T = 1), tails inside the first tile
// (77), across tiles (200, 1000), exact multiples of the tile (256, 384);
// multi-head, grouped 8/2 and 32/8, multi-query; padded row strides; more
// tiles (192) than an H100 or H200 has SMs, so the persistent Hopper CTAs
// take several each.
TEST_P(AttentionCudaKernelTest, ForwardMatchesFloat64Reference) {
  COLOSSAL_REQUIRE_KERNEL(GetParam());
  if (GetParam() == Kernel::kHopperBackward || GetParam() == Kernel::kHopperFusedDq) {
    GTEST_SKIP() << "forward only: the Portable or Hopper case";
  }
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 5000;
  for (int64_t D : {int64_t{64}, int64_t{128}}) {
    const Problem problems[] = {{2, 2, 2, 1, D},     {1, 2, 2, 77, D, 8},   {2, 8, 2, 200, D},
                                {1, 2, 2, 1000, D},  {1, 8, 2, 256, D},     {1, 32, 8, 77, D},
                                {1, 32, 8, 384, D},  {1, 4, 1, 1000, D, 8}, {1, 32, 8, 1, D},
                                {4, 24, 8, 130, D}};
    check_forward_all(problems, seed, GetParam());
  }
#endif
}

// The backward over the shapes the Hopper backward's tiles (dK/dV: 128 keys
// per CTA, 64-query steps (128 at head dim 64); dQ: 128 queries per CTA,
// 64-key steps (128 at head dim 64)) make interesting: one row, tails inside
// the first tile (77), across tiles (200, 1000), exact multiples (256), more
// tiles than SMs (B4 H24 KV8 T130); multi-head, grouped 8/2 and 32/8 (the dK/dV
// ring crossing query heads), multi-query; padded row strides. check_cuda
// also poisons the gradients, checks the stride gaps, runs the backward a
// second time for identical bytes and, grouped, compares dq with repeated kv
// heads bit for bit.
TEST_P(AttentionCudaKernelTest, BackwardMatchesFloat64Reference) {
  COLOSSAL_REQUIRE_KERNEL(GetParam());
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 7000;
  for (int64_t D : {int64_t{64}, int64_t{128}}) {
    const Problem problems[] = {{2, 2, 2, 1, D},    {1, 2, 2, 77, D, 8},  {2, 8, 2, 200, D},
                                {1, 2, 2, 1000, D}, {1, 8, 2, 256, D},    {1, 32, 8, 77, D},
                                {1, 32, 8, 256, D}, {1, 4, 1, 1000, D, 8}, {1, 32, 8, 1, D},
                                {2, 4, 1, 129, D},  {4, 24, 8, 130, D}};
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      for (const Problem& p : problems) {
        check_cuda(dtype, p, seed, path_of(GetParam()), backward_of(GetParam()));
        seed += 2;
      }
    }
  }
#endif
}

// The full (non-causal) mask through each kernel pair: every query tile meets
// every key tile, and the last key tile masks only keys at or past seq (the
// tails the Hopper tiles make interesting: inside the first tile (77), across
// tiles (200, 1000), exact multiples (128, 256), one row); multi-head, grouped
// 8/2 and 32/8, multi-query, padded strides; head_dim 64 and 128 (96:
// HeadDim96MatchesFloat64Reference). check_cuda poisons the outputs, checks
// the stride gaps, the determinism of a second backward and, grouped, dq
// against repeated kv heads bit for bit.
TEST_P(AttentionCudaKernelTest, FullMaskMatchesFloat64Reference) {
  COLOSSAL_REQUIRE_KERNEL(GetParam());
#if COLOSSAL_WITH_CUDA
  constexpr AttentionMask kFull = AttentionMask::kFull;
  for (int64_t D : {int64_t{64}, int64_t{128}}) {
    const Problem problems[] = {{2, 2, 2, 1, D, 0, kFull},     {1, 2, 2, 77, D, 8, kFull},
                                {2, 8, 2, 200, D, 0, kFull},   {1, 2, 2, 1000, D, 0, kFull},
                                {1, 8, 2, 256, D, 0, kFull},   {1, 32, 8, 77, D, 0, kFull},
                                {2, 4, 1, 129, D, 8, kFull},   {1, 3, 3, 128, D, 0, kFull},
                                {1, 32, 8, 130, D, 0, kFull},  {4, 24, 8, 130, D, 0, kFull}};
    check_cuda_all(problems, static_cast<uint32_t>(9000 + D), GetParam());
  }
#endif
}

// The forward alone under the full mask, over the Hopper forward's tile tails.
TEST_P(AttentionCudaKernelTest, FullMaskForwardMatchesFloat64Reference) {
  COLOSSAL_REQUIRE_KERNEL(GetParam());
  if (GetParam() == Kernel::kHopperBackward || GetParam() == Kernel::kHopperFusedDq) {
    GTEST_SKIP() << "forward only: the Portable or Hopper case";
  }
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 9500;
  constexpr AttentionMask kFull = AttentionMask::kFull;
  for (int64_t D : {int64_t{64}, int64_t{128}}) {
    const Problem problems[] = {{2, 2, 2, 1, D, 0, kFull},   {1, 2, 2, 100, D, 8, kFull},
                                {1, 8, 2, 384, D, 0, kFull}, {1, 4, 1, 1000, D, 8, kFull},
                                {1, 32, 8, 1, D, 0, kFull},  {2, 6, 2, 129, D, 0, kFull}};
    check_forward_all(problems, seed, GetParam());
  }
#endif
}

// head_dim 96, both masks, through each kernel choice (the Hopper kernels run
// it as 128 with columns 96.. read as zeros and never written: check_cuda's
// stride-gap poison catches a stray column).
TEST_P(AttentionCudaKernelTest, HeadDim96MatchesFloat64Reference) {
  COLOSSAL_REQUIRE_KERNEL(GetParam());
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 9800;
  for (AttentionMask mask : {AttentionMask::kCausal, AttentionMask::kFull}) {
    const Problem problems[] = {{1, 1, 1, 1, 96, 0, mask},    {2, 3, 3, 17, 96, 0, mask},
                                {1, 2, 2, 129, 96, 8, mask},  {1, 8, 2, 200, 96, 0, mask},
                                {2, 4, 1, 77, 96, 8, mask},   {1, 12, 12, 128, 96, 0, mask},
                                {1, 32, 8, 257, 96, 0, mask}};
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      for (const Problem& p : problems) {
        check_cuda(dtype, p, seed, path_of(GetParam()), backward_of(GetParam()));
        seed += 2;
      }
    }
  }
#endif
}

INSTANTIATE_TEST_SUITE_P(Kernels, AttentionCudaKernelTest,
                         ::testing::Values(Kernel::kPortable, Kernel::kHopper,
                                           Kernel::kHopperBackward, Kernel::kHopperFusedDq),
                         kernel_name);

#if COLOSSAL_WITH_CUDA
// dq, dk, dv of two CUDA runs (packed dqkv bytes), each within one gradient
// tolerance of float64, meet each other within two (the triangle inequality),
// relative to the largest of `want`'s gradients.
void expect_gradients_within_two(DType dtype, const Problem& p, const std::vector<uint8_t>& got,
                                 const std::vector<uint8_t>& want, const std::string& what) {
  const std::vector<double> g = to_doubles(dtype, got.data(), p.qkv_elems());
  const std::vector<double> w = to_doubles(dtype, want.data(), p.qkv_elems());
  const std::vector<bool> mask = qkv_columns(p);
  double grad_scale = 0;
  for (int64_t i = 0; i < p.qkv_elems(); ++i) {
    if (mask[i]) grad_scale = std::max(grad_scale, std::fabs(w[i]));
  }
  const Tolerance one = cuda_tolerance(dtype, true), two{2 * one.rtol, 2 * one.atol};
  const char* names[3] = {" dq", " dk", " dv"};
  const int64_t col0[3] = {0, p.k_col(), p.v_col()}, width[3] = {p.C(), p.CKV(), p.CKV()};
  for (int part = 0; part < 3; ++part) {
    expect_close(g, w, columns(p, p.qkv_stride(), col0[part], width[part]), two,
                 what + names[part], grad_scale);
  }
}
#endif

// The backward rebuilds P from the forward's o and lse: fed by the Hopper
// forward it must give the portable forward's gradients, up to the two
// forwards' roundings. Both runs are checked against float64 above, each
// within one tolerance; here they meet each other, so within two (the
// triangle inequality), for the gradients and for lse.
TEST(AttentionCudaTest, HopperForwardDrivesBackwardLikePortable) {
  COLOSSAL_REQUIRE_KERNEL(Kernel::kHopper);
#if COLOSSAL_WITH_CUDA
  const Problem problems[] = {{1, 8, 2, 300, 128},
                              {2, 4, 4, 200, 64, 8},
                              {1, 32, 8, 129, 64},
                              {1, 8, 2, 300, 128, 0, AttentionMask::kFull},
                              {2, 4, 4, 200, 64, 8, AttentionMask::kFull}};
  uint32_t seed = 6000;
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const Problem& p : problems) {
      SCOPED_TRACE(p.label(dtype));
      const std::string what = p.label(dtype);
      const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.D)));
      const auto qkv_h = random_bytes(dtype, p.qkv_elems(), seed++, -2.0f, 2.0f);
      const auto do_h = random_bytes(dtype, p.o_elems(), seed++, -1.0f, 1.0f);
      const CudaRun portable(p, dtype), hopper(p, dtype);
      run_cuda(p, dtype, portable, qkv_h, do_h, scale, stream, ForwardPath::kPortable,
               BackwardPath::kPortable);
      if (::testing::Test::HasFatalFailure()) break;
      run_cuda(p, dtype, hopper, qkv_h, do_h, scale, stream, ForwardPath::kHopper,
               BackwardPath::kPortable);
      if (::testing::Test::HasFatalFailure()) break;
      const std::vector<uint8_t> lse_p = portable.lse.download(), lse_h = hopper.lse.download();
      expect_close(to_doubles(DType::kF32, lse_h.data(), p.rows()),
                   to_doubles(DType::kF32, lse_p.data(), p.rows()), all_of(p.rows()),
                   {2e-4, 2e-4}, what + " lse");
      expect_gradients_within_two(dtype, p, hopper.dqkv.download(), portable.dqkv.download(),
                                  what);
    }
  }
  CUDA_OK(cudaStreamDestroy(stream));
#endif
}

// The two backwards on the same forward's o and lse (each forward in turn):
// the Hopper backward's gradients meet the portable backward's within twice
// the single-run tolerance (each is within one of float64); the Hopper
// backward run twice over NaN-poisoned gradients gives the same bytes, and
// the stride gaps stay NaN.
TEST(AttentionCudaTest, HopperBackwardMatchesPortable) {
  COLOSSAL_REQUIRE_KERNEL(Kernel::kHopper);
#if COLOSSAL_WITH_CUDA
  constexpr AttentionMask kFull = AttentionMask::kFull;
  const Problem problems[] = {{1, 8, 2, 300, 128},         {2, 4, 4, 200, 64, 8},
                              {1, 32, 8, 129, 64},         {1, 4, 1, 1000, 128},
                              {2, 2, 2, 77, 64},           {1, 32, 8, 256, 128, 8},
                              {1, 8, 2, 300, 128, 0, kFull}, {2, 2, 2, 77, 64, 8, kFull},
                              {1, 32, 8, 256, 64, 0, kFull}};
  uint32_t seed = 8000;
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  for (ForwardPath fwd : {ForwardPath::kPortable, ForwardPath::kHopper}) {
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      for (const Problem& p : problems) {
        SCOPED_TRACE(p.label(dtype) +
                     (fwd == ForwardPath::kHopper ? " hopper forward" : " portable forward"));
        const std::string what = p.label(dtype);
        const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.D)));
        const auto qkv_h = random_bytes(dtype, p.qkv_elems(), seed++, -2.0f, 2.0f);
        const auto do_h = random_bytes(dtype, p.o_elems(), seed++, -1.0f, 1.0f);
        const CudaRun r(p, dtype);
        run_cuda(p, dtype, r, qkv_h, do_h, scale, stream, fwd, BackwardPath::kPortable);
        if (::testing::Test::HasFatalFailure()) break;
        const std::vector<uint8_t> g_p = r.dqkv.download();
        std::vector<uint8_t> g_h[2];
        for (int run = 0; run < 2; ++run) {
          poison_nan(r.dqkv);
          poison_nan(r.ws);
          const KernelStatus s = backward_cuda(p, r.dqkv, r.d_o, r.qkv, r.o, r.lse, r.ws, dtype,
                                               scale, stream, BackwardPath::kHopper);
          ASSERT_TRUE(s.ok()) << s.message();
          CUDA_OK(cudaStreamSynchronize(stream));
          g_h[run] = r.dqkv.download();
        }
        EXPECT_EQ(std::memcmp(g_h[0].data(), g_h[1].data(), g_h[0].size()), 0)
            << what << ": two Hopper backwards differ";
        EXPECT_TRUE(all_nan_outside(dtype, g_h[0], qkv_columns(p))) << what << ": dqkv gap written";
        expect_gradients_within_two(dtype, p, g_h[0], g_p, what);
      }
    }
  }
  CUDA_OK(cudaStreamDestroy(stream));
#endif
}

// Sequences of 32k positions (issue #20's longest): the forward's o and lse
// on sampled query rows (the first, the last, tile edges and random ones)
// against float64 computed for those rows alone (each row's softmax is its own),
// through the portable and the Hopper forward; then the Hopper backward against
// the portable one within twice the single-run tolerance. Causal and full.
TEST(AttentionCudaTest, LongSequenceMatchesFloat64OnSampledRows) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const DType dtype = DType::kBF16;
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  uint32_t seed = 9100;
  for (AttentionMask mask : {AttentionMask::kCausal, AttentionMask::kFull}) {
    const Problem p{1, 4, 1, 32768, 128, 0, mask};
    SCOPED_TRACE(p.label(dtype));
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.D)));
    const auto qkv_h = random_bytes(dtype, p.qkv_elems(), seed++, -2.0f, 2.0f);
    const auto do_h = random_bytes(dtype, p.o_elems(), seed++, -1.0f, 1.0f);
    const std::vector<double> qkv = to_doubles(dtype, qkv_h.data(), p.qkv_elems());
    std::vector<int64_t> rows = {0, 1, 127, 128, 129, 16383, 16384, p.T - 129, p.T - 2, p.T - 1};
    std::mt19937 rng(seed++);
    for (int i = 0; i < 6; ++i) rows.push_back(std::uniform_int_distribution<int64_t>(0, p.T - 1)(rng));
    const CudaRun r(p, dtype);
    std::vector<uint8_t> grads[2];
    const ForwardPath paths[2] = {ForwardPath::kPortable, ForwardPath::kHopper};
    for (int k = 0; k < 2; ++k) {
      const bool hopper = paths[k] == ForwardPath::kHopper;
      if (hopper && !hopper_available()) continue;
      run_cuda(p, dtype, r, qkv_h, do_h, scale, stream, paths[k],
               hopper ? BackwardPath::kHopper : BackwardPath::kPortable);
      if (::testing::Test::HasFatalFailure()) break;
      grads[k] = r.dqkv.download();
      const std::vector<uint8_t> o_bytes = r.o.download(), lse_bytes = r.lse.download();
      const std::vector<double> o = to_doubles(dtype, o_bytes.data(), p.o_elems());
      const float* lse = reinterpret_cast<const float*>(lse_bytes.data());
      const Tolerance tol = cuda_tolerance(dtype, false);
      const int64_t qs = p.qkv_stride();
      std::vector<double> s(p.T);
      for (int64_t h = 0; h < p.H; ++h) {
        const int64_t kvh = h / p.group();
        for (int64_t i : rows) {
          const int64_t n = mask == AttentionMask::kFull ? p.T : i + 1;
          double m = -std::numeric_limits<double>::infinity();
          for (int64_t j = 0; j < n; ++j) {
            double dot = 0;
            for (int64_t c = 0; c < p.D; ++c) {
              dot += qkv[at(p, qs, 0, i, h, c)] * qkv[p.k_col() + at(p, qs, 0, j, kvh, c)];
            }
            s[j] = scale * dot;
            m = std::max(m, s[j]);
          }
          double sum = 0;
          for (int64_t j = 0; j < n; ++j) sum += std::exp(s[j] - m);
          const std::string where = std::string(hopper ? "hopper" : "portable") + " head " +
                                    std::to_string(h) + " row " + std::to_string(i);
          EXPECT_NEAR(lse[h * p.T + i], m + std::log(sum), 1e-3 * (1.0 + std::fabs(m))) << where;
          std::vector<double> want(p.D), got(p.D);
          for (int64_t c = 0; c < p.D; ++c) {
            double acc = 0;
            for (int64_t j = 0; j < n; ++j) {
              acc += std::exp(s[j] - m) / sum * qkv[p.v_col() + at(p, qs, 0, j, kvh, c)];
            }
            want[c] = acc;
            got[c] = o[at(p, p.o_stride(), 0, i, h, c)];
          }
          expect_close(got, want, std::vector<bool>(p.D, true), tol, "o " + where);
        }
      }
    }
    if (!grads[0].empty() && !grads[1].empty()) {
      expect_gradients_within_two(dtype, p, grads[1], grads[0], p.label(dtype) + " hopper vs portable");
    }
  }
  CUDA_OK(cudaStreamDestroy(stream));
#endif
}

// ---------------------------------------------------------------------------
// CUDA, varlen layout: the portable kernels on every device.

#if COLOSSAL_WITH_CUDA
// Device buffers of one varlen problem (f: its flat problem) and cu_seqlens
// uploaded.
struct VarlenRun : RunBuffers {
  DeviceBuffer cu;
  VarlenRun(const Problem& f, const std::vector<int32_t>& cu_h, DType dtype)
      : RunBuffers(f, dtype, attention_varlen_backward_workspace_bytes(f.H, f.T)),
        cu(cu_h.size() * sizeof(int32_t)) {
    if (cu.p != nullptr) {
      EXPECT_EQ(cudaMemcpy(cu.p, cu_h.data(), cu.bytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  const int32_t* cu_seqlens() const { return static_cast<const int32_t*>(cu.p); }
};

int32_t max_seqlen_of(const std::vector<int32_t>& cu) {
  int32_t m = 0;
  for (size_t i = 0; i + 1 < cu.size(); ++i) m = std::max(m, cu[i + 1] - cu[i]);
  return m;
}

KernelStatus varlen_forward_cuda(const Problem& f, const std::vector<int32_t>& cu,
                                 const VarlenRun& r, DType dtype, float scale,
                                 cudaStream_t stream, ForwardPath path) {
  return internal::attention_varlen_forward_cuda_path(
      path, f.mask, r.o.p, static_cast<float*>(r.lse.p), r.qkv.p,
      at_col(r.qkv.p, f.k_col(), dtype), at_col(r.qkv.p, f.v_col(), dtype), r.cu_seqlens(),
      static_cast<int64_t>(cu.size()) - 1, f.T, max_seqlen_of(cu), f.H, f.KV, f.D,
      f.qkv_stride(), f.o_stride(), dtype, scale, stream);
}

KernelStatus varlen_backward_cuda(const Problem& f, const std::vector<int32_t>& cu,
                                  const VarlenRun& r, DType dtype, float scale,
                                  cudaStream_t stream, BackwardPath path) {
  return internal::attention_varlen_backward_cuda_path(
      path, f.mask, r.dqkv.p, at_col(r.dqkv.p, f.k_col(), dtype),
      at_col(r.dqkv.p, f.v_col(), dtype), r.d_o.p, r.qkv.p, at_col(r.qkv.p, f.k_col(), dtype),
      at_col(r.qkv.p, f.v_col(), dtype), r.o.p, static_cast<const float*>(r.lse.p), r.ws.p,
      r.cu_seqlens(), static_cast<int64_t>(cu.size()) - 1, f.T, max_seqlen_of(cu), f.H, f.KV,
      f.D, f.qkv_stride(), f.o_stride(), dtype, scale, stream);
}

// Uploads qkv_h and do_h, NaN-poisons every output and the workspace, runs the
// varlen forward and backward through `fwd` and `bwd`, and waits.
void run_varlen_cuda(const Problem& f, const std::vector<int32_t>& cu, DType dtype,
                     const VarlenRun& r, const std::vector<uint8_t>& qkv_h,
                     const std::vector<uint8_t>& do_h, float scale, cudaStream_t stream,
                     ForwardPath fwd, BackwardPath bwd) {
  ASSERT_TRUE(r.cu.p) << "cudaMalloc failed";
  upload_and_poison(r, qkv_h, do_h);
  if (::testing::Test::HasFatalFailure()) return;
  KernelStatus s = varlen_forward_cuda(f, cu, r, dtype, scale, stream, fwd);
  ASSERT_TRUE(s.ok()) << s.message();
  s = varlen_backward_cuda(f, cu, r, dtype, scale, stream, bwd);
  ASSERT_TRUE(s.ok()) << s.message();
  CUDA_OK(cudaStreamSynchronize(stream));
}

// The varlen kernels against the float64 CPU varlen path on the same rounded
// inputs (o, lse, dq, dk, dv at check_cuda's tolerances; stride gaps stay
// NaN): the portable ones, and on compute capability 9.0 the Hopper ones;
// then the automatic path (kAuto), which must give the bytes of the Hopper
// kernels there and of the portable ones elsewhere.
void check_varlen_cuda(DType dtype, const std::vector<int32_t>& lens, int64_t H, int64_t KV,
                       int64_t D, int64_t pad, AttentionMask mask, uint32_t seed) {
  const std::vector<int32_t> cu = cu_seqlens_of(lens);
  const Problem f = flat_problem(cu, H, KV, D, pad, mask);
  const std::string what = varlen_label(f, cu, dtype);
  SCOPED_TRACE(what);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const auto qkv_h = random_bytes(dtype, f.qkv_elems(), seed, -2.0f, 2.0f);
  const auto do_h = random_bytes(dtype, f.o_elems(), seed + 1, -1.0f, 1.0f);
  const std::vector<double> qkv_d = to_doubles(dtype, qkv_h.data(), f.qkv_elems());
  const std::vector<double> do_d = to_doubles(dtype, do_h.data(), f.o_elems());
  std::vector<double> o_ref(f.o_elems(), 0.0), dqkv_ref(f.qkv_elems(), 0.0);
  std::vector<float> lse_ref(f.rows());
  ASSERT_TRUE(varlen_forward_cpu(f, cu, o_ref.data(), lse_ref.data(), qkv_d.data(), DType::kF64,
                                 scale)
                  .ok());
  ASSERT_TRUE(varlen_backward_cpu(f, cu, dqkv_ref.data(), do_d.data(), qkv_d.data(),
                                  DType::kF64, scale)
                  .ok());
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  const VarlenRun a(f, cu, dtype);
  const bool hopper = hopper_available();
  std::vector<uint8_t> o_want, lse_want, dqkv_want;  // what kAuto must give
  for (bool use_hopper : {false, true}) {
    if (use_hopper && !hopper) break;
    const std::string kernel = use_hopper ? " (Hopper)" : " (portable)";
    const VarlenRun r(f, cu, dtype);
    run_varlen_cuda(f, cu, dtype, r, qkv_h, do_h, scale, stream,
                    use_hopper ? ForwardPath::kHopper : ForwardPath::kPortable,
                    use_hopper ? BackwardPath::kHopper : BackwardPath::kPortable);
    if (::testing::Test::HasFatalFailure()) return;
    const std::vector<uint8_t> o_got = r.o.download(), lse_got = r.lse.download();
    const std::vector<uint8_t> dqkv_got = r.dqkv.download();
    expect_cuda_matches(dtype, f, o_got, lse_got, dqkv_got, o_ref, lse_ref, dqkv_ref,
                        what + kernel);
    o_want = o_got;
    lse_want = lse_got;
    dqkv_want = dqkv_got;
  }
  run_varlen_cuda(f, cu, dtype, a, qkv_h, do_h, scale, stream, ForwardPath::kAuto,
                  BackwardPath::kAuto);
  if (::testing::Test::HasFatalFailure()) return;
  const char* want = hopper ? "the Hopper kernels'" : "the portable kernels'";
  EXPECT_EQ(a.o.download(), o_want) << what << ": kAuto's o is not " << want;
  EXPECT_EQ(a.lse.download(), lse_want) << what << ": kAuto's lse is not " << want;
  EXPECT_EQ(a.dqkv.download(), dqkv_want) << what << ": kAuto's gradients are not " << want;
  CUDA_OK(cudaStreamDestroy(stream));
}
#endif

// Odd lengths (inside one 64-row block, across blocks, whole blocks), empty
// sequences first, between and last, both masks, multi-head, grouped and
// multi-query heads, head_dim 64, 96 and 128, padded rows, both 16-bit types.
TEST(AttentionCudaTest, VarlenMatchesFloat64Reference) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  struct Case {
    std::vector<int32_t> lens;
    int64_t H, KV, D, pad;
  };
  const Case cases[] = {{{1, 77, 0, 200, 128}, 4, 2, 64, 0},
                        {{5, 70, 33}, 2, 1, 128, 8},
                        {{129, 1, 64, 300}, 3, 3, 96, 0},
                        {{0, 1000, 17}, 4, 1, 128, 0},
                        {{65, 0, 63, 0}, 6, 2, 96, 8},
                        {{64, 64, 64}, 8, 2, 64, 8},
                        {{300, 0, 17, 129, 260}, 24, 8, 64, 0}};  // 360 tiles of 128 queries
  uint32_t seed = 9500;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (AttentionMask mask : {AttentionMask::kCausal, AttentionMask::kFull}) {
      for (const Case& c : cases) {
        check_varlen_cuda(dtype, c.lens, c.H, c.KV, c.D, c.pad, mask, seed);
        seed += 2;
      }
    }
  }
#endif
}

// Equal lengths: the varlen kernels do the batch kernels' arithmetic in the
// same order (the portable batch path), so o, lse (transposed from
// [B, H, T] to [H, B * T]), dq, dk and dv are the same bytes.
TEST(AttentionCudaTest, VarlenOfEqualLengthsIsThePortableBatch) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const Problem problems[] = {{3, 4, 2, 77, 64, 8}, {2, 2, 2, 130, 128},
                              {2, 6, 3, 65, 96, 0, AttentionMask::kFull}};
  uint32_t seed = 9700;
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  for (const Problem& p : problems) {
    const DType dtype = DType::kBF16;
    SCOPED_TRACE(p.label(dtype));
    const std::vector<int32_t> cu = cu_seqlens_of(std::vector<int32_t>(p.B, p.T));
    const Problem f = flat_problem(cu, p.H, p.KV, p.D, p.pad, p.mask);
    const float scale = 0.1f;
    const auto qkv_h = random_bytes(dtype, p.qkv_elems(), seed++, -2.0f, 2.0f);
    const auto do_h = random_bytes(dtype, p.o_elems(), seed++, -1.0f, 1.0f);
    const CudaRun b(p, dtype);
    run_cuda(p, dtype, b, qkv_h, do_h, scale, stream, ForwardPath::kPortable,
             BackwardPath::kPortable);
    if (::testing::Test::HasFatalFailure()) break;
    const VarlenRun v(f, cu, dtype);
    run_varlen_cuda(f, cu, dtype, v, qkv_h, do_h, scale, stream, ForwardPath::kPortable,
                    BackwardPath::kPortable);
    if (::testing::Test::HasFatalFailure()) break;
    EXPECT_EQ(v.o.download(), b.o.download()) << "o";
    EXPECT_EQ(v.dqkv.download(), b.dqkv.download()) << "dq, dk, dv";
    const std::vector<uint8_t> lb = b.lse.download(), lv = v.lse.download();
    const float* lse_b = reinterpret_cast<const float*>(lb.data());
    const float* lse_v = reinterpret_cast<const float*>(lv.data());
    for (int64_t s = 0; s < p.B; ++s) {
      for (int64_t h = 0; h < p.H; ++h) {
        for (int64_t t = 0; t < p.T; ++t) {
          ASSERT_EQ(std::memcmp(&lse_b[(s * p.H + h) * p.T + t], &lse_v[h * f.T + s * p.T + t],
                                sizeof(float)),
                    0)
              << "lse of sequence " << s << " head " << h << " position " << t;
        }
      }
    }
  }
  CUDA_OK(cudaStreamDestroy(stream));
#endif
}

// The varlen calls' own checks (cu_seqlens itself stays on the device, unread)
// and the Hopper path's refusal; an empty layout is a no-op.
TEST(AttentionCudaTest, VarlenRejectsBadArguments) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const std::vector<int32_t> cu_h = {0, 5, 75, 108};
  const Problem f = flat_problem(cu_h, 2, 1, 64, 0, AttentionMask::kCausal);
  const DType dtype = DType::kBF16;
  const VarlenRun r(f, cu_h, dtype);
  ASSERT_TRUE(r.qkv.p && r.o.p && r.lse.p && r.dqkv.p && r.ws.p && r.cu.p);
  auto fwd = [&](ForwardPath path, const int32_t* cu, int64_t num_seqs, int64_t total,
                 int64_t max_seqlen, int64_t H, void* o) {
    return internal::attention_varlen_forward_cuda_path(
        path, AttentionMask::kCausal, o, static_cast<float*>(r.lse.p), r.qkv.p,
        at_col(r.qkv.p, f.k_col(), dtype), at_col(r.qkv.p, f.v_col(), dtype), cu, num_seqs,
        total, max_seqlen, H, 1, 64, f.qkv_stride(), f.o_stride(), dtype, 0.1f, nullptr);
  };
  auto bwd = [&](BackwardPath path, const int32_t* cu, int64_t max_seqlen) {
    return internal::attention_varlen_backward_cuda_path(
        path, AttentionMask::kFull, r.dqkv.p, at_col(r.dqkv.p, f.k_col(), dtype),
        at_col(r.dqkv.p, f.v_col(), dtype), r.d_o.p, r.qkv.p, at_col(r.qkv.p, f.k_col(), dtype),
        at_col(r.qkv.p, f.v_col(), dtype), r.o.p, static_cast<const float*>(r.lse.p), r.ws.p, cu,
        3, f.T, max_seqlen, 2, 1, 64, f.qkv_stride(), f.o_stride(), dtype, 0.1f, nullptr);
  };
  const int32_t* cu = r.cu_seqlens();
  EXPECT_TRUE(fwd(ForwardPath::kPortable, cu, 3, 108, 70, 2, r.o.p).ok());
  EXPECT_TRUE(fwd(ForwardPath::kAuto, cu, 3, 108, 70, 2, r.o.p).ok());
  EXPECT_TRUE(bwd(BackwardPath::kPortable, cu, 70).ok());
  EXPECT_TRUE(bwd(BackwardPath::kAuto, cu, 70).ok());
  // The Hopper kernels run varlen on compute capability 9.0 (the backward
  // deterministic: the fused dQ's scratch is sized for the batch layout).
  const Code on_hopper = internal::hopper_device() ? Code::kOk : Code::kUnsupported;
  EXPECT_EQ(fwd(ForwardPath::kHopper, cu, 3, 108, 70, 2, r.o.p).code(), on_hopper);
  EXPECT_EQ(bwd(BackwardPath::kHopper, cu, 70).code(), on_hopper);
  const KernelStatus hb = bwd(BackwardPath::kHopperFusedDq, cu, 70);
  EXPECT_EQ(hb.code(), Code::kUnsupported);
  EXPECT_NE(std::string(hb.message()).find("does not take the varlen layout"), std::string::npos)
      << hb.message();
  const int32_t* misaligned = reinterpret_cast<const int32_t*>(r.cu.u8() + 2);
  EXPECT_EQ(fwd(ForwardPath::kPortable, nullptr, 3, 108, 70, 2, r.o.p).code(),
            Code::kInvalidArgument);  // null cu_seqlens
  EXPECT_EQ(fwd(ForwardPath::kPortable, misaligned, 3, 108, 70, 2, r.o.p).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(fwd(ForwardPath::kPortable, cu, 3, 108, 0, 2, r.o.p).code(),
            Code::kInvalidArgument);  // max_seqlen 0 with tokens
  EXPECT_EQ(fwd(ForwardPath::kPortable, cu, 3, 108, -1, 2, r.o.p).code(), Code::kInvalidArgument);
  EXPECT_EQ(fwd(ForwardPath::kPortable, cu, 3, 108, (int64_t{1} << 30) + 1, 2, r.o.p).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(fwd(ForwardPath::kPortable, cu, 0, 108, 70, 2, r.o.p).code(),
            Code::kInvalidArgument);  // tokens without a sequence
  EXPECT_EQ(fwd(ForwardPath::kPortable, cu, 40000, 108, 70, 2, r.o.p).code(),
            Code::kInvalidArgument);  // num_seqs * heads above 65535
  EXPECT_EQ(fwd(ForwardPath::kPortable, cu, 3, 108, 70, 2, r.qkv.p).code(),
            Code::kInvalidArgument);  // o overlaps q
  EXPECT_EQ(fwd(ForwardPath::kPortable, cu, 3, 108, 70, 2, r.cu.p).code(),
            Code::kInvalidArgument);  // o overlaps cu_seqlens
  EXPECT_EQ(bwd(BackwardPath::kPortable, nullptr, 70).code(), Code::kInvalidArgument);
  // No tokens (every sequence empty, or no heads): nothing to do.
  const std::vector<int32_t> empty_h = {0, 0, 0};
  const VarlenRun e(flat_problem(empty_h, 2, 1, 64, 0, AttentionMask::kCausal), empty_h, dtype);
  EXPECT_TRUE(fwd(ForwardPath::kPortable, e.cu_seqlens(), 2, 0, 0, 2, r.o.p).ok());
  EXPECT_TRUE(fwd(ForwardPath::kPortable, cu, 3, 108, 70, 0, r.o.p).ok());
  EXPECT_EQ(attention_varlen_backward_workspace_bytes(2, 108), size_t{2 * 108 * 4});
  // The batch backward's workspace: delta alone at head_dim 64 (never fused),
  // delta (rounded up to 256 bytes) and two 64 x 64 float parts per query
  // head and 64-query step at 96 and 128.
  EXPECT_EQ(attention_backward_workspace_bytes(2, 3, 100, 64), size_t{2 * 3 * 100 * 4});
  const size_t parts = size_t{2 * 3 * 2} * 2 * 64 * 64 * 4;
  EXPECT_EQ(attention_backward_workspace_bytes(2, 3, 100, 128), size_t{2560} + parts);
  EXPECT_EQ(attention_backward_workspace_bytes(2, 3, 100, 96), size_t{2560} + parts);
  EXPECT_EQ(internal::fused_dq_workspace_bytes(2, 3, 100, 64), size_t{2560} + parts);
  EXPECT_EQ(attention_backward_workspace_bytes(0, 3, 100, 128), size_t{0});
  EXPECT_EQ(attention_varlen_backward_workspace_bytes(2, 0), size_t{0});
  CUDA_OK(cudaDeviceSynchronize());
#endif
}

TEST(AttentionCudaTest, RejectsBadArguments) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  DeviceBuffer buf(1 << 20);
  ASSERT_NE(buf.p, nullptr);
  uint8_t* b = buf.u8();
  float* lse = reinterpret_cast<float*>(b + (1 << 19));
  auto fwd = [&](void* o, const void* q, int64_t d, DType dtype, int64_t qs) {
    return causal_attention_forward_cuda(o, lse, q, q, q, 1, 1, 1, 8, d, qs, d, dtype, 0.1f,
                                         nullptr)
        .code();
  };
  uint8_t* o = b + (1 << 18);
  EXPECT_EQ(fwd(o, b, 64, DType::kF32, 64), Code::kUnsupported);
  EXPECT_EQ(fwd(o, b, 80, DType::kBF16, 80), Code::kUnsupported);
  EXPECT_EQ(fwd(o, b + 2, 64, DType::kBF16, 64), Code::kInvalidArgument);  // misaligned
  EXPECT_EQ(fwd(o, b, 64, DType::kBF16, 68), Code::kInvalidArgument);      // stride % 8
  EXPECT_EQ(fwd(b, b, 64, DType::kBF16, 64), Code::kInvalidArgument);      // o overlaps q
  EXPECT_EQ(fwd(nullptr, b, 64, DType::kBF16, 64), Code::kInvalidArgument);
  // Through the explicit paths: the same checks first; the Hopper kernel off
  // compute capability 9.0 is kUnsupported, on it the call runs.
  auto fwd_path = [&](ForwardPath path, const void* q, int64_t d, DType dtype) {
    return internal::causal_attention_forward_cuda_path(path, o, lse, q, q, q, 1, 1, 1, 8, d, d,
                                                        d, dtype, 0.1f, nullptr)
        .code();
  };
  for (ForwardPath path : {ForwardPath::kPortable, ForwardPath::kHopper}) {
    EXPECT_EQ(fwd_path(path, b + 2, 64, DType::kBF16), Code::kInvalidArgument);
    EXPECT_EQ(fwd_path(path, b, 64, DType::kF32), Code::kUnsupported);
  }
  EXPECT_EQ(fwd_path(ForwardPath::kPortable, b, 64, DType::kBF16), Code::kOk);
  // head_dim 96: every path (the Hopper kernel on compute capability 9.0).
  EXPECT_EQ(fwd_path(ForwardPath::kPortable, b, 96, DType::kBF16), Code::kOk);
  EXPECT_EQ(fwd_path(ForwardPath::kAuto, b, 96, DType::kF16), Code::kOk);
  EXPECT_EQ(fwd_path(ForwardPath::kHopper, b, 96, DType::kBF16),
            internal::hopper_device() ? Code::kOk : Code::kUnsupported);
  // The mask: full through every path, an unknown value refused first.
  for (ForwardPath path : {ForwardPath::kAuto, ForwardPath::kPortable, ForwardPath::kHopper}) {
    EXPECT_EQ(internal::attention_forward_cuda_path(path, AttentionMask::kFull, o, lse, b, b, b, 1,
                                                    1, 1, 8, 64, 64, 64, DType::kBF16, 0.1f,
                                                    nullptr)
                  .code(),
              path != ForwardPath::kHopper || internal::hopper_device() ? Code::kOk
                                                                         : Code::kUnsupported);
    EXPECT_EQ(internal::attention_forward_cuda_path(path, static_cast<AttentionMask>(7), o, lse, b,
                                                    b, b, 1, 1, 1, 8, 64, 64, 64, DType::kBF16,
                                                    0.1f, nullptr)
                  .code(),
              Code::kInvalidArgument);
  }
  EXPECT_EQ(fwd_path(ForwardPath::kHopper, b, 128, DType::kF16),
            internal::hopper_device() ? Code::kOk : Code::kUnsupported);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(causal_attention_forward_cuda(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 1, 1,
                                            8, 64, 64, 64, DType::kBF16, 0.1f, nullptr)
                  .ok());
  EXPECT_EQ(causal_attention_backward_cuda(b, b, b, o, o, o, o, o, lse, b, 1, 1, 1, 8, 64, 64, 64,
                                           DType::kBF16, 0.1f, false, nullptr)
                .code(),
            Code::kInvalidArgument);  // dq overlaps the workspace
  // The explicit backward paths: the same checks first; the Hopper kernels
  // off compute capability 9.0 are kUnsupported, on it the call runs.
  uint8_t* grads = b + (1 << 17);  // dq, dk, dv [8 x 64] apart from everything else
  uint8_t* ws = b + (1 << 16);
  auto bwd_path = [&](BackwardPath path, void* dq, int64_t d, DType dtype) {
    return internal::causal_attention_backward_cuda_path(path, dq, grads + 2048, grads + 4096, o,
                                                         b, b, b, o, lse, ws, 1, 1, 1, 8, d, d, d,
                                                         dtype, 0.1f, nullptr)
        .code();
  };
  for (BackwardPath path : {BackwardPath::kPortable, BackwardPath::kHopper}) {
    EXPECT_EQ(bwd_path(path, grads + 2, 64, DType::kBF16), Code::kInvalidArgument);
    EXPECT_EQ(bwd_path(path, grads, 64, DType::kF32), Code::kUnsupported);
    EXPECT_EQ(bwd_path(path, b, 64, DType::kBF16), Code::kInvalidArgument);  // dq overlaps q
  }
  EXPECT_EQ(bwd_path(BackwardPath::kPortable, grads, 64, DType::kBF16), Code::kOk);
  EXPECT_EQ(bwd_path(BackwardPath::kPortable, grads, 96, DType::kBF16), Code::kOk);
  EXPECT_EQ(bwd_path(BackwardPath::kAuto, grads, 96, DType::kF16), Code::kOk);
  EXPECT_EQ(bwd_path(BackwardPath::kHopper, grads, 96, DType::kBF16),
            internal::hopper_device() ? Code::kOk : Code::kUnsupported);
  EXPECT_EQ(bwd_path(BackwardPath::kHopper, grads, 64, DType::kF16),
            internal::hopper_device() ? Code::kOk : Code::kUnsupported);
  // The fused dQ's parts follow delta's rows in the workspace (at 256 bytes):
  // a workspace whose rows are clear of the inputs but whose parts run into
  // o and dO is refused where the parts are used (kHopperFusedDq, and kAuto
  // at head_dim 128 on Hopper), and fine for the deterministic kernels.
  auto bwd_ws = [&](BackwardPath path, uint8_t* workspace) {
    return internal::causal_attention_backward_cuda_path(path, grads, grads + 2048, grads + 4096,
                                                         o, b, b, b, o, lse, workspace, 1, 1, 1,
                                                         8, 128, 128, 128, DType::kBF16, 0.1f,
                                                         nullptr)
        .code();
  };
  uint8_t* parts_into_o = o - 1024;
  EXPECT_EQ(bwd_ws(BackwardPath::kHopperFusedDq, parts_into_o),
            internal::hopper_device() ? Code::kInvalidArgument : Code::kUnsupported);
  EXPECT_EQ(bwd_ws(BackwardPath::kAuto, parts_into_o),
            internal::hopper_device() ? Code::kInvalidArgument : Code::kOk);
  EXPECT_EQ(bwd_ws(BackwardPath::kHopper, parts_into_o),
            internal::hopper_device() ? Code::kOk : Code::kUnsupported);
  EXPECT_EQ(bwd_ws(BackwardPath::kHopperFusedDq, ws),
            internal::hopper_device() ? Code::kOk : Code::kUnsupported);
  CUDA_OK(cudaDeviceSynchronize());
  // heads (4) not a multiple of kv_heads.
  for (int64_t kv : {int64_t{3}, int64_t{0}, int64_t{8}}) {
    EXPECT_EQ(causal_attention_forward_cuda(o, lse, b, b, b, 1, 4, kv, 8, 64, 6 * 64, 4 * 64,
                                            DType::kBF16, 0.1f, nullptr)
                  .code(),
              Code::kInvalidArgument)
        << "kv_heads " << kv;
  }
#endif
}

}  // namespace
}  // namespace colossal::kernels::attention
