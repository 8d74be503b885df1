// Fused causal attention: the CPU path against an explicit float64 definition
// (the full score matrix) and against finite differences; the CUDA path
// (bf16/fp16, head_dim 64/128) against the CPU path run in float64 on the
// same rounded inputs, forward (o, lse) and backward (dq, dk, dv), on fresh
// random data over odd sequence lengths, several batch x head combinations,
// packed [B, T, 3C] inputs (and padded row strides). Outputs are NaN-poisoned
// before every run; gaps between strided rows must stay untouched.
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

// One problem: qkv packed as [B, T, qkv_stride] (q at column 0, k at C, v at 2C,
// C = H * D), o / d_o as [B, T, o_stride].
struct Problem {
  int64_t B, H, T, D;
  int64_t pad = 0;  // extra elements at the end of every row (strided layout)
  int64_t C() const { return H * D; }
  int64_t qkv_stride() const { return 3 * C() + pad; }
  int64_t o_stride() const { return C() + pad; }
  int64_t qkv_elems() const { return B * T * qkv_stride(); }
  int64_t o_elems() const { return B * T * o_stride(); }
  int64_t rows() const { return B * H * T; }
  std::string label(DType dtype) const {
    return std::string(dtype_name(dtype)) + " B=" + std::to_string(B) + " H=" + std::to_string(H) +
           " T=" + std::to_string(T) + " D=" + std::to_string(D) + " pad=" + std::to_string(pad);
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
// causal) v; lse per row. q, k, v are views into `qkv` (offsets 0, C, 2C).
void explicit_forward(const Problem& p, const std::vector<double>& qkv, double scale,
                      std::vector<double>& o, std::vector<double>& lse) {
  o.assign(p.o_elems(), 0.0);
  lse.assign(p.rows(), 0.0);
  const int64_t C = p.C(), qs = p.qkv_stride();
  std::vector<double> s(p.T * p.T);
  for (int64_t b = 0; b < p.B; ++b) {
    for (int64_t h = 0; h < p.H; ++h) {
      for (int64_t i = 0; i < p.T; ++i) {
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < p.D; ++c) {
            dot += qkv[at(p, qs, b, i, h, c)] * qkv[C + at(p, qs, b, j, h, c)];
          }
          s[i * p.T + j] = scale * dot;
          m = std::max(m, s[i * p.T + j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(s[i * p.T + j] - m);
        lse[(b * p.H + h) * p.T + i] = m + std::log(sum);
        for (int64_t c = 0; c < p.D; ++c) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j) {
            acc += std::exp(s[i * p.T + j] - m) / sum * qkv[2 * C + at(p, qs, b, j, h, c)];
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

// Which elements of a [B, T, stride] tensor belong to columns [col0, col0 + C).
std::vector<bool> columns(const Problem& p, int64_t stride, int64_t col0) {
  std::vector<bool> m(p.B * p.T * stride, false);
  for (int64_t r = 0; r < p.B * p.T; ++r) {
    for (int64_t c = 0; c < p.C(); ++c) m[r * stride + col0 + c] = true;
  }
  return m;
}

std::vector<bool> all_of(size_t n) { return std::vector<bool>(n, true); }

// ---------------------------------------------------------------------------
// CPU.

TEST(AttentionCpuTest, ForwardMatchesExplicitDefinition) {
  uint32_t seed = 1;
  const Problem problems[] = {{1, 1, 1, 3}, {2, 3, 7, 4}, {1, 2, 33, 8, 5}, {2, 1, 17, 64}};
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
      const uint8_t* base = qkv.data();
      ASSERT_TRUE(causal_attention_forward_cpu(o.data(), lse.data(), base, base + p.C() * es,
                                               base + 2 * p.C() * es, p.B, p.H, p.T, p.D,
                                               p.qkv_stride(), p.o_stride(), dtype,
                                               static_cast<float>(scale))
                      .ok())
          << what;
      std::vector<double> o_ref, lse_ref;
      explicit_forward(p, to_doubles(dtype, qkv.data(), p.qkv_elems()),
                       static_cast<float>(scale), o_ref, lse_ref);
      const Tolerance tol = dtype == DType::kF64   ? Tolerance{1e-12, 1e-14}
                            : dtype == DType::kF32 ? Tolerance{1e-6, 1e-7}
                                                   : Tolerance{4e-3, 1e-6};
      expect_close(to_doubles(dtype, o.data(), p.o_elems()), o_ref, columns(p, p.o_stride(), 0),
                   tol, what + " o");
      std::vector<double> lse_d(lse.begin(), lse.end());
      expect_close(lse_d, lse_ref, all_of(lse_d.size()), {1e-6, 1e-7}, what + " lse");
    }
  }
}

// d/dx of L = sum(w * o) by central differences in float64, for every element
// of q, k and v, against the backward with d_o = w.
TEST(AttentionCpuTest, BackwardMatchesFiniteDifferences) {
  const Problem p{2, 2, 5, 3, 1};
  const double h = 1e-6;
  const float scale = 0.7f;
  auto qkv_b = random_bytes(DType::kF64, p.qkv_elems(), 100, -1.5f, 1.5f);
  const auto w_b = random_bytes(DType::kF64, p.o_elems(), 101, -1.0f, 1.0f);
  double* qkv = reinterpret_cast<double*>(qkv_b.data());
  const double* w = reinterpret_cast<const double*>(w_b.data());
  const int64_t C = p.C();
  std::vector<double> o(p.o_elems()), dqkv(p.qkv_elems(), std::nan(""));
  auto loss = [&]() {
    EXPECT_TRUE(causal_attention_forward_cpu(o.data(), nullptr, qkv, qkv + C, qkv + 2 * C, p.B,
                                             p.H, p.T, p.D, p.qkv_stride(), p.o_stride(),
                                             DType::kF64, scale)
                    .ok());
    double l = 0;
    const std::vector<bool> m = columns(p, p.o_stride(), 0);
    for (int64_t i = 0; i < p.o_elems(); ++i) l += m[i] ? w[i] * o[i] : 0.0;
    return l;
  };
  loss();
  ASSERT_TRUE(causal_attention_backward_cpu(dqkv.data(), dqkv.data() + C, dqkv.data() + 2 * C, w,
                                            qkv, qkv + C, qkv + 2 * C, o.data(), nullptr, p.B, p.H,
                                            p.T, p.D, p.qkv_stride(), p.o_stride(), DType::kF64,
                                            scale)
                  .ok());
  int checked = 0;
  for (int64_t i = 0; i < p.qkv_elems(); ++i) {
    if (i % p.qkv_stride() >= 3 * C) {
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
  EXPECT_EQ(checked, p.B * p.T * 3 * C);
}

TEST(AttentionCpuTest, RejectsBadArguments) {
  std::vector<float> a(64), b(64);
  EXPECT_EQ(causal_attention_forward_cpu(b.data(), nullptr, a.data(), a.data(), a.data(), 1, 1, 4,
                                         2, 1, 2, DType::kF32, 1.0f)
                .code(),
            Code::kInvalidArgument);  // qkv stride < heads * head_dim
  EXPECT_EQ(causal_attention_forward_cpu(a.data(), nullptr, a.data(), a.data(), a.data(), 1, 1, 4,
                                         2, 2, 2, DType::kF32, 1.0f)
                .code(),
            Code::kInvalidArgument);  // o overlaps q
  EXPECT_EQ(causal_attention_forward_cpu(b.data(), nullptr, a.data(), a.data(), a.data(), 1, 1, 4,
                                         2, 2, 2, DType::kI32, 1.0f)
                .code(),
            Code::kUnsupported);
  EXPECT_EQ(causal_attention_forward_cpu(nullptr, nullptr, a.data(), a.data(), a.data(), 1, 1, 4,
                                         2, 2, 2, DType::kF32, 1.0f)
                .code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(causal_attention_forward_cpu(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 1, 4, 2,
                                           2, 2, DType::kF32, 1.0f)
                  .ok());
  EXPECT_EQ(causal_attention_backward_cpu(a.data(), b.data(), b.data(), b.data(), a.data(),
                                          a.data(), a.data(), nullptr, nullptr, 1, 1, 4, 2, 2, 2,
                                          DType::kF32, 1.0f)
                .code(),
            Code::kInvalidArgument);  // dq overlaps q
}

// ---------------------------------------------------------------------------
// CUDA.

#if COLOSSAL_WITH_CUDA
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// Tolerances of the CUDA path against the exact result on the same rounded
// inputs (see expect_close). P and dS are rounded to the input type before
// their tensor-core products and every output is rounded once, so errors are a
// few ulps of the input type relative to the output's own scale: bfloat16 has
// 8 significant bits (ulp/2 = 2^-9 = 2e-3), float16 11 (2.4e-4).
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

void check_cuda(DType dtype, const Problem& p, uint32_t seed) {
  SCOPED_TRACE(p.label(dtype));
  const std::string what = p.label(dtype);
  const size_t es = dtype_size(dtype);
  const int64_t C = p.C();
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.D)));
  const auto qkv_h = random_bytes(dtype, p.qkv_elems(), seed, -2.0f, 2.0f);
  const auto do_h = random_bytes(dtype, p.o_elems(), seed + 1, -1.0f, 1.0f);

  // Reference: the CPU path in float64 on the same (rounded) values.
  const std::vector<double> qkv_d = to_doubles(dtype, qkv_h.data(), p.qkv_elems());
  const std::vector<double> do_d = to_doubles(dtype, do_h.data(), p.o_elems());
  std::vector<double> o_ref(p.o_elems(), 0.0), dqkv_ref(p.qkv_elems(), 0.0);
  std::vector<float> lse_ref(p.rows());
  ASSERT_TRUE(causal_attention_forward_cpu(o_ref.data(), lse_ref.data(), qkv_d.data(),
                                           qkv_d.data() + C, qkv_d.data() + 2 * C, p.B, p.H, p.T,
                                           p.D, p.qkv_stride(), p.o_stride(), DType::kF64, scale)
                  .ok());
  ASSERT_TRUE(causal_attention_backward_cpu(
                  dqkv_ref.data(), dqkv_ref.data() + C, dqkv_ref.data() + 2 * C, do_d.data(),
                  qkv_d.data(), qkv_d.data() + C, qkv_d.data() + 2 * C, nullptr, nullptr, p.B, p.H,
                  p.T, p.D, p.qkv_stride(), p.o_stride(), DType::kF64, scale)
                  .ok());

  DeviceBuffer qkv(qkv_h.size()), d_o(do_h.size()), o(p.o_elems() * es), dqkv(p.qkv_elems() * es),
      lse(p.rows() * sizeof(float)),
      ws(causal_attention_backward_workspace_bytes(p.B, p.H, p.T));
  ASSERT_TRUE(qkv.p && d_o.p && o.p && dqkv.p && lse.p && ws.p) << "cudaMalloc failed";
  CUDA_OK(cudaMemcpy(qkv.p, qkv_h.data(), qkv_h.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_o.p, do_h.data(), do_h.size(), cudaMemcpyHostToDevice));
  poison_nan(o);
  poison_nan(lse);
  poison_nan(dqkv);
  poison_nan(ws);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  KernelStatus s = causal_attention_forward_cuda(o.p, static_cast<float*>(lse.p), qkv.u8(),
                                                 qkv.u8() + C * es, qkv.u8() + 2 * C * es, p.B,
                                                 p.H, p.T, p.D, p.qkv_stride(), p.o_stride(),
                                                 dtype, scale, stream);
  ASSERT_TRUE(s.ok()) << s.message();
  s = causal_attention_backward_cuda(dqkv.p, dqkv.u8() + C * es, dqkv.u8() + 2 * C * es, d_o.p,
                                     qkv.u8(), qkv.u8() + C * es, qkv.u8() + 2 * C * es, o.p,
                                     static_cast<const float*>(lse.p), ws.p, p.B, p.H, p.T, p.D,
                                     p.qkv_stride(), p.o_stride(), dtype, scale, stream);
  ASSERT_TRUE(s.ok()) << s.message();
  CUDA_OK(cudaStreamSynchronize(stream));

  const std::vector<uint8_t> o_got = o.download(), dqkv_got = dqkv.download();
  const std::vector<uint8_t> lse_got = lse.download();
  const std::vector<bool> o_mask = columns(p, p.o_stride(), 0);
  expect_close(to_doubles(dtype, o_got.data(), p.o_elems()), o_ref, o_mask,
               cuda_tolerance(dtype, false), what + " o");
  EXPECT_TRUE(all_nan_outside(dtype, o_got, o_mask)) << what << ": o written in a stride gap";
  std::vector<double> lse_d(lse_ref.begin(), lse_ref.end());
  expect_close(to_doubles(DType::kF32, lse_got.data(), p.rows()), lse_d, all_of(p.rows()),
               {1e-4, 1e-4}, what + " lse");
  const std::vector<double> dqkv_d = to_doubles(dtype, dqkv_got.data(), p.qkv_elems());
  std::vector<bool> dqkv_mask = columns(p, p.qkv_stride(), 0);
  for (int64_t i = 0; i < p.qkv_elems(); ++i) dqkv_mask[i] = (i % p.qkv_stride()) < 3 * C;
  // dq and dk are measured against the scale of all three gradients: at T = 1
  // they are exactly 0 (P = 1), and what the kernel returns there is the
  // rounding of D = rowsum(dO * O) with O rounded to the 16-bit output.
  double grad_scale = 0;
  for (int64_t i = 0; i < p.qkv_elems(); ++i) {
    if (dqkv_mask[i]) grad_scale = std::max(grad_scale, std::fabs(dqkv_ref[i]));
  }
  const char* names[3] = {" dq", " dk", " dv"};
  for (int part = 0; part < 3; ++part) {
    expect_close(dqkv_d, dqkv_ref, columns(p, p.qkv_stride(), part * C),
                 cuda_tolerance(dtype, true), what + names[part], grad_scale);
  }
  EXPECT_TRUE(all_nan_outside(dtype, dqkv_got, dqkv_mask)) << what << ": dqkv gap written";

  // Gradients are overwritten, never accumulated, and deterministic: a second
  // backward into buffers full of 1.0 gives the same bytes.
  std::vector<uint8_t> ones(dqkv.bytes);
  (void)dispatch_float_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    for (size_t i = 0; i < ones.size() / es; ++i) {
      reinterpret_cast<T*>(ones.data())[i] = from_float<T>(1.0f);
    }
    return KernelStatus();
  });
  CUDA_OK(cudaMemcpy(dqkv.p, ones.data(), ones.size(), cudaMemcpyHostToDevice));
  s = causal_attention_backward_cuda(dqkv.p, dqkv.u8() + C * es, dqkv.u8() + 2 * C * es, d_o.p,
                                     qkv.u8(), qkv.u8() + C * es, qkv.u8() + 2 * C * es, o.p,
                                     static_cast<const float*>(lse.p), ws.p, p.B, p.H, p.T, p.D,
                                     p.qkv_stride(), p.o_stride(), dtype, scale, stream);
  ASSERT_TRUE(s.ok()) << s.message();
  CUDA_OK(cudaStreamSynchronize(stream));
  const std::vector<uint8_t> again = dqkv.download();
  for (int64_t i = 0; i < p.qkv_elems(); ++i) {
    if (!dqkv_mask[i]) continue;
    if (std::memcmp(again.data() + i * es, dqkv_got.data() + i * es, es) != 0) {
      ADD_FAILURE() << what << ": second backward differs at element " << i;
      break;
    }
  }
  CUDA_OK(cudaStreamDestroy(stream));
}
#endif

#if COLOSSAL_WITH_CUDA
// check_cuda for every problem in both 16-bit dtypes, fresh data for each.
template <size_t N>
void check_cuda_all(const Problem (&problems)[N], uint32_t seed) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const Problem& p : problems) {
      check_cuda(dtype, p, seed);
      seed += 2;
    }
  }
}
#endif

