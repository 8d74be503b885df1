// kernels/moe: the CPU path against an independent long double reference on
// fresh random data (outputs poisoned with NaN before every call), the route
// backward against central differences of the route forward in float64, the
// slot sort by hand, and the CUDA path against the reference with per-dtype
// tolerances derived below.
#include "kernels/moe/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "tests/util/gpu_test.h"
#include "tests/util/host_buffer.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::moe {
namespace {

using Buf = testing::HostBuffer;
using LD = long double;

constexpr DType kCpuTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};

struct Case {
  int64_t tokens, experts, top_k, cols;
  bool normalize;
};

// Mixtral (8, top-2), Qwen-MoE-like (60, top-4), one expert, k = E, DeepSeek's
// k = 8; columns not a multiple of any vector width.
const Case kCases[] = {
    {37, 8, 2, 64, true},  {19, 60, 4, 40, false}, {5, 1, 1, 9, true},
    {23, 3, 3, 17, true},  {11, 256, 8, 128, true}, {64, 8, 2, 256, false},
};

std::string label(const Case& c, DType dtype) {
  return std::string(dtype_name(dtype)) + " N" + std::to_string(c.tokens) + " E" +
         std::to_string(c.experts) + " k" + std::to_string(c.top_k) + " C" + std::to_string(c.cols);
}

DType weight_type(DType dtype) { return dtype == DType::kF64 ? DType::kF64 : DType::kF32; }

void poison_nan(Buf* b) { std::memset(b->data(), 0xFF, b->bytes()); }

// One stored output's relative rounding.
double round_tol(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 1.2e-7;
    case DType::kF16: return 1.0e-3;
    case DType::kBF16: return 8.0e-3;
    default: return 2.3e-16;  // float64: the kernel's rounding and the comparison's
  }
}
double abs_floor(DType dtype) { return dtype == DType::kF16 ? 6.0e-8 : 1.0e-30; }

// The routing of token t, in long double: the experts by (logit desc, index
// asc), the softmax, and the chosen weights.
struct RefRoute {
  std::vector<int32_t> expert;
  std::vector<LD> p;  // softmax over all E
  std::vector<LD> w;  // the k weights
  LD S = 0;           // sum of the chosen p
};

RefRoute ref_route(const Buf& logits, int64_t t, const Case& c) {
  RefRoute r;
  std::vector<int32_t> order(c.experts);
  std::iota(order.begin(), order.end(), 0);
  auto l = [&](int64_t e) { return static_cast<LD>(logits.get(t * c.experts + e)); };
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l(a) > l(b); });
  LD m = l(0), d = 0;
  for (int64_t e = 1; e < c.experts; ++e) m = std::max(m, l(e));
  for (int64_t e = 0; e < c.experts; ++e) d += std::exp(l(e) - m);
  for (int64_t e = 0; e < c.experts; ++e) r.p.push_back(std::exp(l(e) - m) / d);
  for (int64_t i = 0; i < c.top_k; ++i) {
    r.expert.push_back(order[i]);
    r.S += r.p[order[i]];
  }
  for (int64_t i = 0; i < c.top_k; ++i) r.w.push_back(c.normalize ? r.p[r.expert[i]] / r.S : r.p[r.expert[i]]);
  return r;
}

