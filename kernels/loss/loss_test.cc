// kernels/loss: the CPU path against a float64 reference and finite
// differences, the CUDA path against the CPU path, on fresh random logits of
// many shapes (V = 1, 3, 17, 1000, 4097, 50257, padded 50304/50257, 128256),
// every dtype and reduction, ignored rows, in-place, extreme magnitudes.
//
// Tolerances (|got - want| <= rtol * (|want| + scale * p) + atol, p the
// reference probability, scale the gradient weight; the scale * p term covers
// the target column, where dlogits = scale * (p - 1) cancels):
//   CPU float32 vs float64 reference: exp in float32, so the bound grows with
//   how far each logit lies below the row's maximum (Tol::arg).
//   CPU other types vs float64 reference: one rounding of a float64 result to
//   the output type: losses 5e-7 (float32 outputs), dlogits f16 9.8e-4, bf16
//   7.9e-3, f64 1e-12, plus an absolute term for values that underflow the
//   output type (f16 6e-8: subnormal spacing; f32 1e-44, bf16 1e-39). Backward
//   from the saved float32 lse adds |lse| * 2^-24 (~1e-6) relative error to p.
//   CUDA vs CPU: float32 math (ex2.approx ~2 ulp, float32 sums over 128k
//   terms) gives ~4e-6 relative on p and lse, so losses 2e-5 * max(1, |lse|);
//   dlogits may also round to the other neighbour of the output type:
//   f32 2e-5, f16 2e-3 (+6e-8), bf16 1.6e-2 (two bf16 ulps at worst); the
//   flush of probabilities below 2^-126 to 0 (ex2.approx.ftz) is 1e-34 absolute.
#include "kernels/loss/loss.h"

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
#include "kernels/loss/loss_test_util.h"
#include "tests/util/gpu_test.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::loss {
namespace {

using namespace test;  // NOLINT: the shared problems, reference and tolerances

constexpr Reduction kReductions[] = {Reduction::kNone, Reduction::kSum, Reduction::kMean};

// ---- outputs ------------------------------------------------------------------

struct Outputs {
  float loss = 0;
  std::vector<float> row_losses, lse;
  std::vector<uint8_t> dlogits;
};

// Outputs pre-filled with poison (losses) and random values (dlogits), so an
// element that is not overwritten, or accumulated into, fails the comparison.
Outputs fresh_outputs(const Problem& p, uint32_t seed) {
  Outputs o;
  o.row_losses.resize(p.n);
  o.lse.resize(p.n);
  testing::poison(o.row_losses.data(), p.n * sizeof(float));
  testing::poison(o.lse.data(), p.n * sizeof(float));
  testing::poison(&o.loss, sizeof(float));
  o.dlogits.resize(p.logits.size());
  const std::vector<float> noise = testing::random_floats(p.n * p.v, seed, 0.5f, 3.0f);
  for (int64_t i = 0; i < p.n * p.v; ++i) set(p.dtype, o.dlogits, i, noise[i]);
  return o;
}

void expect_losses(const Problem& p, const Reference& ref, const Outputs& o, Tol tol,
                   bool check_total, bool check_lse, const std::string& what) {
  for (int64_t i = 0; i < p.n; ++i) {
    const double scale = std::max(1.0, std::fabs(ref.lse[i]));
    const double bound = (tol.loss + tol.arg * (10 + ref.spread[i])) * scale;
    ASSERT_NEAR(o.row_losses[i], ref.row_loss[i], bound) << what << " row " << i;
    if (check_lse) {
      ASSERT_NEAR(o.lse[i], ref.lse[i], bound) << what << " lse " << i;
    }
  }
  if (check_total && p.opts.reduction != Reduction::kNone) {
    // Row errors add up in the total: the sum of the per-row bounds (divided
    // by the count for kMean) plus the total's own float32 rounding.
    double bound = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < p.n; ++i) {
      if (p.targets[i] == p.opts.ignore_index) continue;
      bound += (tol.loss + tol.arg * (10 + ref.spread[i])) * std::max(1.0, std::fabs(ref.lse[i]));
      ++count;
    }
    if (p.opts.reduction == Reduction::kMean && count > 0) bound /= count;
    bound += 1.2e-7 * std::fabs(ref.loss);
    ASSERT_NEAR(o.loss, ref.loss, bound) << what << " total";
  }
}