TEST(AttentionCudaTest, HeadDim64MatchesFloat64Reference) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const Problem problems[] = {{1, 1, 1, 64},       {2, 3, 17, 64},  {1, 2, 129, 64},
                              {1, 1, 1000, 64},    {3, 2, 64, 64},  {2, 2, 200, 64, 8},
                              {1, 12, 128, 64}};
  check_cuda_all(problems, 1000);
#endif
}

TEST(AttentionCudaTest, HeadDim128MatchesFloat64Reference) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const Problem problems[] = {{1, 1, 1, 128}, {2, 2, 33, 128}, {1, 1, 300, 128, 8},
                              {1, 2, 129, 128}};
  check_cuda_all(problems, 2000);
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
    return causal_attention_forward_cuda(o, lse, q, q, q, 1, 1, 8, d, qs, d, dtype, 0.1f, nullptr)
        .code();
  };
  uint8_t* o = b + (1 << 18);
  EXPECT_EQ(fwd(o, b, 64, DType::kF32, 64), Code::kUnsupported);
  EXPECT_EQ(fwd(o, b, 80, DType::kBF16, 80), Code::kUnsupported);
  EXPECT_EQ(fwd(o, b + 2, 64, DType::kBF16, 64), Code::kInvalidArgument);  // misaligned
  EXPECT_EQ(fwd(o, b, 64, DType::kBF16, 68), Code::kInvalidArgument);      // stride % 8
  EXPECT_EQ(fwd(b, b, 64, DType::kBF16, 64), Code::kInvalidArgument);      // o overlaps q
  EXPECT_EQ(fwd(nullptr, b, 64, DType::kBF16, 64), Code::kInvalidArgument);
  EXPECT_TRUE(causal_attention_forward_cuda(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 1, 8,
                                            64, 64, 64, DType::kBF16, 0.1f, nullptr)
                  .ok());
  EXPECT_EQ(causal_attention_backward_cuda(b, b, b, o, o, o, o, o, lse, b, 1, 1, 8, 64, 64, 64,
                                           DType::kBF16, 0.1f, nullptr)
                .code(),
            Code::kInvalidArgument);  // dq overlaps the workspace
#endif
}

}  // namespace
}  // namespace colossal::kernels::attention
