// Adam: the CPU path against a float64 reference of torch's AdamW / Adam formula
// over several steps with state carried; every SIMD path and every CUDA launch
// mode against the CPU scalar path bit for bit; found_inf skips; bad arguments.
#include "kernels/adam/adam.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common/half.h"
#include "tests/util/gpu_test.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::adam {
namespace {

constexpr DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

float get(DType t, const uint8_t* b, int64_t i) {
  switch (t) {
    case DType::kF16: return half_to_float(reinterpret_cast<const Half*>(b)[i]);
    case DType::kBF16: return bfloat16_to_float(reinterpret_cast<const BFloat16*>(b)[i]);
    default: return reinterpret_cast<const float*>(b)[i];
  }
}

// float -> dtype, round to nearest even (kernels/common/half.h).
void put(DType t, uint8_t* b, int64_t i, float x) {
  switch (t) {
    case DType::kF16: reinterpret_cast<Half*>(b)[i] = float_to_half(x); break;
    case DType::kBF16: reinterpret_cast<BFloat16*>(b)[i] = float_to_bfloat16(x); break;
    default: reinterpret_cast<float*>(b)[i] = x; break;
  }
}

// Fills n gradients of dtype t at b, uniform in [-scale, scale).
void fill_grads(DType t, uint8_t* b, int64_t n, float scale, uint32_t seed) {
  const auto f = testing::random_floats(n, seed, -scale, scale);
  for (int64_t i = 0; i < n; ++i) put(t, b, i, f[i]);
}

std::vector<uint8_t> random_grads(DType t, int64_t n, float scale, uint32_t seed) {
  std::vector<uint8_t> b(n * dtype_size(t));
  fill_grads(t, b.data(), n, scale, seed);
  return b;
}

// p in [-1, 1), m in [-0.1, 0.1), v in [0, 0.01): v is non-negative, as Adam keeps it.
void fill_state(float* p, float* m, float* v, int64_t n, uint32_t seed) {
  if (n == 0) return;  // empty tensors may be null: memcpy must not see them
  const auto fp = testing::random_floats(n, seed, -1.0f, 1.0f);
  const auto fm = testing::random_floats(n, seed + 1, -0.1f, 0.1f);
  const auto fv = testing::random_floats(n, seed + 2, 0.0f, 0.01f);
  std::memcpy(p, fp.data(), n * 4);
  std::memcpy(m, fm.data(), n * 4);
  std::memcpy(v, fv.data(), n * 4);
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Index of the first element of n that differs between two dtype-t buffers, -1 if
// none. float32 NaNs compare equal whatever their payload (x86 and CUDA make
// different NaNs); half copies are canonical, so they compare bit for bit.
int64_t first_difference(DType t, const void* a, const void* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (t == DType::kF32) {
      const float x = static_cast<const float*>(a)[i], y = static_cast<const float*>(b)[i];
      if (!(std::isnan(x) && std::isnan(y)) && bits(x) != bits(y)) return i;
    } else if (std::memcmp(static_cast<const uint8_t*>(a) + i * 2,
                           static_cast<const uint8_t*>(b) + i * 2, 2) != 0) {
      return i;
    }
  }
  return -1;
}

// torch.optim.AdamW (adamw_mode) / torch.optim.Adam with weight_decay (L2), in double.
struct Reference {
  std::vector<double> p, m, v;

  void step(const std::vector<double>& grad, const AdamOptions& o) {
    const double b1 = o.beta1, b2 = o.beta2, lr = o.lr, wd = o.weight_decay;
    const double bc1 = o.bias_correction ? 1 - std::pow(b1, double(o.step)) : 1;
    const double bc2 = o.bias_correction ? 1 - std::pow(b2, double(o.step)) : 1;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i] / double(o.grad_scale);
      if (!o.adamw_mode) g += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      if (o.adamw_mode) p[i] *= 1 - lr * wd;
      p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + double(o.eps));
    }
  }
};

// Tolerances against the float64 reference over 5 steps. Each step rounds p, m
// and v a handful of times (a float ulp is 6e-8 relative) and the update
// m / (sqrt(v) + eps) is scale invariant, so 2e-6 relative plus an absolute floor
// for values that cancel towards zero holds with a wide margin, while any formula
// error (bias correction, decay, unscale, eps placement) is >= 1e-4 at lr = 0.05.
constexpr double kRelTol = 2e-6;
constexpr double kAbsTolPM = 3e-7;  // p and m are O(1) and can cancel to ~0
constexpr double kAbsTolV = 1e-12;  // v is a sum of non-negative terms