Outputs fused_cpu(const Problem& p, uint32_t seed) {
  Outputs o = fresh_outputs(p, seed);
  EXPECT_TRUE(cross_entropy_fused_cpu(&o.loss, o.row_losses.data(), o.lse.data(), o.dlogits.data(),
                                      p.logits.data(), p.targets.data(), p.dloss, p.n, p.v,
                                      p.v_real, p.dtype, p.opts)
                  .ok());
  return o;
}

Outputs forward_backward_cpu(const Problem& p, uint32_t seed) {
  Outputs o = fresh_outputs(p, seed);
  EXPECT_TRUE(cross_entropy_forward_cpu(&o.loss, o.row_losses.data(), o.lse.data(),
                                        p.logits.data(), p.targets.data(), p.n, p.v, p.v_real,
                                        p.dtype, p.opts)
                  .ok());
  EXPECT_TRUE(cross_entropy_backward_cpu(o.dlogits.data(), p.logits.data(), o.lse.data(),
                                         p.targets.data(), p.dloss, p.n, p.v, p.v_real, p.dtype,
                                         p.opts)
                  .ok());
  return o;
}

// ---- CPU ----------------------------------------------------------------------

TEST(CrossEntropyCpuTest, MatchesFloat64Reference) {
  const Shape shapes[] = {{1, 1, 1},    {2, 3, 3},       {5, 17, 17},      {4, 20, 17},
                          {9, 1000, 1000}, {3, 4097, 4097}, {2, 50257, 50257}, {2, 50304, 50257}};
  uint32_t seed = 1;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    for (const Shape& s : shapes) {
      for (Reduction r : kReductions) {
        const Problem p = make_problem(dtype, s.n, s.v, s.v_real, r, seed++);
        const Reference ref = reference(p);
        const Outputs f = fused_cpu(p, seed++);
        expect_losses(p, ref, f, cpu_tol(dtype), true, true, "fused " + describe(p));
        expect_grads(p, ref, f.dlogits, cpu_tol(dtype), "fused " + describe(p));
        const Outputs fb = forward_backward_cpu(p, seed++);
        expect_losses(p, ref, fb, cpu_tol(dtype), true, true, "forward " + describe(p));
        expect_grads(p, ref, fb.dlogits, cpu_backward_tol(dtype), "backward " + describe(p));
        if (r == Reduction::kNone) {
          EXPECT_EQ(std::memcmp(&f.loss, &fb.loss, sizeof(float)), 0) << "kNone wrote loss";
          uint32_t bits;
          std::memcpy(&bits, &f.loss, sizeof(bits));
          EXPECT_EQ(bits, 0xA5A5A5A5u) << "kNone must leave loss untouched";
        }
      }
    }
  }
}

// Sum over rows of the float64 reference loss as the kernels define it (the
// function the gradient is the derivative of): kNone counts as a sum.
double reference_objective(const Problem& p) {
  const Reference r = reference(p);
  if (p.opts.reduction != Reduction::kNone) return r.loss;
  double total = 0;
  for (double l : r.row_loss) total += l;
  return total;
}

double kernel_objective(const Problem& p) {
  Outputs o = fresh_outputs(p, 7);
  EXPECT_TRUE(cross_entropy_forward_cpu(&o.loss, o.row_losses.data(), nullptr, p.logits.data(),
                                        p.targets.data(), p.n, p.v, p.v_real, p.dtype, p.opts)
                  .ok());
  if (p.opts.reduction != Reduction::kNone) return o.loss;
  double total = 0;
  for (float l : o.row_losses) total += l;
  return total;
}