// dlogits of token t for upstream dweights, and the scale its rounding errors
// are measured against: p_e (D + |sum_i dp_i p_i|), D the largest size of the
// terms of a dp_i: max_i (|dw_i| + |dot|) / S with normalize (dp_i = (dw_i -
// dot) / S may cancel to far below its terms), max_i |dw_i| without.
void ref_route_backward(const RefRoute& r, const Buf& dw, int64_t t, const Case& c, std::vector<LD>* dl,
                        std::vector<LD>* scale) {
  std::vector<LD> dp(c.top_k);
  LD dot = 0, pdp = 0, dpmax = 0;
  for (int64_t i = 0; i < c.top_k; ++i) dot += dw.get(t * c.top_k + i) * r.w[i];
  for (int64_t i = 0; i < c.top_k; ++i) {
    const LD g = dw.get(t * c.top_k + i);
    dp[i] = c.normalize ? (g - dot) / r.S : g;
    pdp += dp[i] * r.p[r.expert[i]];
    dpmax = std::max(dpmax, c.normalize ? (std::fabs(g) + std::fabs(dot)) / r.S : std::fabs(g));
  }
  dl->assign(c.experts, 0);
  scale->assign(c.experts, 0);
  for (int64_t e = 0; e < c.experts; ++e) {
    LD g = 0;
    for (int64_t i = 0; i < c.top_k; ++i) {
      if (r.expert[i] == e) g = dp[i];
    }
    (*dl)[e] = r.p[e] * (g - pdp);
    (*scale)[e] = r.p[e] * (dpmax + std::fabs(pdp));
  }
}

// Slots for `experts` by the reference rule (stable by pair within an expert).
std::vector<int32_t> ref_slots(const std::vector<int32_t>& experts, int64_t E) {
  std::vector<int32_t> slots(experts.size());
  int32_t next = 0;
  for (int64_t e = 0; e < E; ++e) {
    for (size_t p = 0; p < experts.size(); ++p) {
      if (experts[p] == e) slots[p] = next++;
    }
  }
  return slots;
}

TEST(MoeTest, ExpertSlotsSortStablyByExpert) {
  const std::vector<int32_t> experts = {2, 0, 0, 2, 1, 0};  // 3 tokens, top-2, E 3
  std::vector<int32_t> slots(6, -7);
  std::vector<int64_t> offsets(4, -7);
  ASSERT_TRUE(expert_slots(slots.data(), offsets.data(), experts.data(), 3, 3, 2).ok());
  EXPECT_EQ(slots, (std::vector<int32_t>{4, 0, 1, 5, 3, 2}));
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 3, 4, 6}));
  // An expert that gets no pair has an empty range.
  const std::vector<int32_t> skip = {0, 2, 2, 0};
  ASSERT_TRUE(expert_slots(slots.data(), offsets.data(), skip.data(), 2, 3, 2).ok());
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 2, 2, 4}));
  // An index out of range (the router saw NaN) is an error, not a write out of bounds.
  for (int32_t bad : {-1, 3}) {
    const std::vector<int32_t> wrong = {0, bad};
    const KernelStatus s = expert_slots(slots.data(), offsets.data(), wrong.data(), 1, 3, 2);
    EXPECT_EQ(s.code(), KernelStatus::Code::kInvalidArgument);
    EXPECT_NE(std::string(s.message()).find("outside"), std::string::npos);
  }
}

TEST(MoeTest, RouteForwardMatchesReference) {
  uint32_t seed = 100;
  for (const Case& c : kCases) {
    for (DType dtype : kCpuTypes) {
      SCOPED_TRACE(label(c, dtype));
      const Buf logits = Buf::random(dtype, c.tokens * c.experts, ++seed, -4.0f, 4.0f);
      Buf w(weight_type(dtype), c.tokens * c.top_k);
      std::vector<int32_t> ex(c.tokens * c.top_k, -7);
      poison_nan(&w);
      ASSERT_TRUE(route_forward_cpu(w.data(), ex.data(), logits.data(), c.tokens, c.experts, c.top_k,
                                    c.normalize, dtype).ok());
      const double tol = dtype == DType::kF64 ? 1e-14 : 1.2e-7;
      for (int64_t t = 0; t < c.tokens; ++t) {
        const RefRoute r = ref_route(logits, t, c);
        for (int64_t i = 0; i < c.top_k; ++i) {
          // Random 16-bit logits may tie: equal values give the lower index first either way.
          ASSERT_EQ(ex[t * c.top_k + i], r.expert[i]) << "token " << t << " pick " << i;
          EXPECT_NEAR(w.get(t * c.top_k + i), static_cast<double>(r.w[i]), tol * static_cast<double>(r.w[i]));
        }
      }
    }
  }
}