AdamOptions test_options(bool adamw, bool bias_correction, float grad_scale) {
  AdamOptions o;
  o.lr = 0.05f;
  o.beta1 = 0.9f;
  o.beta2 = 0.99f;
  o.eps = 1e-3f;
  o.weight_decay = 0.1f;
  o.adamw_mode = adamw;
  o.bias_correction = bias_correction;
  o.grad_scale = grad_scale;
  return o;
}

std::string label(DType g, DType c, const AdamOptions& o, int64_t n) {
  return std::string("grad=") + dtype_name(g) + " copy=" + dtype_name(c) +
         (o.adamw_mode ? " adamw" : " l2") + (o.bias_correction ? " bc" : " no-bc") +
         " scale=" + std::to_string(o.grad_scale) + " step=" + std::to_string(o.step) +
         " n=" + std::to_string(n);
}

TEST(AdamCpuTest, MatchesFloat64ReferenceOverSteps) {
  uint32_t seed = 1;
  for (DType gt : kFloatTypes) {
    for (bool adamw : {true, false}) {
      for (bool bc : {true, false}) {
        for (float scale : {1.0f, 3.0f, 1024.0f}) {
          for (int64_t n : {1, 3, 17, 1000, 4097}) {
            const DType ct = kFloatTypes[seed % 3];
            std::vector<float> p(n), m(n), v(n);
            fill_state(p.data(), m.data(), v.data(), n, seed);
            seed += 3;
            Reference ref{{p.begin(), p.end()}, {m.begin(), m.end()}, {v.begin(), v.end()}};
            std::vector<uint8_t> copy(n * dtype_size(ct)), want_copy(copy.size());
            for (int step = 1; step <= 5; ++step) {
              AdamOptions o = test_options(adamw, bc, scale);
              o.step = step;
              const auto g = random_grads(gt, n, scale, seed++);
              testing::poison(copy.data(), copy.size());
              ASSERT_TRUE(adam_step_cpu(p.data(), m.data(), v.data(), copy.data(), g.data(),
                                        nullptr, n, gt, ct, o)
                              .ok());
              std::vector<double> gd(n);
              for (int64_t i = 0; i < n; ++i) gd[i] = get(gt, g.data(), i);
              ref.step(gd, o);
              for (int64_t i = 0; i < n; ++i) {
                ASSERT_NEAR(p[i], ref.p[i], kRelTol * std::fabs(ref.p[i]) + kAbsTolPM)
                    << "p " << label(gt, ct, o, n) << " i=" << i;
                ASSERT_NEAR(m[i], ref.m[i], kRelTol * std::fabs(ref.m[i]) + kAbsTolPM)
                    << "m " << label(gt, ct, o, n) << " i=" << i;
                ASSERT_NEAR(v[i], ref.v[i], kRelTol * std::fabs(ref.v[i]) + kAbsTolV)
                    << "v " << label(gt, ct, o, n) << " i=" << i;
                put(ct, want_copy.data(), i, p[i]);  // the copy is RNE of the new fp32 param
              }
              ASSERT_EQ(first_difference(ct, copy.data(), want_copy.data(), n), -1)
                  << "copy " << label(gt, ct, o, n);
            }
          }
        }
      }
    }
  }
}

// One CPU tensor with its own buffers, offset by `off` elements from an aligned start.
struct HostTensor {
  DType gt, ct;
  int64_t n, off;
  bool has_copy;
  std::vector<float> p, m, v;
  std::vector<uint8_t> g, c;

  HostTensor(DType gt_, DType ct_, int64_t n_, int64_t off_, bool has_copy_, uint32_t seed)
      : gt(gt_), ct(ct_), n(n_), off(off_), has_copy(has_copy_), p(n + off), m(n + off),
        v(n + off), g((n + off) * dtype_size(gt)), c((n + off) * dtype_size(ct)) {
    fill_state(p.data() + off, m.data() + off, v.data() + off, n, seed);
    fill_grads(gt, g.data() + off * dtype_size(gt), n, 1.0f, seed + 7);
    testing::poison(c.data(), c.size());
  }
  AdamTensor view() {
    return AdamTensor{p.data() + off, m.data() + off, v.data() + off,
                      g.data() + off * dtype_size(gt),
                      has_copy ? c.data() + off * dtype_size(ct) : nullptr, n};
  }
};