// Central differences in float64: (a) of the float64 reference objective
// (h = 1e-5, error ~h^2 + 1e-16/h: tolerance 1e-8 * dloss); (b) of our own
// forward_cpu, whose losses are float32: h = 1e-2, rounding error
// ~2^-24 * |L| / h ~ 5e-5 plus truncation h^2/6 * |L'''| ~ 2e-5, so 2e-4 * dloss.
TEST(CrossEntropyCpuTest, GradientsMatchFiniteDifferencesFloat64) {
  const Shape shapes[] = {{3, 17, 17}, {4, 20, 13}, {2, 3, 3}};
  uint32_t seed = 500;
  for (const Shape& s : shapes) {
    for (Reduction r : kReductions) {
      Problem p = make_problem(DType::kF64, s.n, s.v, s.v_real, r, seed++, -2.0, 2.0);
      if (p.n > 2) p.targets[1] = p.opts.ignore_index;
      const Outputs fused = fused_cpu(p, seed++);
      const Outputs fb = forward_backward_cpu(p, seed++);
      for (int64_t i = 0; i < p.n * p.v; ++i) {
        if ((i % p.v) >= p.v_real) continue;  // NaN padding: no derivative to take
        Problem plus = p, minus = p;
        const double x = get(p.dtype, p.logits, i);
        const double h = 1e-5;
        set(p.dtype, plus.logits, i, x + h);
        set(p.dtype, minus.logits, i, x - h);
        const double numeric =
            p.dloss * (reference_objective(plus) - reference_objective(minus)) / (2 * h);
        ASSERT_NEAR(get(p.dtype, fused.dlogits, i), numeric, 1e-8 * p.dloss)
            << "fused " << describe(p) << " element " << i;
        ASSERT_NEAR(get(p.dtype, fb.dlogits, i), numeric, 1e-6 * p.dloss)
            << "backward " << describe(p) << " element " << i;
        const double hk = 1e-2;
        set(p.dtype, plus.logits, i, x + hk);
        set(p.dtype, minus.logits, i, x - hk);
        const double numeric_kernel =
            p.dloss * (kernel_objective(plus) - kernel_objective(minus)) / (2 * hk);
        ASSERT_NEAR(get(p.dtype, fused.dlogits, i), numeric_kernel, 2e-4 * p.dloss)
            << "fused vs forward_cpu differences " << describe(p) << " element " << i;
      }
    }
  }
}

TEST(CrossEntropyCpuTest, InPlaceEqualsOutOfPlace) {
  uint32_t seed = 900;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF64}) {
    for (Reduction r : kReductions) {
      const Problem p = make_problem(dtype, 6, 1001, 999, r, seed++);
      const Outputs out = fused_cpu(p, seed++);
      Outputs in = fresh_outputs(p, seed++);
      std::vector<uint8_t> buf = p.logits;
      ASSERT_TRUE(cross_entropy_fused_cpu(&in.loss, in.row_losses.data(), in.lse.data(),
                                          buf.data(), buf.data(), p.targets.data(), p.dloss, p.n,
                                          p.v, p.v_real, dtype, p.opts)
                      .ok());
      EXPECT_EQ(buf, out.dlogits) << "fused in place " << describe(p);
      EXPECT_EQ(in.row_losses, out.row_losses);
      std::vector<uint8_t> buf2 = p.logits;
      const Outputs fb = forward_backward_cpu(p, seed++);
      ASSERT_TRUE(cross_entropy_backward_cpu(buf2.data(), buf2.data(), fb.lse.data(),
                                             p.targets.data(), p.dloss, p.n, p.v, p.v_real, dtype,
                                             p.opts)
                      .ok());
      EXPECT_EQ(buf2, fb.dlogits) << "backward in place " << describe(p);
    }
  }
}

// Logits far from 0: the max shift keeps everything finite.
struct Extreme {
  DType dtype;
  double magnitude;
};
constexpr Extreme kExtremes[] = {
    {DType::kF32, 1e4}, {DType::kF32, 1e30}, {DType::kF16, 6e4}, {DType::kBF16, 1e4},
    {DType::kBF16, 1e30}, {DType::kF64, 1e4}};

