// Split masters (split_master.h): the halves hold every float32 exactly and
// hi is the nearest bfloat16; Adam on the halves is Adam on the float32 master
// bit for bit (every CPU path; the CUDA kernel and conversions against the CPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/adam/adam.h"
#include "kernels/adam/split_master.h"
#include "kernels/common/half.h"
#include "tests/util/gpu_test.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::adam {
namespace {

constexpr DType kGradTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool is_nan_bits(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

// Bit patterns: random ones of every exponent, and the edges.
std::vector<uint32_t> test_patterns() {
  std::vector<uint32_t> out = {0x00000000u, 0x80000000u, 0x00000001u, 0x80008000u, 0x00008000u,
                               0x00018000u, 0x3f808000u, 0x3f818000u, 0xbf808000u, 0x3f807fffu,
                               0x7f7fffffu, 0xff7fffffu, 0x7f7f7fffu, 0x7f7f8000u, 0x7f800000u,
                               0xff800000u, 0x7f800001u, 0x7fc00000u, 0xffc00000u, 0x7fff8000u,
                               0x7fffffffu, 0xffffffffu, 0x807fffffu, 0x3fffffffu};
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) out.push_back(static_cast<uint32_t>(rng()));
  for (int i = 0; i < 20000; ++i) out.push_back((static_cast<uint32_t>(rng()) & 0xffff0000u) | 0x8000u);
  return out;
}

TEST(SplitMasterTest, HalvesHoldEveryFloatAndHiIsTheNearestBfloat16) {
  for (uint32_t u : test_patterns()) {
    uint16_t hi;
    int16_t lo;
    split_master_bits(u, &hi, &lo);
    const uint32_t back = join_master_bits(hi, lo);
    if (is_nan_bits(u)) {
      EXPECT_TRUE(is_nan_bits(back)) << std::hex << u;
      EXPECT_TRUE(std::isnan(bfloat16_to_float(BFloat16{hi}))) << std::hex << u;
      continue;
    }
    ASSERT_EQ(back, u) << std::hex << u;
    // hi is round-to-nearest-even's bfloat16 except at exact ties, which go
    // away from zero (one bfloat16 step further than even, when even is below).
    const uint16_t rne = float_to_bfloat16(float_of(u)).bits;
    if ((u & 0xffffu) == 0x8000u) {
      EXPECT_EQ(hi, static_cast<uint16_t>((u >> 16) + 1)) << std::hex << u;
    } else {
      EXPECT_EQ(hi, rne) << std::hex << u;
    }
  }
}

// The floats of the bit patterns.
std::vector<float> floats_of(const std::vector<uint32_t>& pats) {
  std::vector<float> out(pats.size());
  for (size_t i = 0; i < pats.size(); ++i) out[i] = float_of(pats[i]);
  return out;
}

// An array conversion's results: hi and lo as split_master_bits makes them,
// and `back` (joined again) the pattern itself, NaNs aside.
void expect_halves_of(const std::vector<uint32_t>& pats, const std::vector<uint16_t>& hi,
                      const std::vector<int16_t>& lo, const std::vector<float>& back) {
  for (size_t i = 0; i < pats.size(); ++i) {
    uint16_t h;
    int16_t l;
    split_master_bits(pats[i], &h, &l);
    ASSERT_EQ(hi[i], h) << i;
    ASSERT_EQ(lo[i], l) << i;
    if (!is_nan_bits(pats[i])) {
      ASSERT_EQ(bits_of(back[i]), pats[i]) << i;
    }
  }
}

TEST(SplitMasterTest, ArraysRoundTripOnTheCpu) {
  const std::vector<uint32_t> pats = test_patterns();
  const int64_t n = static_cast<int64_t>(pats.size());
  std::vector<float> master = floats_of(pats), back(n);
  std::vector<uint16_t> hi(n);
  std::vector<int16_t> lo(n);
  testing::poison(hi.data(), n * 2);
  testing::poison(lo.data(), n * 2);
  testing::poison(back.data(), n * 4);
  ASSERT_TRUE(split_master_cpu(master.data(), hi.data(), lo.data(), n).ok());
  ASSERT_TRUE(join_master_cpu(hi.data(), lo.data(), back.data(), n).ok());
  ASSERT_NO_FATAL_FAILURE(expect_halves_of(pats, hi, lo, back));
  EXPECT_FALSE(split_master_cpu(master.data(), hi.data(), lo.data(), -1).ok());
  EXPECT_FALSE(join_master_cpu(nullptr, lo.data(), back.data(), 4).ok());
  EXPECT_TRUE(join_master_cpu(nullptr, nullptr, nullptr, 0).ok());
}

// One case of the float32-master step and the split step on the same data.
struct Case {
  int64_t n;
  int64_t off;  // elements the split buffers start past their allocation (misalignment)
  std::vector<float> p, m, v, sm, sv;
  std::vector<uint8_t> g;
  std::vector<uint16_t> copy, hi;
  std::vector<int16_t> lo;