// Whole-buffer comparison of two tensors (guards included, NaN-aware for float32).
void expect_same(const HostTensor& a, const HostTensor& b, const std::string& what) {
  const int64_t len = a.n + a.off;
  EXPECT_EQ(first_difference(DType::kF32, a.p.data(), b.p.data(), len), -1) << "p " << what;
  EXPECT_EQ(first_difference(DType::kF32, a.m.data(), b.m.data(), len), -1) << "m " << what;
  EXPECT_EQ(first_difference(DType::kF32, a.v.data(), b.v.data(), len), -1) << "v " << what;
  EXPECT_EQ(first_difference(a.ct, a.c.data(), b.c.data(), len), -1) << "copy " << what;
}

TEST(AdamCpuTest, SimdPathsMatchScalarBitForBit) {
  int tested = 0;
  uint32_t seed = 1000;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!cpu_isa_available(isa)) {
      std::printf("note: this CPU lacks %s; its path is not tested here\n", cpu_isa_name(isa));
      continue;
    }
    ++tested;
    for (DType gt : kFloatTypes) {
      for (int copy = 0; copy < 4; ++copy) {
        const bool has_copy = copy > 0;
        const DType ct = has_copy ? kFloatTypes[copy - 1] : DType::kF32;
        for (bool adamw : {true, false}) {
          for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 33, 1000, 65537}) {
            for (int64_t off : {0, 1}) {
              HostTensor ref(gt, ct, n, off, has_copy, seed);
              // Special values: overflow of the half copy, a NaN lane, tiny grads.
              if (n > 2) ref.p[off] = 1e5f;
              if (n > 5) ref.p[off + 5] = std::numeric_limits<float>::quiet_NaN();
              if (n > 3) put(gt, ref.g.data() + off * dtype_size(gt), 3, 1e-39f);
              HostTensor simd = ref;
              AdamOptions o = test_options(adamw, true, 3.0f);
              o.step = 2 + static_cast<int>(seed % 5);
              ++seed;
              const AdamTensor a = ref.view(), b = simd.view();
              const std::string what = std::string(cpu_isa_name(isa)) + " " +
                                       label(gt, ct, o, n) + " off=" + std::to_string(off) +
                                       (has_copy ? "" : " (no copy)");
              ASSERT_TRUE(adam_step_cpu(a.param, a.m, a.v, a.model_copy, a.grad, nullptr, n, gt,
                                        ct, o, {CpuIsa::kScalar, 1})
                              .ok());
              // Three threads over 65537 elements: pieces end mid-tensor.
              ASSERT_TRUE(adam_step_cpu(b.param, b.m, b.v, b.model_copy, b.grad, nullptr, n, gt,
                                        ct, o, {isa, 3})
                              .ok());
              expect_same(ref, simd, what);
              if (::testing::Test::HasFailure()) return;
            }
          }
        }
      }
    }
  }
  std::printf("SIMD paths tested: %d\n", tested);
}

TEST(AdamCpuTest, FoundInfSkipsTheStep) {
  for (float flag : {1.0f, std::numeric_limits<float>::infinity()}) {
    HostTensor t(DType::kBF16, DType::kBF16, 1001, 0, true, 77);
    const HostTensor before = t;
    const AdamTensor x = t.view();
    ASSERT_TRUE(adam_step_cpu(x.param, x.m, x.v, x.model_copy, x.grad, &flag, x.n, DType::kBF16,
                              DType::kBF16, AdamOptions{})
                    .ok());
    expect_same(t, before, "flat, found_inf set");
    ASSERT_TRUE(adam_step_tensors_cpu(&x, &flag, 1, DType::kBF16, DType::kBF16, AdamOptions{})
                    .ok());
    expect_same(t, before, "tensors, found_inf set");
  }
  HostTensor t(DType::kF32, DType::kF16, 1001, 0, true, 78);
  const HostTensor before = t;
  const AdamTensor x = t.view();
  const float clear = 0.0f;
  ASSERT_TRUE(adam_step_cpu(x.param, x.m, x.v, x.model_copy, x.grad, &clear, x.n, DType::kF32,
                            DType::kF16, AdamOptions{})
                  .ok());
  for (int64_t i = 0; i < x.n; ++i) ASSERT_NE(t.p[i], before.p[i]) << i;
}