TEST(CrossEntropyCpuTest, ExtremeLogitsStayFinite) {
  uint32_t seed = 1200;
  for (const Extreme& e : kExtremes) {
    for (Reduction r : kReductions) {
      const Problem p = make_problem(e.dtype, 5, 300, 300, r, seed++, -e.magnitude, e.magnitude);
      const Reference ref = reference(p);
      const Outputs f = fused_cpu(p, seed++);
      for (int64_t i = 0; i < p.n; ++i) {
        ASSERT_TRUE(std::isfinite(f.row_losses[i]) && std::isfinite(f.lse[i])) << describe(p);
        ASSERT_NEAR(f.row_losses[i], ref.row_loss[i], 1e-6 * std::fabs(ref.lse[i]) + 1e-6);
      }
      ASSERT_TRUE(std::isfinite(f.loss));
      for (int64_t i = 0; i < p.n * p.v; ++i) ASSERT_TRUE(std::isfinite(get(p.dtype, f.dlogits, i)));
      expect_grads(p, ref, f.dlogits, cpu_tol(e.dtype), "extreme " + describe(p));
    }
  }
}

TEST(CrossEntropyCpuTest, IgnoreIndex) {
  // A custom ignore_index that is also a valid class: rows with target 5 are ignored.
  Problem p = make_problem(DType::kF32, 6, 17, 17, Reduction::kMean, 1300);
  p.opts.ignore_index = 5;
  p.targets = {5, 2, 5, 16, 0, 5};
  const Reference ref = reference(p);
  const Outputs f = fused_cpu(p, 1);
  expect_losses(p, ref, f, cpu_tol(p.dtype), true, true, "ignore_index 5");
  expect_grads(p, ref, f.dlogits, cpu_tol(p.dtype), "ignore_index 5");
  EXPECT_EQ(f.row_losses[0], 0.0f);
  EXPECT_NEAR(f.loss, (ref.row_loss[1] + ref.row_loss[3] + ref.row_loss[4]) / 3, 1e-6);
  // Every row ignored: kMean gives loss 0 and zero gradients; kSum loss 0.
  for (Reduction r : {Reduction::kMean, Reduction::kSum}) {
    p.opts.reduction = r;
    p.targets.assign(p.n, 5);
    const Outputs all = fused_cpu(p, 2);
    EXPECT_EQ(all.loss, 0.0f) << reduction_name(r);
    for (int64_t i = 0; i < p.n * p.v; ++i) ASSERT_EQ(get(p.dtype, all.dlogits, i), 0.0);
    for (int64_t i = 0; i < p.n; ++i) ASSERT_EQ(all.row_losses[i], 0.0f);
  }
}

// The header's usage example, on the CPU.
TEST(CrossEntropyCpuTest, HeaderExample) {
  const int64_t n = 4;
  Problem p = make_problem(DType::kBF16, n, 50304, 50257, Reduction::kMean, 1400);
  float mean_loss = 0;
  std::vector<float> row_losses(n);
  std::vector<uint8_t> dlogits(p.logits.size());
  CrossEntropyOptions opts;
  ASSERT_TRUE(cross_entropy_fused_cpu(&mean_loss, row_losses.data(), nullptr, dlogits.data(),
                                      p.logits.data(), p.targets.data(), 1.0f, n, 50304, 50257,
                                      DType::kBF16, opts)
                  .ok());
  EXPECT_NEAR(mean_loss, reference(p).loss, 1e-5);
}