// L = sum_i u_i w_i(logits) in float64; route_backward's dlogits against
// central differences (h = 1e-5: truncation ~h^2 |L'''| ~ 1e-10, rounding
// ~1e-16 / h ~ 1e-11), with logits spaced so no step changes the choice.
TEST(MoeTest, RouteBackwardIsTheGradient) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(label(c, DType::kF64));
    Buf logits(DType::kF64, c.tokens * c.experts);
    std::vector<int32_t> perm(c.experts);
    for (int64_t t = 0; t < c.tokens; ++t) {
      std::iota(perm.begin(), perm.end(), 0);
      const std::vector<float> r = testing::random_floats(c.experts, 300 + t);
      std::sort(perm.begin(), perm.end(), [&](int a, int b) { return r[a] < r[b]; });
      // Distinct values 0.05 apart in a random order, plus a small jitter.
      for (int64_t e = 0; e < c.experts; ++e) logits.set(t * c.experts + e, 0.05 * perm[e] + 0.01 * r[e] - 1.0);
    }
    const Buf u = Buf::random(DType::kF64, c.tokens * c.top_k, 7);
    Buf dl(DType::kF64, c.tokens * c.experts);
    Buf w(DType::kF64, c.tokens * c.top_k);
    std::vector<int32_t> ex(c.tokens * c.top_k);
    ASSERT_TRUE(route_forward_cpu(w.data(), ex.data(), logits.data(), c.tokens, c.experts, c.top_k, c.normalize,
                                  DType::kF64).ok());
    ASSERT_TRUE(route_backward_cpu(dl.data(), u.data(), logits.data(), ex.data(), c.tokens, c.experts, c.top_k,
                                   c.normalize, DType::kF64).ok());
    auto loss = [&](const Buf& l) {
      Buf w2(DType::kF64, c.tokens * c.top_k);
      std::vector<int32_t> ex2(c.tokens * c.top_k);
      EXPECT_TRUE(route_forward_cpu(w2.data(), ex2.data(), l.data(), c.tokens, c.experts, c.top_k, c.normalize,
                                    DType::kF64).ok());
      EXPECT_EQ(ex2, ex);
      double s = 0;
      for (int64_t i = 0; i < c.tokens * c.top_k; ++i) s += u.get(i) * w2.get(i);
      return s;
    };
    const double h = 1e-5;
    for (int64_t t = 0; t < std::min<int64_t>(c.tokens, 4); ++t) {
      for (int64_t e = 0; e < c.experts; ++e) {
        Buf lp = logits, lm = logits;
        const int64_t j = t * c.experts + e;
        lp.set(j, logits.get(j) + h);
        lm.set(j, logits.get(j) - h);
        EXPECT_NEAR(dl.get(j), (loss(lp) - loss(lm)) / (2 * h), 1e-8) << "token " << t << " expert " << e;
      }
    }
  }
}

TEST(MoeTest, RouteBackwardMatchesReference) {
  uint32_t seed = 400;
  for (const Case& c : kCases) {
    for (DType dtype : kCpuTypes) {
      SCOPED_TRACE(label(c, dtype));
      const Buf logits = Buf::random(dtype, c.tokens * c.experts, ++seed, -4.0f, 4.0f);
      const Buf dw = Buf::random(weight_type(dtype), c.tokens * c.top_k, ++seed);
      Buf w(weight_type(dtype), c.tokens * c.top_k), dl(dtype, c.tokens * c.experts);
      std::vector<int32_t> ex(c.tokens * c.top_k);
      ASSERT_TRUE(route_forward_cpu(w.data(), ex.data(), logits.data(), c.tokens, c.experts, c.top_k,
                                    c.normalize, dtype).ok());
      poison_nan(&dl);
      ASSERT_TRUE(route_backward_cpu(dl.data(), dw.data(), logits.data(), ex.data(), c.tokens, c.experts,
                                     c.top_k, c.normalize, dtype).ok());
      std::vector<LD> ref, scale;
      for (int64_t t = 0; t < c.tokens; ++t) {
        ref_route_backward(ref_route(logits, t, c), dw, t, c, &ref, &scale);
        for (int64_t e = 0; e < c.experts; ++e) {
          // Double math: a few double ulps of the scale, then one rounding.
          const double tol = 1e-14 * static_cast<double>(scale[e]) +
                             round_tol(dtype) * std::fabs(static_cast<double>(ref[e])) + abs_floor(dtype);
          EXPECT_NEAR(dl.get(t * c.experts + e), static_cast<double>(ref[e]), tol) << t << " " << e;
        }
      }
    }
  }
}