// Sizes of a 200-tensor list: odd, tiny, empty, and across 16384-element chunks.
std::vector<int64_t> list_sizes(int count) {
  const int64_t pattern[] = {1, 3, 0, 17, 1000, 5, 4096, 33, 0, 16385, 2, 770, 65537, 64, 9};
  std::vector<int64_t> sizes;
  for (int i = 0; i < count; ++i) {
    const int64_t s = pattern[i % 15];
    sizes.push_back(s == 65537 && i > 20 ? 129 : s);  // one 65537 keeps the list small
  }
  return sizes;
}

TEST(AdamCpuTest, TensorsMatchFlatCallsBitForBit) {
  const auto sizes = list_sizes(200);
  std::vector<HostTensor> a, b;
  for (size_t i = 0; i < sizes.size(); ++i) {
    a.emplace_back(DType::kF16, DType::kBF16, sizes[i], i % 3, i % 7 != 0, 500 + 10 * i);
  }
  b = a;
  AdamOptions o = test_options(false, true, 1024.0f);
  o.step = 3;
  std::vector<AdamTensor> views;
  for (auto& t : b) views.push_back(t.view());
  ASSERT_TRUE(adam_step_tensors_cpu(views.data(), nullptr, views.size(), DType::kF16,
                                    DType::kBF16, o, {CpuIsa::kAuto, 4})
                  .ok());
  for (size_t i = 0; i < a.size(); ++i) {
    const AdamTensor x = a[i].view();
    ASSERT_TRUE(adam_step_cpu(x.param, x.m, x.v, x.model_copy, x.grad, nullptr, x.n, DType::kF16,
                              DType::kBF16, o, {CpuIsa::kScalar, 1})
                    .ok());
    expect_same(a[i], b[i], "tensor " + std::to_string(i));
  }
}

// The usage example of adam.h.
TEST(AdamCpuTest, HeaderExample) {
  const int64_t n = 5;
  std::vector<float> p = {0.5f, -0.25f, 1.0f, 2.0f, -3.0f}, m(n, 0.0f), v(n, 0.0f);
  const std::vector<float> g = {0.1f, -0.2f, 0.3f, -0.4f, 0.5f};
  AdamOptions opt;
  opt.step = 1;
  opt.lr = 1e-3f;
  opt.weight_decay = 0.1f;  // AdamW
  ASSERT_TRUE(adam_step_cpu(p.data(), m.data(), v.data(), /*model_copy=*/nullptr, g.data(),
                            /*found_inf=*/nullptr, n, DType::kF32, DType::kF32, opt)
                  .ok());
  // Step 1 with bias correction moves each weight by ~lr against its gradient's sign.
  EXPECT_NEAR(p[0], 0.5f * (1 - 1e-4f) - 1e-3f, 1e-6f);
  EXPECT_NEAR(p[1], -0.25f * (1 - 1e-4f) + 1e-3f, 1e-6f);
}