TEST(CrossEntropyCpuTest, RejectsBadArguments) {
  using Code = KernelStatus::Code;
  float logits[6] = {0.5f, -1.0f, 2.0f, 0.25f, 1.5f, -0.5f};
  float dlogits[6];
  float loss = 7.0f, rows[2] = {7.0f, 7.0f}, lse[2] = {7.0f, 7.0f};
  int32_t targets[2] = {1, 2};
  const CrossEntropyOptions mean;
  CrossEntropyOptions none;
  none.reduction = Reduction::kNone;
  auto fwd = [&](float* l, const void* x, const int32_t* t, int64_t n, int64_t v, int64_t vr,
                 DType dt, CrossEntropyOptions o) {
    return cross_entropy_forward_cpu(l, rows, lse, x, t, n, v, vr, dt, o).code();
  };
  EXPECT_EQ(fwd(&loss, nullptr, targets, 2, 3, 3, DType::kF32, mean), Code::kInvalidArgument);
  EXPECT_EQ(fwd(&loss, logits, nullptr, 2, 3, 3, DType::kF32, mean), Code::kInvalidArgument);
  EXPECT_EQ(fwd(nullptr, logits, targets, 2, 3, 3, DType::kF32, mean), Code::kInvalidArgument);
  EXPECT_EQ(fwd(nullptr, logits, targets, 2, 3, 3, DType::kF32, none), Code::kOk);
  EXPECT_EQ(fwd(&loss, logits, targets, -1, 3, 3, DType::kF32, mean), Code::kInvalidArgument);
  EXPECT_EQ(fwd(&loss, logits, targets, 2, 3, 4, DType::kF32, mean), Code::kInvalidArgument);
  EXPECT_EQ(fwd(&loss, logits, targets, 2, 3, 0, DType::kF32, mean), Code::kInvalidArgument);
  EXPECT_EQ(fwd(&loss, logits, targets, 2, 3, 3, DType::kI32, mean), Code::kUnsupported);
  EXPECT_EQ(fwd(&loss, reinterpret_cast<uint8_t*>(logits) + 1, targets, 1, 3, 3, DType::kF32, mean),
            Code::kInvalidArgument);
  CrossEntropyOptions bad;
  bad.reduction = static_cast<Reduction>(7);
  EXPECT_EQ(fwd(&loss, logits, targets, 2, 3, 3, DType::kF32, bad), Code::kInvalidArgument);
  EXPECT_EQ(cross_entropy_forward_cpu(&loss, nullptr, lse, logits, targets, 2, 3, 3, DType::kF32,
                                      mean)
                .code(),
            Code::kInvalidArgument);
  // n == 0 is valid and writes a zero loss.
  EXPECT_EQ(fwd(&loss, nullptr, nullptr, 0, 0, 0, DType::kF32, mean), Code::kOk);
  EXPECT_EQ(loss, 0.0f);
  // Out-of-range targets: invalid_argument, nothing written.
  for (int32_t t : {-1, 3, 1000, std::numeric_limits<int32_t>::min()}) {
    int32_t bad_targets[2] = {0, t};
    loss = 7.0f;
    rows[0] = rows[1] = 7.0f;
    EXPECT_EQ(fwd(&loss, logits, bad_targets, 2, 3, 3, DType::kF32, mean), Code::kInvalidArgument);
    EXPECT_EQ(cross_entropy_fused_cpu(&loss, rows, lse, dlogits, logits, bad_targets, 1.0f, 2, 3, 3,
                                      DType::kF32, mean)
                  .code(),
              Code::kInvalidArgument);
    EXPECT_EQ(loss, 7.0f);
    EXPECT_EQ(rows[0], 7.0f);
  }
  // Padding column is out of range too (targets must be < v_real).
  int32_t pad_target[2] = {0, 2};
  EXPECT_EQ(fwd(&loss, logits, pad_target, 2, 3, 2, DType::kF32, mean), Code::kInvalidArgument);
  // Backward needs lse and dlogits; partial overlap is rejected, exact aliasing is not.
  EXPECT_EQ(cross_entropy_backward_cpu(dlogits, logits, nullptr, targets, 1.0f, 2, 3, 3,
                                       DType::kF32, mean)
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(cross_entropy_backward_cpu(nullptr, logits, lse, targets, 1.0f, 2, 3, 3, DType::kF32,
                                       mean)
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(cross_entropy_fused_cpu(&loss, rows, lse, logits + 1, logits, targets, 1.0f, 1, 3, 3,
                                    DType::kF32, mean)
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(cross_entropy_fused_cpu(&loss, rows, lse, logits, logits, targets, 1.0f, 2, 3, 3,
                                    DType::kF32, mean)
                .code(),
            Code::kOk);
}

// ---- CUDA ---------------------------------------------------------------------

#if COLOSSAL_WITH_CUDA
// The CPU path's outputs in the shape of a Reference (probabilities and the
// gradient weight from the float64 reference), to compare CUDA against them.
Reference as_reference(const Problem& p, const Reference& ref, const Outputs& cpu) {
  Reference r = ref;
  for (int64_t i = 0; i < p.n; ++i) {
    r.row_loss[i] = cpu.row_losses[i];
    r.lse[i] = cpu.lse[i];
  }
  for (int64_t i = 0; i < p.n * p.v; ++i) r.grad[i] = get(p.dtype, cpu.dlogits, i);
  r.loss = cpu.loss;
  return r;
}

enum class Call { kFused, kForwardBackward };

// Runs the CUDA path with poisoned, guarded outputs. logits_misalign and
// dlogits_misalign shift the buffers by whole elements (rows then start at
// other 16-byte phases; unequal shifts take the one-element path).
Outputs run_cuda(const Problem& p, Call call, size_t logits_misalign, size_t dlogits_misalign,
                 bool in_place = false) {
  const size_t bytes = p.logits.size();
  DeviceBuffer logits(bytes, logits_misalign), dlogits(bytes, dlogits_misalign);
  DeviceBuffer targets(p.n * sizeof(int32_t), 0), rows(p.n * sizeof(float), 0),
      lse(p.n * sizeof(float), 0), loss(sizeof(float), 0);
  logits.upload(p.logits.data(), bytes);
  targets.upload(p.targets.data(), p.n * sizeof(int32_t));
  void* d = in_place ? static_cast<void*>(logits.ptr()) : static_cast<void*>(dlogits.ptr());
  KernelStatus s;
  if (call == Call::kFused) {
    s = cross_entropy_fused_cuda(loss.as<float>(), rows.as<float>(), lse.as<float>(), d,
                                 logits.ptr(), targets.as<int32_t>(), p.dloss, p.n, p.v, p.v_real,
                                 p.dtype, p.opts, nullptr);
  } else {
    s = cross_entropy_forward_cuda(loss.as<float>(), rows.as<float>(), lse.as<float>(),
                                   logits.ptr(), targets.as<int32_t>(), p.n, p.v, p.v_real,
                                   p.dtype, p.opts, nullptr);
    EXPECT_TRUE(s.ok()) << s.message();
    s = cross_entropy_backward_cuda(d, logits.ptr(), lse.as<float>(), targets.as<int32_t>(),
                                    p.dloss, p.n, p.v, p.v_real, p.dtype, p.opts, nullptr);
  }
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Outputs o;
  o.row_losses = as_floats(rows.download(p.n * sizeof(float)));
  o.lse = as_floats(lse.download(p.n * sizeof(float)));
  o.loss = as_floats(loss.download(sizeof(float)))[0];
  o.dlogits = in_place ? logits.download(bytes) : dlogits.download(bytes);
  return o;
}

#endif  // COLOSSAL_WITH_CUDA

TEST(CrossEntropyCudaTest, MatchesCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const Shape shapes[] = {{1, 1, 1},       {3, 3, 3},         {40, 17, 17},     {33, 20, 17},
                          {1000, 1000, 999}, {600, 4097, 4097}, {24, 50257, 50257},
                          {17, 50304, 50257}, {6, 128256, 128256}, {3, 131072, 128000}};
  struct Alignment {
    size_t logits, dlogits;  // in elements
  };
  const Alignment alignments[] = {{0, 0}, {1, 1}, {3, 1}};
  uint32_t seed = 2000;
  int variant = 0;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    const size_t es = dtype_size(dtype);
    for (const Shape& s : shapes) {
      for (const Alignment& al : alignments) {
        const Reduction r = kReductions[variant++ % 3];
        const Problem p = make_problem(dtype, s.n, s.v, s.v_real, r, seed++);
        const Reference ref = reference(p);
        const Outputs cpu = fused_cpu(p, seed++);
        const Tol tol = cuda_tol(dtype);
        const std::string what = describe(p) + " misalign " + std::to_string(al.logits) + "/" +
                                 std::to_string(al.dlogits);
        const Outputs fused = run_cuda(p, Call::kFused, al.logits * es, al.dlogits * es);
        expect_losses(p, ref, fused, tol, true, true, "cuda fused " + what);
        expect_grads(p, ref, fused.dlogits, tol, "cuda fused " + what);
        if (r == Reduction::kNone) {
          uint32_t bits;
          std::memcpy(&bits, &fused.loss, sizeof(bits));
          EXPECT_EQ(bits, 0xA5A5A5A5u) << "kNone wrote loss";
        }
        const Outputs fb = run_cuda(p, Call::kForwardBackward, al.logits * es, al.dlogits * es);
        expect_losses(p, ref, fb, tol, true, true, "cuda forward " + what);
        Tol btol = tol;
        btol.rtol += 1e-6;
        expect_grads(p, ref, fb.dlogits, btol, "cuda backward " + what);
        // And against the CPU path's own (rounded) outputs, same tolerances.
        const Reference cpu_ref = as_reference(p, ref, cpu);
        expect_losses(p, cpu_ref, fused, tol, true, true, "cuda fused vs cpu " + what);
        expect_grads(p, cpu_ref, fused.dlogits, tol, "cuda fused vs cpu " + what);
      }
    }
  }
#endif
}

TEST(CrossEntropyCudaTest, InPlaceMatchesOutOfPlace) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const Shape shapes[] = {{7, 17, 17}, {64, 50257, 50257}, {8, 128256, 128256}, {5, 4097, 4000}};
  uint32_t seed = 3000;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const Shape& s : shapes) {
      const Problem p = make_problem(dtype, s.n, s.v, s.v_real, Reduction::kMean, seed++);
      for (Call call : {Call::kFused, Call::kForwardBackward}) {
        const Outputs out = run_cuda(p, call, 0, 0);
        const Outputs in = run_cuda(p, call, 0, 0, /*in_place=*/true);
        EXPECT_EQ(in.dlogits, out.dlogits) << "in place " << describe(p);
        EXPECT_EQ(in.row_losses, out.row_losses) << "in place " << describe(p);
        EXPECT_EQ(std::memcmp(&in.loss, &out.loss, sizeof(float)), 0);
      }
    }
  }