// The rows of every case, routed by the CPU: experts, slots, weights.
struct Routed {
  std::vector<int32_t> experts, slots;
  Buf weights;
};

Routed route(const Case& c, DType dtype, uint32_t seed) {
  Routed r;
  const Buf logits = Buf::random(dtype, c.tokens * c.experts, seed, -4.0f, 4.0f);
  r.experts.resize(c.tokens * c.top_k);
  r.weights = Buf(weight_type(dtype), c.tokens * c.top_k);
  EXPECT_TRUE(route_forward_cpu(r.weights.data(), r.experts.data(), logits.data(), c.tokens, c.experts, c.top_k,
                                c.normalize, dtype).ok());
  r.slots.resize(c.tokens * c.top_k);
  std::vector<int64_t> offsets(c.experts + 1);
  EXPECT_TRUE(expert_slots(r.slots.data(), offsets.data(), r.experts.data(), c.tokens, c.experts, c.top_k).ok());
  EXPECT_EQ(r.slots, ref_slots(r.experts, c.experts));
  return r;
}

TEST(MoeTest, DispatchCombineAndBackwardMatchReference) {
  uint32_t seed = 700;
  for (const Case& c : kCases) {
    for (DType dtype : kCpuTypes) {
      SCOPED_TRACE(label(c, dtype));
      const Routed r = route(c, dtype, ++seed);
      const int64_t N = c.tokens, k = c.top_k, C = c.cols;
      const Buf x = Buf::random(dtype, N * C, ++seed), res = Buf::random(dtype, N * C, ++seed);
      const Buf ys = Buf::random(dtype, N * k * C, ++seed), dout = Buf::random(dtype, N * C, ++seed);
      Buf rows(dtype, N * k * C), out(dtype, N * C), sum(dtype, N * C), drows(dtype, N * k * C);
      Buf dw(weight_type(dtype), N * k);
      for (Buf* b : {&rows, &out, &sum, &drows, &dw}) poison_nan(b);
      ASSERT_TRUE(dispatch_cpu(rows.data(), x.data(), r.slots.data(), N, k, C, dtype).ok());
      ASSERT_TRUE(combine_cpu(out.data(), ys.data(), r.slots.data(), r.weights.data(), res.data(), N, k, C, dtype).ok());
      ASSERT_TRUE(combine_cpu(sum.data(), ys.data(), r.slots.data(), nullptr, nullptr, N, k, C, dtype).ok());
      ASSERT_TRUE(combine_backward_cpu(drows.data(), dw.data(), dout.data(), ys.data(), r.slots.data(),
                                       r.weights.data(), N, k, C, dtype).ok());
      const double f64 = dtype == DType::kF64 ? 1e-15 : 0.0;  // double sums, before the rounding
      for (int64_t t = 0; t < N; ++t) {
        for (int64_t i = 0; i < k; ++i) {
          const int64_t s = r.slots[t * k + i];
          const LD w = r.weights.get(t * k + i);
          LD dot = 0, dot_abs = 0;
          for (int64_t j = 0; j < C; ++j) {
            ASSERT_EQ(rows.get(s * C + j), x.get(t * C + j));  // a copy: exact
            const LD d = w * dout.get(t * C + j);
            EXPECT_NEAR(drows.get(s * C + j), static_cast<double>(d), round_tol(dtype) * std::fabs(static_cast<double>(d)) + abs_floor(dtype));
            dot += static_cast<LD>(dout.get(t * C + j)) * ys.get(s * C + j);
            dot_abs += std::fabs(static_cast<LD>(dout.get(t * C + j)) * ys.get(s * C + j));
          }
          // float32 (or float64) weights: one rounding of the double dot product.
          EXPECT_NEAR(dw.get(t * k + i), static_cast<double>(dot),
                      (dtype == DType::kF64 ? 1e-15 : 6e-8) * static_cast<double>(dot_abs) + 1e-30);
        }
        for (int64_t j = 0; j < C; ++j) {
          LD o = res.get(t * C + j), o_abs = std::fabs(o), s = 0, s_abs = 0;
          for (int64_t i = 0; i < k; ++i) {
            const LD y = ys.get(int64_t{r.slots[t * k + i]} * C + j);
            o += static_cast<LD>(r.weights.get(t * k + i)) * y;
            o_abs += std::fabs(static_cast<LD>(r.weights.get(t * k + i)) * y);
            s += y;
            s_abs += std::fabs(y);
          }
          EXPECT_NEAR(out.get(t * C + j), static_cast<double>(o),
                      round_tol(dtype) * std::fabs(static_cast<double>(o)) + f64 * static_cast<double>(o_abs) + abs_floor(dtype));
          EXPECT_NEAR(sum.get(t * C + j), static_cast<double>(s),
                      round_tol(dtype) * std::fabs(static_cast<double>(s)) + f64 * static_cast<double>(s_abs) + abs_floor(dtype));
        }
      }
    }
  }
}