  Case(int64_t n_, int64_t off_, DType gt, uint32_t seed) : n(n_), off(off_) {
    p = testing::random_floats(n, seed, -1.0f, 1.0f);
    m = testing::random_floats(n, seed + 1, -0.1f, 0.1f);
    v = testing::random_floats(n, seed + 2, 0.0f, 0.01f);
    // Some masters on exact ties, where hi and the even copy part ways.
    for (int64_t i = 0; i < n; i += 7) p[i] = float_of((bits_of(p[i]) & 0xffff0000u) | 0x8000u);
    sm.assign(off + n, 0.0f);
    sv.assign(off + n, 0.0f);
    std::copy(m.begin(), m.end(), sm.begin() + off);
    std::copy(v.begin(), v.end(), sv.begin() + off);
    hi.assign(off + n, 0);
    lo.assign(off + n, 0);
    copy.assign(n, 0);
    EXPECT_TRUE(split_master_cpu(p.data(), hi.data() + off, lo.data() + off, n).ok());
    g.resize(n * dtype_size(gt));
  }
  void fill_grads(DType gt, uint32_t seed, float scale) {
    const std::vector<float> f = testing::random_floats(n, seed, -scale, scale);
    for (int64_t i = 0; i < n; ++i) {
      if (gt == DType::kF32) reinterpret_cast<float*>(g.data())[i] = f[i];
      if (gt == DType::kF16) reinterpret_cast<Half*>(g.data())[i] = float_to_half(f[i]);
      if (gt == DType::kBF16) reinterpret_cast<BFloat16*>(g.data())[i] = float_to_bfloat16(f[i]);
    }
  }
  // The split state equals the float32 one: joined master, moments, and hi
  // the copy but at ties.
  void expect_same(const std::string& what) const {
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(join_master_bits(hi[off + i], lo[off + i]), bits_of(p[i])) << what << " element " << i;
      ASSERT_EQ(bits_of(sm[off + i]), bits_of(m[i])) << what << " m " << i;
      ASSERT_EQ(bits_of(sv[off + i]), bits_of(v[i])) << what << " v " << i;
      if ((bits_of(p[i]) & 0xffffu) == 0x8000u) continue;  // a tie: hi is away from zero
      ASSERT_EQ(hi[off + i], copy[i]) << what << " hi " << i;
    }
  }
};

AdamOptions options_for(int step, bool adamw, float grad_scale) {
  AdamOptions o;
  o.step = step;
  o.lr = 3e-3f;
  o.weight_decay = 0.1f;
  o.adamw_mode = adamw;
  o.grad_scale = grad_scale;
  return o;
}