#endif
}

TEST(CrossEntropyCudaTest, Deterministic) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Problem p = make_problem(dtype, 2000, 4097, 4097, Reduction::kMean, 3100);
    const Outputs a = run_cuda(p, Call::kFused, 0, 0);
    const Outputs b = run_cuda(p, Call::kFused, 0, 0);
    EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(float)), 0);
    EXPECT_EQ(a.row_losses, b.row_losses);
    EXPECT_EQ(a.dlogits, b.dlogits);
  }
#endif
}

TEST(CrossEntropyCudaTest, ExtremeLogitsStayFinite) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 3200;
  for (const Extreme& e : kExtremes) {
    if (e.dtype == DType::kF64) continue;
    for (Reduction r : kReductions) {
      const Problem p = make_problem(e.dtype, 9, 5003, 5003, r, seed++, -e.magnitude, e.magnitude);
      const Reference ref = reference(p);
      const Outputs f = run_cuda(p, Call::kFused, 0, 0);
      for (int64_t i = 0; i < p.n; ++i) {
        ASSERT_TRUE(std::isfinite(f.row_losses[i]) && std::isfinite(f.lse[i])) << describe(p);
        // float32 math: lse - x_t loses |x| * 2^-23.
        ASSERT_NEAR(f.row_losses[i], ref.row_loss[i], 4e-7 * e.magnitude + 1e-5) << describe(p);
      }
      ASSERT_TRUE(std::isfinite(f.loss));
      for (int64_t i = 0; i < p.n * p.v; ++i) {
        ASSERT_TRUE(std::isfinite(get(p.dtype, f.dlogits, i))) << describe(p) << " " << i;
      }
    }
  }