TEST(AdamCpuTest, RejectsBadArguments) {
  float p[4] = {1, 2, 3, 4}, m[4] = {}, v[4] = {}, g[4] = {1, 1, 1, 1};
  const AdamOptions ok;
  const auto code = [&](float* pp, const void* gg, int64_t n, DType gt, DType ct,
                        const AdamOptions& o, AdamCpuOptions cpu = {}) {
    return adam_step_cpu(pp, m, v, nullptr, gg, nullptr, n, gt, ct, o, cpu).code();
  };
  using Code = KernelStatus::Code;
  EXPECT_EQ(code(nullptr, g, 4, DType::kF32, DType::kF32, ok), Code::kInvalidArgument);
  EXPECT_EQ(code(p, nullptr, 4, DType::kF32, DType::kF32, ok), Code::kInvalidArgument);
  EXPECT_EQ(code(p, g, -1, DType::kF32, DType::kF32, ok), Code::kInvalidArgument);
  EXPECT_EQ(code(p, g, 4, DType::kF64, DType::kF32, ok), Code::kUnsupported);
  EXPECT_EQ(code(p, g, 4, DType::kF32, DType::kI32, ok), Code::kUnsupported);
  // Misaligned float pointer.
  EXPECT_EQ(code(reinterpret_cast<float*>(reinterpret_cast<char*>(p) + 1), g, 2, DType::kF32,
                 DType::kF32, ok),
            Code::kInvalidArgument);
  EXPECT_EQ(code(p, g, 4, DType::kF32, DType::kF32, ok, {static_cast<CpuIsa>(42), 0}),
            Code::kInvalidArgument);
  const auto with = [&](auto edit) {
    AdamOptions o;
    edit(o);
    return code(p, g, 4, DType::kF32, DType::kF32, o);
  };
  EXPECT_EQ(with([](AdamOptions& o) { o.step = 0; }), Code::kInvalidArgument);
  EXPECT_EQ(with([](AdamOptions& o) { o.lr = -1; }), Code::kInvalidArgument);
  EXPECT_EQ(with([](AdamOptions& o) { o.lr = std::nanf(""); }), Code::kInvalidArgument);
  EXPECT_EQ(with([](AdamOptions& o) { o.beta1 = 1; }), Code::kInvalidArgument);
  EXPECT_EQ(with([](AdamOptions& o) { o.beta2 = -0.1f; }), Code::kInvalidArgument);
  EXPECT_EQ(with([](AdamOptions& o) { o.eps = -1; }), Code::kInvalidArgument);
  EXPECT_EQ(with([](AdamOptions& o) { o.weight_decay = -1; }), Code::kInvalidArgument);
  EXPECT_EQ(with([](AdamOptions& o) { o.grad_scale = 0; }), Code::kInvalidArgument);
  EXPECT_EQ(with([](AdamOptions& o) {
              o.grad_scale = std::numeric_limits<float>::infinity();
            }),
            Code::kInvalidArgument);
  // Nothing to do is fine, null buffers included; a bad tensor list is not.
  EXPECT_TRUE(adam_step_cpu(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, DType::kF32,
                            DType::kF32, ok)
                  .ok());
  EXPECT_EQ(adam_step_tensors_cpu(nullptr, nullptr, 3, DType::kF32, DType::kF32, ok).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(adam_step_tensors_cpu(nullptr, nullptr, -1, DType::kF32, DType::kF32, ok).code(),
            Code::kInvalidArgument);
  // Arguments are checked before found_inf is honoured, and nothing is written.
  const float set = 1.0f;
  EXPECT_EQ(adam_step_cpu(p, m, v, nullptr, nullptr, &set, 4, DType::kF32, DType::kF32, ok).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(p[0], 1.0f);
}

TEST(AdamCpuTest, IsaQueries) {
  EXPECT_TRUE(cpu_isa_available(CpuIsa::kAuto));
  EXPECT_TRUE(cpu_isa_available(CpuIsa::kScalar));
  EXPECT_STREQ(cpu_isa_name(CpuIsa::kAvx512), "avx512");
  if (cpu_isa_available(CpuIsa::kAvx512)) {
    EXPECT_TRUE(cpu_isa_available(CpuIsa::kAvx2));
  }
  EXPECT_EQ(adam_cuda_scratch_bytes(0), 0);
  EXPECT_GE(adam_cuda_scratch_bytes(200), 200 * 48);
}

#if COLOSSAL_WITH_CUDA
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr
#define CUDA_EXPECT_OK(expr) EXPECT_EQ((expr), cudaSuccess) << #expr

// A host buffer with poisoned guard bands and its device mirror: data starts
// kGuard + off elements in, so off = 1 misaligns it by one element.
constexpr int64_t kGuard = 16;

struct Mirrored {
  size_t es;
  int64_t n, off;
  std::vector<uint8_t> host;
  uint8_t* dev = nullptr;

  Mirrored(DType t, int64_t n_, int64_t off_)
      : es(dtype_size(t)), n(n_), off(off_), host((n_ + off_ + 2 * kGuard) * es) {
    testing::poison(host.data(), host.size());
    if (cudaMalloc(&dev, host.size()) != cudaSuccess) dev = nullptr;
  }
  Mirrored(const Mirrored&) = delete;
  ~Mirrored() { cudaFree(dev); }
  uint8_t* h() { return host.data() + (kGuard + off) * es; }
  uint8_t* d() { return dev + (kGuard + off) * es; }
  float* hf() { return reinterpret_cast<float*>(h()); }
  float* df() { return reinterpret_cast<float*>(d()); }
  cudaError_t upload() { return cudaMemcpy(dev, host.data(), host.size(), cudaMemcpyHostToDevice); }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> out(host.size());
    if (cudaMemcpy(out.data(), dev, host.size(), cudaMemcpyDeviceToHost) != cudaSuccess) out.clear();
    return out;
  }
  // First differing element over the whole buffer (guards included), -1 if none.
  int64_t diff(DType t, const std::vector<uint8_t>& other) const {
    if (other.size() != host.size()) return -2;
    return first_difference(t, host.data(), other.data(), host.size() / es);
  }
};

// param/m/v/grad/copy of one flat range, host and device.
struct FlatCase {
  DType gt, ct;
  Mirrored p, m, v, g, c;
  FlatCase(DType gt_, DType ct_, int64_t n, int64_t off_state, int64_t off_grad)
      : gt(gt_), ct(ct_), p(DType::kF32, n, off_state), m(DType::kF32, n, off_state),
        v(DType::kF32, n, off_state), g(gt_, n, off_grad), c(ct_, n, off_state) {}
};

#endif  // COLOSSAL_WITH_CUDA

TEST(AdamCudaTest, FlatMatchesCpuBitForBit) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 2000;
  struct Layout {
    int64_t off_state, off_grad;
    const char* name;
  };
  const Layout layouts[] = {{0, 0, "aligned"}, {1, 1, "head"}, {0, 1, "mixed"}};
  for (DType gt : kFloatTypes) {
    for (int copy = 0; copy < 4; ++copy) {
      const bool has_copy = copy > 0;
      const DType ct = has_copy ? kFloatTypes[copy - 1] : DType::kBF16;
      for (bool adamw : {true, false}) {
        for (int64_t n : {1, 3, 5, 1000, 16383, 16385, 65537}) {
          for (const Layout& L : layouts) {
            FlatCase fc(gt, ct, n, L.off_state, L.off_grad);
            ASSERT_NE(fc.c.dev, nullptr);
            fill_state(fc.p.hf(), fc.m.hf(), fc.v.hf(), n, seed);
            for (Mirrored* b : {&fc.p, &fc.m, &fc.v, &fc.c}) CUDA_OK(b->upload());
            for (int step = 1; step <= 2; ++step) {
              AdamOptions o = test_options(adamw, step == 1, step == 1 ? 1.0f : 3.0f);
              o.step = step;
              fill_grads(gt, fc.g.h(), n, o.grad_scale, seed + 10 + step);
              CUDA_OK(fc.g.upload());
              void* dcopy = has_copy ? fc.c.d() : nullptr;
              void* hcopy = has_copy ? fc.c.h() : nullptr;
              ASSERT_TRUE(adam_step_cuda(fc.p.df(), fc.m.df(), fc.v.df(), dcopy, fc.g.d(), nullptr,
                                         n, gt, ct, o, nullptr)
                              .ok());
              ASSERT_TRUE(adam_step_cpu(fc.p.hf(), fc.m.hf(), fc.v.hf(), hcopy, fc.g.h(), nullptr,
                                        n, gt, ct, o)
                              .ok());
              const std::string what = label(gt, ct, o, n) + " " + L.name +
                                       (has_copy ? "" : " (no copy)");
              ASSERT_EQ(fc.p.diff(DType::kF32, fc.p.download()), -1) << "p " << what;
              ASSERT_EQ(fc.m.diff(DType::kF32, fc.m.download()), -1) << "m " << what;
              ASSERT_EQ(fc.v.diff(DType::kF32, fc.v.download()), -1) << "v " << what;
              ASSERT_EQ(fc.c.diff(ct, fc.c.download()), -1) << "copy " << what;
            }
            seed += 20;
          }
        }
      }
    }
  }
  // One large range per common configuration (many blocks, every chunk full).
  for (DType gt : {DType::kF32, DType::kBF16}) {
    const int64_t n = (int64_t{1} << 22) + 3;
    FlatCase fc(gt, DType::kBF16, n, 1, 1);
    fill_state(fc.p.hf(), fc.m.hf(), fc.v.hf(), n, 99);
    fill_grads(gt, fc.g.h(), n, 1.0f, 98);
    for (Mirrored* b : {&fc.p, &fc.m, &fc.v, &fc.g, &fc.c}) CUDA_OK(b->upload());
    AdamOptions o = test_options(true, true, 1.0f);
    o.step = 7;
    ASSERT_TRUE(adam_step_cuda(fc.p.df(), fc.m.df(), fc.v.df(), fc.c.d(), fc.g.d(), nullptr, n, gt,
                               DType::kBF16, o, nullptr)
                    .ok());
    ASSERT_TRUE(adam_step_cpu(fc.p.hf(), fc.m.hf(), fc.v.hf(), fc.c.h(), fc.g.h(), nullptr, n, gt,
                              DType::kBF16, o)
                    .ok());
    EXPECT_EQ(fc.p.diff(DType::kF32, fc.p.download()), -1) << "large p";
    EXPECT_EQ(fc.v.diff(DType::kF32, fc.v.download()), -1) << "large v";
    EXPECT_EQ(fc.c.diff(DType::kBF16, fc.c.download()), -1) << "large copy";
  }
#endif
}