TEST(AdamSplitCpuTest, EveryIsaIsTheFloatMasterStepBitForBit) {
  uint32_t seed = 100;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!cpu_isa_available(isa)) continue;
    AdamCpuOptions cpu;
    cpu.isa = isa;
    for (DType gt : kGradTypes) {
      for (bool adamw : {true, false}) {
        for (int64_t n : {1, 15, 17, 1000, 40000, 100003}) {
          for (int64_t off : {0, 3}) {
            Case c(n, off, gt, seed += 10);
            for (int step = 1; step <= 3; ++step) {
              const AdamOptions o = options_for(step, adamw, step == 2 ? 4.0f : 1.0f);
              c.fill_grads(gt, seed + step, o.grad_scale);
              ASSERT_TRUE(adam_step_cpu(c.p.data(), c.m.data(), c.v.data(), c.copy.data(), c.g.data(),
                                        nullptr, n, gt, DType::kBF16, o, cpu)
                              .ok());
              ASSERT_TRUE(adam_step_split_cpu(c.hi.data() + off, c.lo.data() + off, c.sm.data() + off,
                                              c.sv.data() + off, c.g.data(), nullptr, n, gt, o, cpu)
                              .ok());
              c.expect_same(std::string(cpu_isa_name(isa)) + " " + dtype_name(gt) + " n " +
                            std::to_string(n) + " off " + std::to_string(off) + " step " +
                            std::to_string(step));
              if (::testing::Test::HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }
}

// Masters that are NaN (quiet and signalling, either sign) or inf come out of
// the step with the same halves on every ISA: the SIMD splits truncate lo as
// the scalar one does, whatever the lane holds.
TEST(AdamSplitCpuTest, NonFiniteMastersGiveTheSameHalvesOnEveryIsa) {
  const int64_t n = 64;
  Case base(n, 0, DType::kF32, 41);
  const uint32_t specials[] = {0x7f800001u, 0xff800001u, 0x7fc00000u, 0xffc12345u, 0x7fbfffffu,
                               0x7f800000u, 0xff800000u, 0x7fff8000u};
  std::vector<float> p = base.p;
  for (int64_t i = 0; i < n; i += 3) p[i] = float_of(specials[(i / 3) % 8]);
  base.fill_grads(DType::kF32, 42, 1.0f);
  std::vector<uint16_t> want_hi;
  std::vector<int16_t> want_lo;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!cpu_isa_available(isa)) continue;
    std::vector<uint16_t> hi(n);
    std::vector<int16_t> lo(n);
    ASSERT_TRUE(split_master_cpu(p.data(), hi.data(), lo.data(), n).ok());
    std::vector<float> m = base.m, v = base.v;
    AdamCpuOptions cpu;
    cpu.isa = isa;
    ASSERT_TRUE(adam_step_split_cpu(hi.data(), lo.data(), m.data(), v.data(), base.g.data(), nullptr, n,
                                    DType::kF32, options_for(1, true, 1.0f), cpu)
                    .ok());
    for (int64_t i = 0; i < n; i += 3) {
      const uint32_t joined = join_master_bits(hi[i], lo[i]);
      EXPECT_EQ(is_nan_bits(joined), is_nan_bits(specials[(i / 3) % 8])) << cpu_isa_name(isa) << " " << i;
    }
    if (want_hi.empty()) {
      want_hi = hi;
      want_lo = lo;
      continue;
    }
    EXPECT_EQ(hi, want_hi) << cpu_isa_name(isa);
    EXPECT_EQ(lo, want_lo) << cpu_isa_name(isa);
  }
}

TEST(AdamSplitCpuTest, FoundInfSkipsAndBadArgumentsAreRefused) {
  Case c(100, 0, DType::kF32, 5);
  c.fill_grads(DType::kF32, 6, 1.0f);
  const std::vector<uint16_t> hi = c.hi;
  const std::vector<int16_t> lo = c.lo;
  const float inf_flag = 1.0f;
  const AdamOptions o = options_for(1, true, 1.0f);
  ASSERT_TRUE(adam_step_split_cpu(c.hi.data(), c.lo.data(), c.sm.data(), c.sv.data(), c.g.data(),
                                  &inf_flag, 100, DType::kF32, o)
                  .ok());
  EXPECT_EQ(c.hi, hi);
  EXPECT_EQ(c.lo, lo);
  EXPECT_FALSE(adam_step_split_cpu(nullptr, c.lo.data(), c.sm.data(), c.sv.data(), c.g.data(),
                                   nullptr, 100, DType::kF32, o)
                   .ok());
  EXPECT_FALSE(adam_step_split_cpu(c.hi.data(), c.lo.data(), c.sm.data(), c.sv.data(), c.g.data(),
                                   nullptr, 100, DType::kI32, o)
                   .ok());
  AdamOptions bad = o;
  bad.step = 0;
  EXPECT_FALSE(adam_step_split_cpu(c.hi.data(), c.lo.data(), c.sm.data(), c.sv.data(), c.g.data(),
                                   nullptr, 100, DType::kF32, bad)
                   .ok());
}

#if COLOSSAL_WITH_CUDA

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess)

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t count = 0;
  explicit Dev(size_t n) : count(n) {
    if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess) p = nullptr;
  }
  ~Dev() { cudaFree(p); }
  cudaError_t up(const T* h) { return cudaMemcpy(p, h, count * sizeof(T), cudaMemcpyHostToDevice); }
  cudaError_t down(T* h) const { return cudaMemcpy(h, p, count * sizeof(T), cudaMemcpyDeviceToHost); }
};

#endif  // COLOSSAL_WITH_CUDA