TEST(MoeTest, RejectsBadSizesAndAcceptsNoTokens) {
  float w[16];
  int32_t ex[16], slots[16];
  int64_t offsets[9];
  const float logits[8] = {};
  using Code = KernelStatus::Code;
  EXPECT_EQ(route_forward_cpu(w, ex, logits, 1, 8, 0, true, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(route_forward_cpu(w, ex, logits, 1, 8, 9, true, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(route_forward_cpu(w, ex, logits, 1, 2, 3, true, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(route_forward_cpu(w, ex, logits, 1, 1025, 2, true, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(route_forward_cpu(w, ex, nullptr, 1, 8, 2, true, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(route_forward_cpu(w, ex, logits, -1, 8, 2, true, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(route_forward_cpu(w, ex, logits, 1, 8, 2, true, DType::kI32).code(), Code::kUnsupported);
  EXPECT_EQ(dispatch_cpu(nullptr, logits, slots, 1, 2, 4, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(combine_cpu(w, logits, slots, nullptr, nullptr, 1, 0, 4, DType::kF32).code(), Code::kInvalidArgument);
  EXPECT_EQ(combine_backward_cpu(w, nullptr, logits, logits, slots, w, 1, 2, 4, DType::kF32).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(expert_slots(slots, nullptr, ex, 1, 8, 2).code(), Code::kInvalidArgument);
  // No tokens (a micro-batch an expert parallel rank receives nothing of): null buffers are fine.
  EXPECT_TRUE(route_forward_cpu(nullptr, nullptr, nullptr, 0, 8, 2, true, DType::kF32).ok());
  EXPECT_TRUE(route_backward_cpu(nullptr, nullptr, nullptr, nullptr, 0, 8, 2, true, DType::kF32).ok());
  EXPECT_TRUE(dispatch_cpu(nullptr, nullptr, nullptr, 0, 2, 4, DType::kF32).ok());
  EXPECT_TRUE(combine_cpu(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 2, 4, DType::kF32).ok());
  EXPECT_TRUE(combine_backward_cpu(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 2, 4, DType::kF32).ok());
  ASSERT_TRUE(expert_slots(nullptr, offsets, nullptr, 0, 8, 2).ok());
  for (int64_t e = 0; e <= 8; ++e) EXPECT_EQ(offsets[e], 0);
}

#if COLOSSAL_WITH_CUDA
constexpr DType kCudaTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DevicePtr = std::unique_ptr<uint8_t, CudaFree>;

// A device copy of `bytes` at `src`, `offset` bytes into a NaN-poisoned allocation
// (an offset not a multiple of 16 takes the scalar path).
DevicePtr to_device(const void* src, size_t bytes, size_t offset, void** at) {
  void* p = nullptr;
  const size_t total = bytes + 2 * offset + 64;
  if (cudaMalloc(&p, total) != cudaSuccess) return nullptr;
  DevicePtr owner(static_cast<uint8_t*>(p));
  std::vector<uint8_t> init(total, 0xFF);
  if (src != nullptr) std::memcpy(init.data() + offset, src, bytes);
  if (cudaMemcpy(p, init.data(), total, cudaMemcpyHostToDevice) != cudaSuccess) return nullptr;
  *at = owner.get() + offset;
  return owner;
}
DevicePtr to_device(const Buf& b, size_t offset, void** at) { return to_device(b.data(), b.bytes(), offset, at); }

void from_device(void* host, size_t bytes, const void* at) {
  ASSERT_EQ(cudaMemcpy(host, at, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
}
#endif

// The CUDA path against the long double reference. Its math is float32: the
// softmax's sum of E exponentials (expf <= 2 ulp each) and the k-term sums
// carry relative error below eps = (E + 2k + 8) 2^-23, so route outputs are
// within eps of the reference (the dlogits within 4 eps of their scale, see
// ref_route_backward) before their one rounding. combine's k + 1 float FMAs:
// (k + 2) 2^-24 of the sum of |terms|; the dweights dot products: a float FMA
// chain of C / 128 terms per thread and a 7-level tree, (C / 128 + 8) 2^-24 of
// the sum of |terms|.
TEST(MoeCudaTest, MatchesReference) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 900;
  std::vector<Case> cases(std::begin(kCases), std::end(kCases));
  cases.push_back({4096, 8, 2, 4096, true});  // Mixtral-width rows
  for (const Case& c : cases) {
    for (DType dtype : kCudaTypes) {
      for (size_t offset : {size_t{0}, dtype_size(dtype)}) {
        SCOPED_TRACE(label(c, dtype) + " offset " + std::to_string(offset));
        const int64_t N = c.tokens, E = c.experts, k = c.top_k, C = c.cols;
        const Buf logits = Buf::random(dtype, N * E, ++seed, -4.0f, 4.0f);
        const Buf dw_in = Buf::random(DType::kF32, N * k, ++seed);
        const Buf x = Buf::random(dtype, N * C, ++seed), res = Buf::random(dtype, N * C, ++seed);
        const Buf ys = Buf::random(dtype, N * k * C, ++seed), dout = Buf::random(dtype, N * C, ++seed);
        Buf w(DType::kF32, N * k), dl(dtype, N * E), rows(dtype, N * k * C), out(dtype, N * C);
        Buf drows(dtype, N * k * C), dw(DType::kF32, N * k);
        std::vector<int32_t> ex(N * k);
        void *d_logits, *d_dwin, *d_x, *d_res, *d_ys, *d_dout, *d_w, *d_dl, *d_rows, *d_out, *d_drows, *d_dw,
            *d_ex, *d_slots;
        const size_t o = offset;
        DevicePtr p1 = to_device(logits, o, &d_logits), p2 = to_device(dw_in, 0, &d_dwin),
                  p3 = to_device(x, o, &d_x), p4 = to_device(res, o, &d_res), p5 = to_device(ys, o, &d_ys),
                  p6 = to_device(dout, o, &d_dout), p7 = to_device(w, 0, &d_w), p8 = to_device(dl, o, &d_dl),
                  p9 = to_device(rows, o, &d_rows), p10 = to_device(out, o, &d_out),
                  p11 = to_device(drows, o, &d_drows), p12 = to_device(dw, 0, &d_dw),
                  p13 = to_device(nullptr, N * k * 4, 0, &d_ex), p14 = to_device(nullptr, N * k * 4, 0, &d_slots);
        ASSERT_TRUE(p1 && p2 && p3 && p4 && p5 && p6 && p7 && p8 && p9 && p10 && p11 && p12 && p13 && p14);
        auto* dex = static_cast<int32_t*>(d_ex);
        auto* dsl = static_cast<int32_t*>(d_slots);
        ASSERT_TRUE(route_forward_cuda(d_w, dex, d_logits, N, E, k, c.normalize, dtype, nullptr).ok());
        from_device(ex.data(), N * k * 4, d_ex);
        std::vector<int32_t> slots(N * k);
        std::vector<int64_t> offsets(E + 1);
        ASSERT_TRUE(expert_slots(slots.data(), offsets.data(), ex.data(), N, E, k).ok());
        ASSERT_EQ(cudaMemcpy(d_slots, slots.data(), N * k * 4, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_TRUE(route_backward_cuda(d_dl, d_dwin, d_logits, dex, N, E, k, c.normalize, dtype, nullptr).ok());
        ASSERT_TRUE(dispatch_cuda(d_rows, d_x, dsl, N, k, C, dtype, nullptr).ok());
        ASSERT_TRUE(combine_cuda(d_out, d_ys, dsl, d_w, d_res, N, k, C, dtype, nullptr).ok());
        ASSERT_TRUE(combine_backward_cuda(d_drows, d_dw, d_dout, d_ys, dsl, d_w, N, k, C, dtype, nullptr).ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        from_device(w.data(), w.bytes(), d_w);
        from_device(dl.data(), dl.bytes(), d_dl);
        from_device(rows.data(), rows.bytes(), d_rows);
        from_device(out.data(), out.bytes(), d_out);
        from_device(drows.data(), drows.bytes(), d_drows);
        from_device(dw.data(), dw.bytes(), d_dw);
        const double eps = (E + 2 * k + 8) * 1.2e-7, rt = round_tol(dtype), fl = abs_floor(dtype);
        std::vector<LD> ref, scale;
        for (int64_t t = 0; t < N; ++t) {
          const RefRoute r = ref_route(logits, t, c);
          ref_route_backward(r, dw_in, t, c, &ref, &scale);
          for (int64_t i = 0; i < k; ++i) {
            ASSERT_EQ(ex[t * k + i], r.expert[i]) << "token " << t;
            EXPECT_NEAR(w.get(t * k + i), static_cast<double>(r.w[i]), eps * static_cast<double>(r.w[i]));
          }
          for (int64_t e = 0; e < E; ++e) {
            EXPECT_NEAR(dl.get(t * E + e), static_cast<double>(ref[e]),
                        4 * eps * static_cast<double>(scale[e]) + rt * std::fabs(static_cast<double>(ref[e])) + fl);
          }
          for (int64_t i = 0; i < k; ++i) {
            const int64_t s = slots[t * k + i];
            LD dot = 0, dot_abs = 0;
            for (int64_t j = 0; j < C; ++j) {
              ASSERT_EQ(rows.get(s * C + j), x.get(t * C + j));
              const double d = w.get(t * k + i) * dout.get(t * C + j);
              EXPECT_NEAR(drows.get(s * C + j), d, (rt + 6e-8) * std::fabs(d) + fl);
              dot += static_cast<LD>(dout.get(t * C + j)) * ys.get(s * C + j);
              dot_abs += std::fabs(static_cast<LD>(dout.get(t * C + j)) * ys.get(s * C + j));
            }
            EXPECT_NEAR(dw.get(t * k + i), static_cast<double>(dot), (C / 128.0 + 8) * 6e-8 * static_cast<double>(dot_abs) + 1e-30);
          }
          for (int64_t j = 0; j < C; ++j) {
            LD o_ref = res.get(t * C + j), o_abs = std::fabs(o_ref);
            for (int64_t i = 0; i < k; ++i) {
              const LD term = static_cast<LD>(w.get(t * k + i)) * ys.get(int64_t{slots[t * k + i]} * C + j);
              o_ref += term;
              o_abs += std::fabs(term);
            }
            EXPECT_NEAR(out.get(t * C + j), static_cast<double>(o_ref),
                        rt * std::fabs(static_cast<double>(o_ref)) + (k + 2) * 6e-8 * static_cast<double>(o_abs) + fl);
          }
        }
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
#endif
}

}  // namespace
}  // namespace colossal::kernels::moe