#if COLOSSAL_WITH_CUDA

// 200 tensors carved from flat buffers at irregular offsets (some aligned, some
// one element off, some with grads out of phase with the state), some without a
// copy; every launch mode against the CPU multi-tensor path.
struct ListCase {
  DType gt, ct;
  std::vector<int64_t> sizes, state_at, grad_at;
  std::unique_ptr<Mirrored> p, m, v, g, c;

  ListCase(DType gt_, DType ct_, const std::vector<int64_t>& sizes_, uint32_t seed)
      : gt(gt_), ct(ct_), sizes(sizes_) {
    int64_t s = 0, q = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      s += i % 4;  // gaps of 0..3 elements
      q += (i % 5 == 0) ? 1 : i % 4;
      state_at.push_back(s);
      grad_at.push_back(q);
      s += sizes[i];
      q += sizes[i];
    }
    p = std::make_unique<Mirrored>(DType::kF32, s, 0);
    m = std::make_unique<Mirrored>(DType::kF32, s, 0);
    v = std::make_unique<Mirrored>(DType::kF32, s, 0);
    c = std::make_unique<Mirrored>(ct, s, 0);
    g = std::make_unique<Mirrored>(gt, q, 0);
    fill_state(p->hf(), m->hf(), v->hf(), s, seed);
    fill_grads(gt, g->h(), q, 1.0f, seed + 5);
  }
  std::vector<AdamTensor> views(bool device) {
    std::vector<AdamTensor> out;
    const size_t ges = dtype_size(gt), ces = dtype_size(ct);
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t a = state_at[i], b = grad_at[i];
      float* pp = device ? p->df() : p->hf();
      float* mm = device ? m->df() : m->hf();
      float* vv = device ? v->df() : v->hf();
      uint8_t* gg = device ? g->d() : g->h();
      uint8_t* cc = device ? c->d() : c->h();
      out.push_back(AdamTensor{pp + a, mm + a, vv + a, gg + b * ges,
                               i % 7 == 3 ? nullptr : cc + a * ces, sizes[i]});
    }
    return out;
  }
  cudaError_t upload() {
    for (auto* b : {p.get(), m.get(), v.get(), g.get(), c.get()}) {
      const cudaError_t e = b->upload();
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  // Whether the device state equals the host state (guards included).
  std::string compare() {
    if (p->diff(DType::kF32, p->download()) != -1) return "p differs";
    if (m->diff(DType::kF32, m->download()) != -1) return "m differs";
    if (v->diff(DType::kF32, v->download()) != -1) return "v differs";
    if (c->diff(ct, c->download()) != -1) return "copy differs";
    return "";
  }
};

#endif  // COLOSSAL_WITH_CUDA

TEST(AdamCudaTest, TensorsMatchCpuInEveryLaunchMode) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  enum Mode { kParamTable, kScratch, kBatches };
  for (Mode mode : {kParamTable, kScratch, kBatches}) {
    for (DType gt : {DType::kF32, DType::kBF16, DType::kF16}) {
      const DType ct = gt == DType::kF32 ? DType::kF16 : gt;
      ListCase lc(gt, ct, list_sizes(mode == kParamTable ? 50 : 200), 3000 + int(mode));
      CUDA_OK(lc.upload());
      auto dv = lc.views(true), hv = lc.views(false);
      void* scratch = nullptr;
      const int64_t scratch_bytes = adam_cuda_scratch_bytes(dv.size());
      if (mode == kScratch) {
        CUDA_OK(cudaMalloc(&scratch, scratch_bytes));
      }
      for (int step = 1; step <= 2; ++step) {
        AdamOptions o = test_options(step == 1, true, 2.0f);
        o.step = step;
        ASSERT_TRUE(adam_step_tensors_cuda(dv.data(), nullptr, scratch, scratch_bytes, dv.size(),
                                           gt, ct, o, nullptr)
                        .ok());
        ASSERT_TRUE(adam_step_tensors_cpu(hv.data(), nullptr, hv.size(), gt, ct, o).ok());
        EXPECT_EQ(lc.compare(), "") << "mode " << int(mode) << " grad " << dtype_name(gt)
                                    << " step " << step;
      }
      CUDA_OK(cudaFree(scratch));
    }
  }
#endif
}