#endif
}

// Out-of-range targets: NaN loss, NaN gradient row, no access outside the
// buffers (guard bands), other rows exact.
TEST(CrossEntropyCudaTest, OutOfRangeTargetsAreFlaggedNotFatal) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Problem p = make_problem(dtype, 8, 1030, 1000, Reduction::kMean, 3300);
    for (int32_t t : kBadTargets) {
      p.targets[2] = t;
      for (Call call : {Call::kFused, Call::kForwardBackward}) {
        const Outputs o = run_cuda(p, call, dtype_size(dtype), dtype_size(dtype));
        EXPECT_TRUE(std::isnan(o.row_losses[2])) << t;
        EXPECT_TRUE(std::isnan(o.loss)) << t;
        EXPECT_TRUE(std::isfinite(o.lse[2])) << t;
        for (int64_t j = 0; j < p.v; ++j) ASSERT_TRUE(std::isnan(get(dtype, o.dlogits, 2 * p.v + j)));
        for (int64_t i : {0, 1, 3, 7}) {
          ASSERT_TRUE(std::isfinite(o.row_losses[i]));
          ASSERT_TRUE(std::isfinite(get(dtype, o.dlogits, i * p.v)));
        }
      }
    }
  }
#endif
}

TEST(CrossEntropyCudaTest, IgnoredRowsAndEmptyInputs) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  Problem p = make_problem(DType::kBF16, 5, 50257, 50257, Reduction::kMean, 3400);
  p.targets.assign(p.n, p.opts.ignore_index);
  for (Call call : {Call::kFused, Call::kForwardBackward}) {
    const Outputs o = run_cuda(p, call, 0, 0);
    EXPECT_EQ(o.loss, 0.0f);
    for (int64_t i = 0; i < p.n; ++i) ASSERT_EQ(o.row_losses[i], 0.0f);
    for (int64_t i = 0; i < p.n * p.v; ++i) ASSERT_EQ(get(p.dtype, o.dlogits, i), 0.0);
  }
  // n == 0: ok, loss = 0 (after the stream's work).
  DeviceBuffer loss(sizeof(float), 0);
  const CrossEntropyOptions opts;
  ASSERT_TRUE(cross_entropy_fused_cuda(loss.as<float>(), nullptr, nullptr, nullptr, nullptr,
                                       nullptr, 1.0f, 0, 0, 0, DType::kBF16, opts, nullptr)
                  .ok());
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(as_floats(loss.download(sizeof(float)))[0], 0.0f);
#endif
}