TEST(AdamSplitCudaTest, KernelAndConversionsAreTheCpuBitForBit) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 900;
  for (DType gt : kGradTypes) {
    for (int64_t n : {1, 5, 1000, 16383, 16385, 70001}) {
      for (int64_t off : {0, 1}) {  // 1: the buffers start off their vector alignment
        Case c(n, off, gt, seed += 10);
        const size_t gs = dtype_size(gt);
        Dev<uint16_t> hi(off + n);
        Dev<int16_t> lo(off + n);
        Dev<float> m(off + n), v(off + n);
        Dev<uint8_t> g(off * gs + n * gs);
        ASSERT_NE(g.p, nullptr);
        CUDA_OK(hi.up(c.hi.data()));
        CUDA_OK(lo.up(c.lo.data()));
        CUDA_OK(m.up(c.sm.data()));
        CUDA_OK(v.up(c.sv.data()));
        for (int step = 1; step <= 2; ++step) {
          const AdamOptions o = options_for(step, step == 1, step == 2 ? 2.0f : 1.0f);
          c.fill_grads(gt, seed + step, o.grad_scale);
          CUDA_OK(cudaMemcpy(g.p + off * gs, c.g.data(), n * gs, cudaMemcpyHostToDevice));
          ASSERT_TRUE(adam_step_split_cpu(c.hi.data() + off, c.lo.data() + off, c.sm.data() + off,
                                          c.sv.data() + off, c.g.data(), nullptr, n, gt, o)
                          .ok());
          ASSERT_TRUE(adam_step_split_cuda(hi.p + off, lo.p + off, m.p + off, v.p + off, g.p + off * gs,
                                           nullptr, n, gt, o, nullptr)
                          .ok());
        }
        std::vector<uint16_t> h(off + n);
        std::vector<int16_t> l(off + n);
        std::vector<float> mm(off + n), vv(off + n);
        CUDA_OK(hi.down(h.data()));
        CUDA_OK(lo.down(l.data()));
        CUDA_OK(m.down(mm.data()));
        CUDA_OK(v.down(vv.data()));
        for (int64_t i = off; i < off + n; ++i) {
          ASSERT_EQ(h[i], c.hi[i]) << dtype_name(gt) << " n " << n << " off " << off << " i " << i;
          ASSERT_EQ(l[i], c.lo[i]) << i;
          ASSERT_EQ(bits_of(mm[i]), bits_of(c.sm[i])) << i;
          ASSERT_EQ(bits_of(vv[i]), bits_of(c.sv[i])) << i;
        }
      }
    }
  }
  // A set found_inf flag (device memory) changes nothing.
  {
    Case c(5000, 0, DType::kBF16, 77);
    c.fill_grads(DType::kBF16, 78, 1.0f);
    Dev<uint16_t> hi(5000);
    Dev<int16_t> lo(5000);
    Dev<float> m(5000), v(5000), flag(1);
    Dev<uint8_t> g(10000);
    CUDA_OK(hi.up(c.hi.data()));
    CUDA_OK(lo.up(c.lo.data()));
    CUDA_OK(m.up(c.sm.data()));
    CUDA_OK(v.up(c.sv.data()));
    CUDA_OK(g.up(c.g.data()));
    const float one = 1.0f;
    CUDA_OK(flag.up(&one));
    ASSERT_TRUE(adam_step_split_cuda(hi.p, lo.p, m.p, v.p, g.p, flag.p, 5000, DType::kBF16,
                                     options_for(1, true, 1.0f), nullptr)
                    .ok());
    std::vector<uint16_t> h(5000);
    CUDA_OK(hi.down(h.data()));
    EXPECT_EQ(h, c.hi);
  }
  // split_master_cuda / join_master_cuda on the edge patterns.
  {
    const std::vector<uint32_t> pats = test_patterns();
    const int64_t n = static_cast<int64_t>(pats.size());
    const std::vector<float> master = floats_of(pats);
    Dev<float> dm(n), back(n);
    Dev<uint16_t> hi(n);
    Dev<int16_t> lo(n);
    CUDA_OK(dm.up(master.data()));
    CUDA_OK(cudaMemset(back.p, 0x5a, n * 4));
    ASSERT_TRUE(split_master_cuda(dm.p, hi.p, lo.p, n, nullptr).ok());
    ASSERT_TRUE(join_master_cuda(hi.p, lo.p, back.p, n, nullptr).ok());
    std::vector<uint16_t> h(n);
    std::vector<int16_t> l(n);
    std::vector<float> b(n);
    CUDA_OK(hi.down(h.data()));
    CUDA_OK(lo.down(l.data()));
    CUDA_OK(back.down(b.data()));
    ASSERT_NO_FATAL_FAILURE(expect_halves_of(pats, h, l, b));
  }
#endif
}

}  // namespace
}  // namespace colossal::kernels::adam