TEST(AdamCudaTest, FoundInfSkipsTheStep) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  float* flag = nullptr;
  CUDA_OK(cudaMalloc(&flag, sizeof(float)));
  for (float value : {1.0f, 0.0f}) {
    CUDA_OK(cudaMemcpy(flag, &value, sizeof(float), cudaMemcpyHostToDevice));
    ListCase lc(DType::kBF16, DType::kBF16, list_sizes(120), 4000);
    CUDA_OK(lc.upload());
    auto dv = lc.views(true), hv = lc.views(false);
    const int64_t bytes = adam_cuda_scratch_bytes(dv.size());
    void* scratch = nullptr;
    CUDA_OK(cudaMalloc(&scratch, bytes));
    const AdamOptions o = test_options(true, true, 1.0f);
    // Flat call on the first tensor, then the whole list with scratch, then without.
    ASSERT_TRUE(adam_step_cuda(dv[1].param, dv[1].m, dv[1].v, dv[1].model_copy, dv[1].grad, flag,
                               dv[1].n, DType::kBF16, DType::kBF16, o, nullptr)
                    .ok());
    ASSERT_TRUE(adam_step_tensors_cuda(dv.data(), flag, scratch, bytes, dv.size(), DType::kBF16,
                                       DType::kBF16, o, nullptr)
                    .ok());
    ASSERT_TRUE(adam_step_tensors_cuda(dv.data(), flag, nullptr, 0, dv.size(), DType::kBF16,
                                       DType::kBF16, o, nullptr)
                    .ok());
    if (value == 0.0f) {  // applied three times to tensor 1, twice to the others
      ASSERT_TRUE(adam_step_cpu(hv[1].param, hv[1].m, hv[1].v, hv[1].model_copy, hv[1].grad,
                                nullptr, hv[1].n, DType::kBF16, DType::kBF16, o)
                      .ok());
      for (int k = 0; k < 2; ++k) {
        ASSERT_TRUE(
            adam_step_tensors_cpu(hv.data(), nullptr, hv.size(), DType::kBF16, DType::kBF16, o)
                .ok());
      }
    }
    EXPECT_EQ(lc.compare(), "") << "found_inf = " << value;
    CUDA_OK(cudaFree(scratch));
  }
  CUDA_OK(cudaFree(flag));