TEST(CrossEntropyCudaTest, RejectsBadArguments) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  using Code = KernelStatus::Code;
  DeviceBuffer buf(4096, 0);
  float* f = buf.as<float>();
  const int32_t* t = buf.as<int32_t>();
  const CrossEntropyOptions mean;
  EXPECT_EQ(cross_entropy_forward_cuda(f, f, f, nullptr, t, 2, 3, 3, DType::kF32, mean, nullptr)
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(cross_entropy_forward_cuda(f, f, f, f, t, 2, 3, 3, DType::kF64, mean, nullptr).code(),
            Code::kUnsupported);
  EXPECT_EQ(cross_entropy_forward_cuda(f, f, f, f, t, 1, int64_t{1} << 31, 3, DType::kF32, mean,
                                       nullptr)
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(cross_entropy_backward_cuda(f, f, nullptr, t, 1.0f, 2, 3, 3, DType::kF32, mean, nullptr)
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(cross_entropy_fused_cuda(nullptr, f, f, f, f, t, 1.0f, 2, 3, 3, DType::kF32, mean,
                                     nullptr)
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(cross_entropy_fused_cuda(f, f, f, f + 1, f, t, 1.0f, 2, 3, 3, DType::kF32, mean, nullptr)
                .code(),
            Code::kInvalidArgument);
#endif
}

}  // namespace
}  // namespace colossal::kernels::loss