#endif
}

TEST(AdamCudaTest, RejectsBadArguments) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  using Code = KernelStatus::Code;
  const AdamOptions ok;
  EXPECT_EQ(adam_step_cuda(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 5, DType::kF32,
                           DType::kF32, ok, nullptr)
                .code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(adam_step_cuda(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, DType::kF32,
                             DType::kF32, ok, nullptr)
                  .ok());
  ListCase lc(DType::kF32, DType::kF32, list_sizes(100), 5000);
  auto dv = lc.views(true);
  void* scratch = nullptr;
  const int64_t bytes = adam_cuda_scratch_bytes(dv.size());
  CUDA_OK(cudaMalloc(&scratch, bytes + 16));
  EXPECT_EQ(adam_step_tensors_cuda(dv.data(), nullptr, scratch, bytes - 1, dv.size(), DType::kF32,
                                   DType::kF32, ok, nullptr)
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(adam_step_tensors_cuda(dv.data(), nullptr, static_cast<char*>(scratch) + 8, bytes,
                                   dv.size(), DType::kF32, DType::kF32, ok, nullptr)
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(adam_step_tensors_cuda(dv.data(), nullptr, scratch, bytes, dv.size(), DType::kF64,
                                   DType::kF32, ok, nullptr)
                .code(),
            Code::kUnsupported);
  AdamOptions bad;
  bad.beta2 = 1.0f;
  EXPECT_EQ(adam_step_tensors_cuda(dv.data(), nullptr, scratch, bytes, dv.size(), DType::kF32,
                                   DType::kF32, bad, nullptr)
                .code(),
            Code::kInvalidArgument);
  CUDA_OK(cudaFree(scratch));
#endif
}

}  // namespace
}  // namespace colossal::kernels::adam
