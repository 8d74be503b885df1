// kernels/layernorm: the CPU path against a float64 reference written here,
// finite-difference gradients in float64, the gradient contract (dgamma/dbeta
// accumulate, dx overwritten, accumulated or added to a residual gradient),
// and the CUDA path against the
// CPU path on fresh random data of many shapes, dtypes and alignments.
#include "kernels/layernorm/layernorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/common/half.h"
#include "tests/util/gpu_test.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::layernorm {
namespace {

// kResidual / kResidualRms: the fused residual add + LayerNorm / RMSNorm forward.
enum class Kind { kLayerNorm, kRmsNorm, kResidual, kResidualRms };
constexpr Kind kAllKinds[] = {Kind::kLayerNorm, Kind::kRmsNorm, Kind::kResidual,
                              Kind::kResidualRms};
bool is_rms(Kind k) { return k == Kind::kRmsNorm || k == Kind::kResidualRms; }
bool has_residual(Kind k) { return k == Kind::kResidual || k == Kind::kResidualRms; }

// What the backward does with dx: overwrite it, add into it (accumulate_dx),
// or write residual_grad + gradient (a separate buffer).
enum class DxMode { kOverwrite, kAccumulate, kResidualGrad };
constexpr DxMode kAllDxModes[] = {DxMode::kOverwrite, DxMode::kAccumulate, DxMode::kResidualGrad};
const char* mode_name(DxMode m) {
  switch (m) {
    case DxMode::kOverwrite: return "/overwrite_dx";
    case DxMode::kAccumulate: return "/accumulate_dx";
    case DxMode::kResidualGrad: return "/residual_grad";
  }
  return "?";
}
constexpr DType kCpuTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};
constexpr float kEps = 1e-5f;

#define EXPECT_CODE(expr, c) EXPECT_EQ((expr).code(), KernelStatus::Code::c) << #expr

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kLayerNorm: return "layernorm";
    case Kind::kRmsNorm: return "rmsnorm";
    case Kind::kResidual: return "residual+layernorm";
    case Kind::kResidualRms: return "residual+rmsnorm";
  }
  return "?";
}

std::string label(Kind k, DType d, int64_t rows, int64_t C) {
  return std::string(kind_name(k)) + "/" + dtype_name(d) + "/rows=" + std::to_string(rows) +
         "/C=" + std::to_string(C);
}

// A host array of `dtype` elements, read and written as double (writes round
// to the dtype: to nearest even, via float for float16/bfloat16).
class HostArray {
  template <typename S>
  static S read(const uint8_t* p) {
    S v;
    std::memcpy(&v, p, sizeof(S));
    return v;
  }
  template <typename S>
  static void write(uint8_t* p, S v) {
    std::memcpy(p, &v, sizeof(S));
  }

 public:
  HostArray(DType dtype, int64_t n) : dtype_(dtype), n_(n), bytes_(n * dtype_size(dtype)) {}
  double get(int64_t i) const {
    const uint8_t* p = bytes_.data() + i * dtype_size(dtype_);
    switch (dtype_) {
      case DType::kF32: return read<float>(p);
      case DType::kF64: return read<double>(p);
      case DType::kF16: return half_to_float(read<Half>(p));
      case DType::kBF16: return bfloat16_to_float(read<BFloat16>(p));
      default: return std::numeric_limits<double>::quiet_NaN();
    }
  }
  void set(int64_t i, double value) {
    uint8_t* p = bytes_.data() + i * dtype_size(dtype_);
    const float f = static_cast<float>(value);
    switch (dtype_) {
      case DType::kF32: write(p, f); break;
      case DType::kF64: write(p, value); break;
      case DType::kF16: write(p, float_to_half(f)); break;
      case DType::kBF16: write(p, float_to_bfloat16(f)); break;
      default: break;
    }
  }
  std::vector<double> values() const {
    std::vector<double> v(n_);
    for (int64_t i = 0; i < n_; ++i) v[i] = get(i);
    return v;
  }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  size_t bytes() const { return bytes_.size(); }
  int64_t size() const { return n_; }
  DType dtype() const { return dtype_; }

 private:
  DType dtype_;
  int64_t n_;
  std::vector<uint8_t> bytes_;
};

HostArray random_array(DType dtype, int64_t n, uint32_t seed, float lo, float hi) {
  HostArray a(dtype, n);
  const std::vector<float> v = testing::random_floats(n, seed, lo, hi);
  for (int64_t i = 0; i < n; ++i) a.set(i, v[i]);
  return a;
}

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Every element within atol + rtol * |want| (NaN never passes).
void expect_near_all(const std::string& what, const std::vector<double>& got,
                     const std::vector<double>& want, double rtol, double atol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]))) {
      if (++bad <= 5)
        ADD_FAILURE() << what << " i=" << i << " got " << got[i] << " want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements off";
}

struct Tol {
  double rtol, atol;
};

// CPU vs the float64 reference: the CPU computes in double and rounds once
// (float16/bfloat16 via float), so one ulp of the dtype bounds the error.
Tol cpu_tol(DType d) {
  switch (d) {
    case DType::kF64: return {1e-12, 1e-12};
    case DType::kF32: return {2.4e-7, 2.4e-7};  // 2^-23: one ulp
    case DType::kF16: return {1e-3, 1e-3};      // 2^-10
    default: return {7.9e-3, 7.9e-3};           // bfloat16, 2^-7
  }
}

// ---- float64 reference ------------------------------------------------------

struct RefForward {
  std::vector<double> out, mean, rstd;
  HostArray residual_out;
};

// `x` already holds the values normalised (residual_out for the fused kind).
RefForward ref_forward(Kind kind, const HostArray& x, const HostArray* residual,
                       const HostArray& gamma, const HostArray& beta, int64_t rows, int64_t C) {
  RefForward r{std::vector<double>(rows * C), std::vector<double>(rows), std::vector<double>(rows),
               HostArray(x.dtype(), rows * C)};
  std::vector<double> v(rows * C);
  for (int64_t i = 0; i < rows * C; ++i) {
    if (has_residual(kind)) {
      // The dtype's own addition: float for float16/bfloat16/float32, rounded once.
      const double a = x.get(i), b = residual->get(i);
      r.residual_out.set(i, x.dtype() == DType::kF64 ? a + b
                                                     : static_cast<double>(static_cast<float>(a) +
                                                                           static_cast<float>(b)));
      v[i] = r.residual_out.get(i);
    } else {
      v[i] = x.get(i);
    }
  }
  for (int64_t row = 0; row < rows; ++row) {
    const double* xr = v.data() + row * C;
    double mean = 0.0;
    if (!is_rms(kind)) {
      for (int64_t c = 0; c < C; ++c) mean += xr[c];
      mean /= static_cast<double>(C);
    }
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) ss += (xr[c] - mean) * (xr[c] - mean);
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(C) + kEps);
    r.mean[row] = mean;
    r.rstd[row] = rstd;
    for (int64_t c = 0; c < C; ++c) {
      r.out[row * C + c] =
          (xr[c] - mean) * rstd * gamma.get(c) + (is_rms(kind) ? 0.0 : beta.get(c));
    }
  }
  return r;
}

struct RefBackward {
  std::vector<double> dx, dgamma, dbeta;  // fresh gradients (nothing accumulated)
};

RefBackward ref_backward(bool rms, const HostArray& dout, const HostArray& x,
                         const std::vector<float>& mean, const std::vector<float>& rstd,
                         const HostArray& gamma, int64_t rows, int64_t C) {
  RefBackward r{std::vector<double>(rows * C), std::vector<double>(C, 0.0),
                std::vector<double>(C, 0.0)};
  for (int64_t row = 0; row < rows; ++row) {
    const double m = rms ? 0.0 : mean[row], rs = rstd[row];
    std::vector<double> xhat(C), g(C);
    double s1 = 0.0, s2 = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = row * C + c;
      xhat[c] = (x.get(i) - m) * rs;
      g[c] = dout.get(i) * gamma.get(c);
      s1 += g[c];
      s2 += g[c] * xhat[c];
      r.dgamma[c] += dout.get(i) * xhat[c];
      r.dbeta[c] += dout.get(i);
    }
    for (int64_t c = 0; c < C; ++c) {
      r.dx[row * C + c] = (g[c] - (rms ? 0.0 : s1 / C) - xhat[c] * s2 / C) * rs;
    }
  }
  return r;
}

// ---- calling the CPU functions by kind -----------------------------------------

struct Inputs {
  HostArray x, residual, gamma, beta;
};

Inputs random_inputs(DType d, int64_t rows, int64_t C, uint32_t seed, float offset = 0.5f) {
  // x has a non-zero mean (offset) so LayerNorm's centring matters.
  return {random_array(d, rows * C, seed, offset - 2.0f, offset + 2.0f),
          random_array(d, rows * C, seed + 1, -1.0f, 1.0f),
          random_array(d, C, seed + 2, 0.5f, 1.5f), random_array(d, C, seed + 3, -0.5f, 0.5f)};
}

KernelStatus forward_cpu(Kind kind, HostArray& out, HostArray& residual_out, float* mean,
                         float* rstd, const Inputs& in, int64_t rows, int64_t C) {
  const DType d = in.x.dtype();
  switch (kind) {
    case Kind::kLayerNorm:
      return layernorm_forward_cpu(out.data(), mean, rstd, in.x.data(), in.gamma.data(),
                                   in.beta.data(), rows, C, d, {kEps});
    case Kind::kRmsNorm:
      return rmsnorm_forward_cpu(out.data(), rstd, in.x.data(), in.gamma.data(), rows, C, d,
                                 {kEps});
    case Kind::kResidual:
      return fused_residual_layernorm_forward_cpu(residual_out.data(), out.data(), mean, rstd,
                                                  in.x.data(), in.residual.data(), in.gamma.data(),
                                                  in.beta.data(), rows, C, d, {kEps});
    case Kind::kResidualRms:
      return fused_residual_rmsnorm_forward_cpu(residual_out.data(), out.data(), rstd, in.x.data(),
                                                in.residual.data(), in.gamma.data(), rows, C, d,
                                                {kEps});
  }
  return KernelStatus::invalid_argument("kind");
}

// residual_grad: read in DxMode::kResidualGrad only.
KernelStatus backward_cpu(bool rms, HostArray& dx, HostArray& dgamma, HostArray& dbeta,
                          const HostArray& dout, const HostArray& x, const std::vector<float>& mean,
                          const std::vector<float>& rstd, const HostArray& gamma, int64_t rows,
                          int64_t C, DxMode mode, const HostArray* residual_grad = nullptr) {
  const BackwardOptions o{
      .accumulate_dx = mode == DxMode::kAccumulate,
      .residual_grad = mode == DxMode::kResidualGrad ? residual_grad->data() : nullptr};
  if (rms) {
    return rmsnorm_backward_cpu(dx.data(), dgamma.data(), dout.data(), x.data(), rstd.data(),
                                gamma.data(), rows, C, x.dtype(), o);
  }
  return layernorm_backward_cpu(dx.data(), dgamma.data(), dbeta.data(), dout.data(), x.data(),
                                mean.data(), rstd.data(), gamma.data(), rows, C, x.dtype(), o);
}

constexpr int64_t kCpuShapes[][2] = {{1, 1}, {3, 17}, {2, 77}, {4, 768}, {2, 1000}, {2, 4097}};

// ---- CPU tests ------------------------------------------------------------------

TEST(LayerNormCpuTest, ForwardMatchesFloat64Reference) {
  uint32_t seed = 1;
  for (Kind kind : kAllKinds) {
    for (DType d : kCpuTypes) {
      for (const auto& shape : kCpuShapes) {
        const int64_t rows = shape[0], C = shape[1];
        const std::string what = label(kind, d, rows, C);
        const Inputs in = random_inputs(d, rows, C, seed += 4);
        HostArray out(d, rows * C), res_out(d, rows * C);
        testing::poison(out.data(), out.bytes());
        testing::poison(res_out.data(), res_out.bytes());
        std::vector<float> mean(rows, -7.0f), rstd(rows, -7.0f);
        ASSERT_TRUE(forward_cpu(kind, out, res_out, mean.data(), rstd.data(), in, rows, C).ok());
        const RefForward ref = ref_forward(kind, in.x, &in.residual, in.gamma, in.beta, rows, C);
        const Tol t = cpu_tol(d);
        expect_near_all(what + " out", out.values(), ref.out, t.rtol, t.atol);
        // Saved statistics are float32 for every dtype: one float rounding.
        expect_near_all(what + " rstd", widen(rstd), ref.rstd, 1.2e-7, 0.0);
        if (!is_rms(kind)) {
          expect_near_all(what + " mean", widen(mean), ref.mean, 1.2e-7, 1e-30);
        } else {
          EXPECT_EQ(mean[0], -7.0f) << what << ": rmsnorm has no mean";
        }
        if (has_residual(kind)) {
          EXPECT_EQ(std::memcmp(res_out.data(), ref.residual_out.data(), res_out.bytes()), 0)
              << what << " residual_out";
        }
      }
    }
  }
}

TEST(LayerNormCpuTest, BackwardMatchesFloat64ReferenceAndAccumulates) {
  uint32_t seed = 500;
  for (bool rms : {false, true}) {
    for (DType d : kCpuTypes) {
      for (const auto& shape : kCpuShapes) {
        for (DxMode mode : kAllDxModes) {
          const int64_t rows = shape[0], C = shape[1];
          const std::string what =
              label(rms ? Kind::kRmsNorm : Kind::kLayerNorm, d, rows, C) + mode_name(mode);
          const Inputs in = random_inputs(d, rows, C, seed += 8);
          std::vector<float> mean(rows), rstd(rows);
          HostArray out(d, rows * C), unused(d, rows * C);
          ASSERT_TRUE(forward_cpu(rms ? Kind::kRmsNorm : Kind::kLayerNorm, out, unused, mean.data(),
                                  rstd.data(), in, rows, C)
                          .ok());
          const HostArray dout = random_array(d, rows * C, seed + 4, -1.0f, 1.0f);
          // Gradients start from known random values, never zeros.
          HostArray dx = random_array(d, rows * C, seed + 5, -1.0f, 1.0f);
          HostArray dgamma = random_array(d, C, seed + 6, -1.0f, 1.0f);
          HostArray dbeta = random_array(d, C, seed + 7, -1.0f, 1.0f);
          const HostArray dx0 = dx, dgamma0 = dgamma, dbeta0 = dbeta;
          const HostArray rg = random_array(d, rows * C, seed + 3, -1.0f, 1.0f);
          ASSERT_TRUE(backward_cpu(rms, dx, dgamma, dbeta, dout, in.x, mean, rstd, in.gamma, rows,
                                   C, mode, &rg)
                          .ok());
          const RefBackward ref = ref_backward(rms, dout, in.x, mean, rstd, in.gamma, rows, C);
          std::vector<double> want_dx = ref.dx, want_dg = ref.dgamma, want_db = ref.dbeta;
          for (int64_t i = 0; i < rows * C; ++i) {
            want_dx[i] += mode == DxMode::kAccumulate     ? dx0.get(i)
                          : mode == DxMode::kResidualGrad ? rg.get(i)
                                                          : 0.0;
          }
          for (int64_t c = 0; c < C; ++c) {
            want_dg[c] += dgamma0.get(c);
            want_db[c] += dbeta0.get(c);
          }
          const Tol t = cpu_tol(d);
          expect_near_all(what + " dx", dx.values(), want_dx, t.rtol, t.atol);
          expect_near_all(what + " dgamma", dgamma.values(), want_dg, t.rtol, t.atol);
          if (rms) {
            EXPECT_EQ(std::memcmp(dbeta.data(), dbeta0.data(), dbeta.bytes()), 0)
                << what << ": rmsnorm has no dbeta";
          } else {
            expect_near_all(what + " dbeta", dbeta.values(), want_db, t.rtol, t.atol);
          }
        }
      }
    }
  }
}

// Overwrite means the result does not depend on what dx held; accumulate
// means old + fresh; dgamma/dbeta always old + fresh.
TEST(LayerNormCpuTest, GradientContract) {
  const int64_t rows = 5, C = 33;
  for (bool rms : {false, true}) {
    const Inputs in = random_inputs(DType::kF64, rows, C, 900);
    std::vector<float> mean(rows), rstd(rows);
    HostArray out(DType::kF64, rows * C), unused(DType::kF64, rows * C);
    ASSERT_TRUE(forward_cpu(rms ? Kind::kRmsNorm : Kind::kLayerNorm, out, unused, mean.data(),
                            rstd.data(), in, rows, C)
                    .ok());
    const HostArray dout = random_array(DType::kF64, rows * C, 901, -1.0f, 1.0f);
    const HostArray p1 = random_array(DType::kF64, rows * C, 902, -3.0f, 3.0f);
    const HostArray p2 = random_array(DType::kF64, rows * C, 903, -3.0f, 3.0f);
    const HostArray pg = random_array(DType::kF64, C, 904, -3.0f, 3.0f);
    const HostArray pb = random_array(DType::kF64, C, 905, -3.0f, 3.0f);
    auto run = [&](const HostArray& dx0, const HostArray& dg0, const HostArray& db0, DxMode mode) {
      HostArray dx = dx0, dg = dg0, db = db0;
      EXPECT_TRUE(
          backward_cpu(rms, dx, dg, db, dout, in.x, mean, rstd, in.gamma, rows, C, mode, &p1).ok());
      return std::vector<HostArray>{dx, dg, db};
    };
    const HostArray zero_x(DType::kF64, rows * C), zero_c(DType::kF64, C);  // zero-filled
    const auto fresh = run(zero_x, zero_c, zero_c, DxMode::kOverwrite);
    const auto over1 = run(p1, pg, pb, DxMode::kOverwrite);
    const auto over2 = run(p2, pg, pb, DxMode::kOverwrite);
    EXPECT_EQ(std::memcmp(over1[0].data(), fresh[0].data(), fresh[0].bytes()), 0)
        << "dx overwritten";
    EXPECT_EQ(std::memcmp(over2[0].data(), fresh[0].data(), fresh[0].bytes()), 0)
        << "dx overwritten";
    const auto acc = run(p1, pg, pb, DxMode::kAccumulate);
    // residual_grad = p1 read from its own buffer: dx (holding p2) is overwritten.
    const auto res = run(p2, pg, pb, DxMode::kResidualGrad);
    std::vector<double> want_dx(rows * C), want_dg(C), want_db(C);
    for (int64_t i = 0; i < rows * C; ++i) want_dx[i] = p1.get(i) + fresh[0].get(i);
    for (int64_t c = 0; c < C; ++c) {
      want_dg[c] = pg.get(c) + fresh[1].get(c);
      want_db[c] = rms ? pb.get(c) : pb.get(c) + fresh[2].get(c);
    }
    for (const auto* r : {&over1, &acc, &res}) {
      expect_near_all("dgamma += ", (*r)[1].values(), want_dg, 1e-14, 1e-14);
      expect_near_all("dbeta += ", (*r)[2].values(), want_db, 1e-14, 1e-14);
    }
    expect_near_all("dx += ", acc[0].values(), want_dx, 1e-14, 1e-14);
    // The same sums, bit for bit, whichever buffer the addend is read from.
    EXPECT_EQ(std::memcmp(res[0].data(), acc[0].data(), acc[0].bytes()), 0) << "residual_grad";
    // residual_grad may be dx itself, with or without accumulate_dx.
    HostArray dx = p1, dg = pg, db = pb;
    for (bool accumulate : {false, true}) {
      dx = p1;
      const BackwardOptions o{.accumulate_dx = accumulate, .residual_grad = dx.data()};
      ASSERT_TRUE((rms ? rmsnorm_backward_cpu(dx.data(), dg.data(), dout.data(), in.x.data(),
                                              rstd.data(), in.gamma.data(), rows, C, DType::kF64, o)
                       : layernorm_backward_cpu(dx.data(), dg.data(), db.data(), dout.data(),
                                                in.x.data(), mean.data(), rstd.data(),
                                                in.gamma.data(), rows, C, DType::kF64, o))
                      .ok());
      EXPECT_EQ(std::memcmp(dx.data(), acc[0].data(), acc[0].bytes()), 0) << "residual_grad = dx";
    }
  }
}

// Backward against central differences of the forward, all in float64 (the
// saved float32 statistics limit agreement to ~1e-7 relative).
TEST(LayerNormCpuTest, FiniteDifferenceGradients) {
  const DType d = DType::kF64;
  for (bool rms : {false, true}) {
    for (int64_t C : {2, 7, 17}) {
      const int64_t rows = 3;
      const Kind kind = rms ? Kind::kRmsNorm : Kind::kLayerNorm;
      Inputs in = random_inputs(d, rows, C, 1000 + C);
      const HostArray w = random_array(d, rows * C, 2000 + C, -1.0f, 1.0f);  // dL/dout
      auto loss = [&]() {
        HostArray out(d, rows * C), unused(d, rows * C);
        EXPECT_TRUE(forward_cpu(kind, out, unused, nullptr, nullptr, in, rows, C).ok());
        double l = 0.0;
        for (int64_t i = 0; i < rows * C; ++i) l += out.get(i) * w.get(i);
        return l;
      };
      auto numeric = [&](HostArray& a) {
        std::vector<double> g(a.size());
        for (int64_t i = 0; i < a.size(); ++i) {
          const double v = a.get(i), h = 1e-6;
          a.set(i, v + h);
          const double up = loss();
          a.set(i, v - h);
          const double down = loss();
          a.set(i, v);
          g[i] = (up - down) / (2 * h);
        }
        return g;
      };
      std::vector<float> mean(rows), rstd(rows);
      HostArray out(d, rows * C), unused(d, rows * C);
      ASSERT_TRUE(forward_cpu(kind, out, unused, mean.data(), rstd.data(), in, rows, C).ok());
      HostArray dx(d, rows * C), dgamma(d, C), dbeta(d, C);  // zero-filled
      ASSERT_TRUE(
          backward_cpu(rms, dx, dgamma, dbeta, w, in.x, mean, rstd, in.gamma, rows, C,
                       DxMode::kOverwrite)
              .ok());
      const std::string what = label(kind, d, rows, C);
      expect_near_all(what + " dx", dx.values(), numeric(in.x), 1e-5, 1e-5);
      expect_near_all(what + " dgamma", dgamma.values(), numeric(in.gamma), 1e-5, 1e-5);
      if (!rms) expect_near_all(what + " dbeta", dbeta.values(), numeric(in.beta), 1e-5, 1e-5);
    }
  }
}

TEST(LayerNormCpuTest, StatisticsAreOptional) {
  const int64_t rows = 3, C = 40;
  for (Kind kind : kAllKinds) {
    const Inputs in = random_inputs(DType::kF32, rows, C, 77);
    HostArray a(DType::kF32, rows * C), b(DType::kF32, rows * C), ra(a), rb(b);
    std::vector<float> mean(rows), rstd(rows);
    ASSERT_TRUE(forward_cpu(kind, a, ra, mean.data(), rstd.data(), in, rows, C).ok());
    ASSERT_TRUE(forward_cpu(kind, b, rb, nullptr, nullptr, in, rows, C).ok());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.bytes()), 0) << kind_name(kind);
  }
}

TEST(LayerNormCpuTest, ScratchBytes) {
  EXPECT_EQ(layernorm_backward_scratch_bytes(0, 768), 0u);
  EXPECT_EQ(layernorm_backward_scratch_bytes(5, 0), 0u);
  EXPECT_EQ(layernorm_backward_scratch_bytes(-1, 8), 0u);
  EXPECT_EQ(layernorm_backward_scratch_bytes(10, 5), 10u * 5 * 4 * 2);
  EXPECT_EQ(rmsnorm_backward_scratch_bytes(10, 5), 10u * 5 * 4);
  // At most 256 partial rows however many rows there are.
  EXPECT_EQ(layernorm_backward_scratch_bytes(8192, 768), 256u * 768 * 4 * 2);
  EXPECT_EQ(rmsnorm_backward_scratch_bytes(8192, 768), 256u * 768 * 4);
}

TEST(LayerNormCpuTest, RejectsBadArguments) {
  float x[4] = {1, 2, 3, 4}, y[4], g[4] = {1, 1, 1, 1}, b[4] = {0, 0, 0, 0}, m[1], r[1];
  const DType f = DType::kF32;
  EXPECT_CODE(layernorm_forward_cpu(nullptr, m, r, x, g, b, 1, 4, f, {}), kInvalidArgument);
  EXPECT_CODE(layernorm_forward_cpu(y, m, r, x, nullptr, b, 1, 4, f, {}), kInvalidArgument);
  EXPECT_CODE(layernorm_forward_cpu(y, m, r, x, g, nullptr, 1, 4, f, {}), kInvalidArgument);
  EXPECT_CODE(layernorm_forward_cpu(y, m, r, x, g, b, -1, 4, f, {}), kInvalidArgument);
  EXPECT_CODE(layernorm_forward_cpu(y, m, r, x, g, b, 1, -4, f, {}), kInvalidArgument);
  EXPECT_CODE(layernorm_forward_cpu(y, m, r, x, g, b, 1, 0, f, {}), kInvalidArgument);
  EXPECT_CODE(layernorm_forward_cpu(y, m, r, x, g, b, 1, 4, f, {-1.0f}), kInvalidArgument);
  EXPECT_CODE(layernorm_forward_cpu(y, m, r, x, g, b, 1, 4, f, {std::nanf("")}), kInvalidArgument);
  EXPECT_CODE(layernorm_forward_cpu(y, m, r, x, g, b, 1, 4, DType::kI32, {}), kUnsupported);
  EXPECT_TRUE(
      layernorm_forward_cpu(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 4, f, {})
          .ok());
  EXPECT_CODE(rmsnorm_forward_cpu(y, r, nullptr, g, 1, 4, f, {}), kInvalidArgument);
  EXPECT_CODE(fused_residual_layernorm_forward_cpu(nullptr, y, m, r, x, x, g, b, 1, 4, f, {}),
              kInvalidArgument);
  EXPECT_CODE(fused_residual_layernorm_forward_cpu(y, y, m, r, x, nullptr, g, b, 1, 4, f, {}),
              kInvalidArgument);
  float dx[4], dg[4], db[4];
  EXPECT_CODE(layernorm_backward_cpu(dx, dg, db, x, x, nullptr, r, g, 1, 4, f, {}),
              kInvalidArgument);
  EXPECT_CODE(layernorm_backward_cpu(dx, dg, nullptr, x, x, m, r, g, 1, 4, f, {}),
              kInvalidArgument);
  EXPECT_CODE(rmsnorm_backward_cpu(dx, dg, x, x, nullptr, g, 1, 4, f, {}), kInvalidArgument);
  EXPECT_CODE(rmsnorm_backward_cpu(dx, dg, x, x, r, g, 1, 4, DType::kU8, {}), kUnsupported);
  // accumulate_dx adds into dx: a different residual_grad is a contradiction.
  EXPECT_CODE(layernorm_backward_cpu(dx, dg, db, x, x, m, r, g, 1, 4, f,
                                     {.accumulate_dx = true, .residual_grad = y}),
              kInvalidArgument);
  EXPECT_CODE(rmsnorm_backward_cpu(dx, dg, x, x, r, g, 1, 4, f,
                                   {.accumulate_dx = true, .residual_grad = y}),
              kInvalidArgument);
  EXPECT_CODE(fused_residual_rmsnorm_forward_cpu(y, y, r, x, nullptr, g, 1, 4, f, {}),
              kInvalidArgument);
  EXPECT_TRUE(
      rmsnorm_backward_cpu(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 4, f, {}).ok());
}

// The header's usage example.
TEST(LayerNormCpuTest, HeaderExample) {
  const int64_t rows = 4, C = 768;
  const Inputs in = random_inputs(DType::kF32, rows, C, 31);
  const HostArray dout = random_array(DType::kF32, rows * C, 32, -1.0f, 1.0f);
  std::vector<float> out(rows * C), dx(rows * C), dgamma(C, 0.0f), dbeta(C, 0.0f);
  float mean[4], rstd[4];
  KernelStatus s = layernorm_forward_cpu(out.data(), mean, rstd, in.x.data(), in.gamma.data(),
                                         in.beta.data(), rows, C, DType::kF32, {});
  ASSERT_TRUE(s.ok()) << s.message();
  s = layernorm_backward_cpu(dx.data(), dgamma.data(), dbeta.data(), dout.data(), in.x.data(), mean,
                             rstd, in.gamma.data(), rows, C, DType::kF32, {.accumulate_dx = false});
  ASSERT_TRUE(s.ok()) << s.message();
  // Each normalised row has mean 0 and variance 1 before gamma/beta, so
  // sum(dx) over a row is 0 (dx is orthogonal to the constant direction).
  for (int64_t row = 0; row < rows; ++row) {
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) sum += dx[row * C + c];
    EXPECT_NEAR(sum, 0.0, 1e-3);
  }
}

// ---- CUDA tests -------------------------------------------------------------------

#if COLOSSAL_WITH_CUDA
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

constexpr DType kCudaTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// CUDA vs CPU. float32: the GPU sums in float32 (rows of up to 65544
// elements, |x| <= 2.5), the CPU in double: ~1e-6 expected, 2e-5 allowed.
// float16/bfloat16: both round nearly the same value to the dtype, so they
// differ by at most one ulp (2^-10, 2^-7 relative).
Tol gpu_tol(DType d) {
  switch (d) {
    case DType::kF32: return {2e-5, 2e-5};
    case DType::kF16: return {1e-3, 1e-3};
    default: return {1e-2, 1e-2};
  }
}

// Shapes reaching every launch configuration (see layernorm.cu): warp-per-row
// with 1..8 packs, block-per-row with 1..8 packs, the looped kernels, 16-byte
// and scalar packs (odd C), rows above the backward's 256 blocks.
constexpr int64_t kCudaShapes[][2] = {
    {1, 1},     {3, 3},    {5, 17},    {7, 77},    {4, 8},      {33, 64},   {2, 256},   {37, 512},
    {300, 768}, {9, 1000}, {11, 1024}, {6, 1600},  {260, 1600}, {3, 2048},  {5, 4096},  {3, 4097},
    {2, 8192},  {2, 8196}, {2, 16384}, {2, 16392}, {1, 32768},  {1, 32772}, {2, 65544}, {1000, 40}};

constexpr size_t kGuard = 256;  // poisoned bytes on each side of a device buffer

// A device buffer whose payload starts `offset` bytes past a 256-byte aligned
// address (offset = one element makes every pointer misaligned), between
// poisoned guard bands. The payload starts poisoned too.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes, size_t offset = 0)
      : bytes_(bytes), offset_(offset), total_(2 * kGuard + offset + bytes) {
    EXPECT_EQ(cudaMalloc(&base_, total_), cudaSuccess);
    std::vector<uint8_t> poison(total_);
    testing::poison(poison.data(), total_);
    EXPECT_EQ(cudaMemcpy(base_, poison.data(), total_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return base_ + kGuard + offset_; }
  float* floats() const { return static_cast<float*>(get()); }
  void upload(const void* host) {
    EXPECT_EQ(cudaMemcpy(get(), host, bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  // Copies the payload to `host`; false if any byte around it changed.
  bool download(void* host) const {
    std::vector<uint8_t> all(total_);
    EXPECT_EQ(cudaMemcpy(all.data(), base_, total_, cudaMemcpyDeviceToHost), cudaSuccess);
    std::memcpy(host, all.data() + kGuard + offset_, bytes_);
    for (size_t i = 0; i < total_; ++i) {
      const bool payload = i >= kGuard + offset_ && i < kGuard + offset_ + bytes_;
      if (!payload && all[i] != 0xA5) return false;
    }
    return true;
  }

 private:
  uint8_t* base_ = nullptr;
  size_t bytes_, offset_, total_;
};

void check_forward(Kind kind, DType d, int64_t rows, int64_t C, size_t offset_elems,
                   uint32_t seed) {
  const std::string what = label(kind, d, rows, C) + "/offset=" + std::to_string(offset_elems);
  const Inputs in = random_inputs(d, rows, C, seed);
  HostArray want(d, rows * C), want_res(d, rows * C);
  std::vector<float> want_mean(rows), want_rstd(rows);
  ASSERT_TRUE(
      forward_cpu(kind, want, want_res, want_mean.data(), want_rstd.data(), in, rows, C).ok());

  const size_t off = offset_elems * dtype_size(d);
  DeviceBuffer x(in.x.bytes(), off), res(in.residual.bytes(), off), gamma(in.gamma.bytes(), off),
      beta(in.beta.bytes(), off), out(want.bytes(), off), res_out(want.bytes(), off),
      mean(rows * sizeof(float)), rstd(rows * sizeof(float));
  x.upload(in.x.data());
  res.upload(in.residual.data());
  gamma.upload(in.gamma.data());
  beta.upload(in.beta.data());
  const ForwardOptions o{kEps};
  KernelStatus s;
  switch (kind) {
    case Kind::kLayerNorm:
      s = layernorm_forward_cuda(out.get(), mean.floats(), rstd.floats(), x.get(), gamma.get(),
                                 beta.get(), rows, C, d, o, nullptr);
      break;
    case Kind::kRmsNorm:
      s = rmsnorm_forward_cuda(out.get(), rstd.floats(), x.get(), gamma.get(), rows, C, d, o,
                               nullptr);
      break;
    case Kind::kResidual:
      s = fused_residual_layernorm_forward_cuda(res_out.get(), out.get(), mean.floats(),
                                                rstd.floats(), x.get(), res.get(), gamma.get(),
                                                beta.get(), rows, C, d, o, nullptr);
      break;
    case Kind::kResidualRms:
      s = fused_residual_rmsnorm_forward_cuda(res_out.get(), out.get(), rstd.floats(), x.get(),
                                              res.get(), gamma.get(), rows, C, d, o, nullptr);
      break;
  }
  ASSERT_TRUE(s.ok()) << what << ": " << s.message();
  CUDA_OK(cudaDeviceSynchronize());

  HostArray got(d, rows * C), got_res(d, rows * C);
  std::vector<float> got_mean(rows), got_rstd(rows);
  EXPECT_TRUE(out.download(got.data())) << what << ": out guard bands written";
  EXPECT_TRUE(rstd.download(got_rstd.data())) << what << ": rstd guard bands written";
  const Tol t = gpu_tol(d);
  expect_near_all(what + " out", got.values(), want.values(), t.rtol, t.atol);
  expect_near_all(what + " rstd", widen(got_rstd), widen(want_rstd), 1e-5, 0.0);
  if (!is_rms(kind)) {
    EXPECT_TRUE(mean.download(got_mean.data())) << what << ": mean guard bands written";
    expect_near_all(what + " mean", widen(got_mean), widen(want_mean), 1e-5, 1e-5);
  }
  // Again without mean/rstd (optional, for inference): out fully rewritten and
  // as close to the CPU's. (Not necessarily the same bits: the compiler may
  // schedule the two variants' float math differently.)
  CUDA_OK(cudaMemset(out.get(), 0xA5, want.bytes()));
  switch (kind) {
    case Kind::kRmsNorm:
      s = rmsnorm_forward_cuda(out.get(), nullptr, x.get(), gamma.get(), rows, C, d, o, nullptr);
      break;
    case Kind::kLayerNorm:
      s = layernorm_forward_cuda(out.get(), nullptr, nullptr, x.get(), gamma.get(), beta.get(),
                                 rows, C, d, o, nullptr);
      break;
    case Kind::kResidual:
      s = fused_residual_layernorm_forward_cuda(res_out.get(), out.get(), nullptr, nullptr, x.get(),
                                                res.get(), gamma.get(), beta.get(), rows, C, d, o,
                                                nullptr);
      break;
    case Kind::kResidualRms:
      s = fused_residual_rmsnorm_forward_cuda(res_out.get(), out.get(), nullptr, x.get(), res.get(),
                                              gamma.get(), rows, C, d, o, nullptr);
      break;
  }
  ASSERT_TRUE(s.ok()) << what << ": " << s.message();
  CUDA_OK(cudaDeviceSynchronize());
  HostArray again(d, rows * C);
  EXPECT_TRUE(out.download(again.data()));
  expect_near_all(what + " out without stats", again.values(), want.values(), t.rtol, t.atol);
  if (has_residual(kind)) {
    EXPECT_TRUE(res_out.download(got_res.data())) << what << ": residual_out guard bands written";
    // The same float32 addition rounded once on both devices: equal bits.
    EXPECT_EQ(std::memcmp(got_res.data(), want_res.data(), want_res.bytes()), 0)
        << what << " residual_out";
  }
}

void check_backward(bool rms, DType d, int64_t rows, int64_t C, size_t offset_elems,
                    DxMode mode, uint32_t seed) {
  const Kind kind = rms ? Kind::kRmsNorm : Kind::kLayerNorm;
  const std::string what = label(kind, d, rows, C) + "/offset=" + std::to_string(offset_elems) +
                           mode_name(mode);
  const Inputs in = random_inputs(d, rows, C, seed);
  std::vector<float> mean(rows), rstd(rows);
  HostArray y(d, rows * C), unused(d, rows * C);
  ASSERT_TRUE(forward_cpu(kind, y, unused, mean.data(), rstd.data(), in, rows, C).ok());
  const HostArray dout = random_array(d, rows * C, seed + 4, -1.0f, 1.0f);
  const HostArray dx0 = random_array(d, rows * C, seed + 5, -1.0f, 1.0f);
  const HostArray dg0 = random_array(d, C, seed + 6, -1.0f, 1.0f);
  const HostArray db0 = random_array(d, C, seed + 7, -1.0f, 1.0f);
  const HostArray rg = random_array(d, rows * C, seed + 3, -1.0f, 1.0f);
  HostArray want_dx = dx0, want_dg = dg0, want_db = db0;
  ASSERT_TRUE(backward_cpu(rms, want_dx, want_dg, want_db, dout, in.x, mean, rstd, in.gamma, rows,
                           C, mode, &rg)
                  .ok());

  const size_t off = offset_elems * dtype_size(d);
  const size_t scratch_bytes =
      rms ? rmsnorm_backward_scratch_bytes(rows, C) : layernorm_backward_scratch_bytes(rows, C);
  DeviceBuffer dx(dx0.bytes(), off), dg(dg0.bytes(), off), db(db0.bytes(), off),
      dy(dout.bytes(), off), x(in.x.bytes(), off), gamma(in.gamma.bytes(), off),
      dmean(rows * sizeof(float)), drstd(rows * sizeof(float)), scratch(scratch_bytes),
      drg(rg.bytes(), off);
  dy.upload(dout.data());
  drg.upload(rg.data());
  x.upload(in.x.data());
  gamma.upload(in.gamma.data());
  dmean.upload(mean.data());
  drstd.upload(rstd.data());
  // Twice from the same starting gradients: the results must be bit-identical.
  HostArray got_dx[2] = {HostArray(d, rows * C), HostArray(d, rows * C)};
  HostArray got_dg[2] = {HostArray(d, C), HostArray(d, C)};
  HostArray got_db[2] = {HostArray(d, C), HostArray(d, C)};
  for (int run = 0; run < 2; ++run) {
    dx.upload(dx0.data());
    dg.upload(dg0.data());
    db.upload(db0.data());
    // Scratch needs no initialisation: NaN there must not leak into results.
    CUDA_OK(cudaMemset(scratch.get(), 0xFF, scratch_bytes));
    const BackwardOptions o{.accumulate_dx = mode == DxMode::kAccumulate,
                            .residual_grad = mode == DxMode::kResidualGrad ? drg.get() : nullptr};
    const KernelStatus s =
        rms ? rmsnorm_backward_cuda(dx.get(), dg.get(), dy.get(), x.get(), drstd.floats(),
                                    gamma.get(), scratch.get(), scratch_bytes, rows, C, d, o,
                                    nullptr)
            : layernorm_backward_cuda(dx.get(), dg.get(), db.get(), dy.get(), x.get(),
                                      dmean.floats(), drstd.floats(), gamma.get(), scratch.get(),
                                      scratch_bytes, rows, C, d, o, nullptr);
    ASSERT_TRUE(s.ok()) << what << ": " << s.message();
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_TRUE(dx.download(got_dx[run].data())) << what << ": dx guard bands written";
    EXPECT_TRUE(dg.download(got_dg[run].data())) << what << ": dgamma guard bands written";
    EXPECT_TRUE(db.download(got_db[run].data())) << what << ": dbeta guard bands written";
    std::vector<uint8_t> scratch_copy(scratch_bytes);
    EXPECT_TRUE(scratch.download(scratch_copy.data())) << what << ": scratch overrun";
    HostArray rg_after(d, rows * C);
    EXPECT_TRUE(drg.download(rg_after.data())) << what << ": residual_grad guard bands written";
    EXPECT_EQ(std::memcmp(rg_after.data(), rg.data(), rg.bytes()), 0) << what << ": residual_grad written";
  }
  const Tol t = gpu_tol(d);
  const double sum_atol = t.atol * std::sqrt(static_cast<double>(rows));  // sums over rows
  expect_near_all(what + " dx", got_dx[0].values(), want_dx.values(), t.rtol, t.atol);
  expect_near_all(what + " dgamma", got_dg[0].values(), want_dg.values(), t.rtol, sum_atol);
  if (rms) {
    EXPECT_EQ(std::memcmp(got_db[0].data(), db0.data(), db0.bytes()), 0)
        << what << " dbeta touched";
  } else {
    expect_near_all(what + " dbeta", got_db[0].values(), want_db.values(), t.rtol, sum_atol);
  }
  EXPECT_EQ(std::memcmp(got_dx[0].data(), got_dx[1].data(), want_dx.bytes()), 0) << what;
  EXPECT_EQ(std::memcmp(got_dg[0].data(), got_dg[1].data(), want_dg.bytes()), 0)
      << what << ": dgamma not deterministic";
  EXPECT_EQ(std::memcmp(got_db[0].data(), got_db[1].data(), want_db.bytes()), 0)
      << what << ": dbeta not deterministic";
}
#endif  // COLOSSAL_WITH_CUDA

TEST(LayerNormCudaTest, ForwardMatchesCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 10000;
  for (Kind kind : kAllKinds) {
    for (DType d : kCudaTypes) {
      for (const auto& shape : kCudaShapes) {
        for (size_t offset : {0, 1}) {
          check_forward(kind, d, shape[0], shape[1], offset, seed += 4);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
#endif
}

TEST(LayerNormCudaTest, BackwardMatchesCpu) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  uint32_t seed = 20000;
  for (bool rms : {false, true}) {
    for (DType d : kCudaTypes) {
      for (const auto& shape : kCudaShapes) {
        for (size_t offset : {0, 1}) {
          for (DxMode mode : kAllDxModes) {
            check_backward(rms, d, shape[0], shape[1], offset, mode, seed += 8);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
#endif
}

// Rows with |mean| >> std: the two-pass variance keeps float32 accurate where
// E[x^2] - E[x]^2 would lose ~1e-3 of the output.
TEST(LayerNormCudaTest, LargeMeanIsStable) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const int64_t rows = 16;
  for (int64_t C : {77, 768, 4096, 40000}) {
    const Inputs in = random_inputs(DType::kF32, rows, C, 300 + C, /*offset=*/100.0f);
    const RefForward ref = ref_forward(Kind::kLayerNorm, in.x, nullptr, in.gamma, in.beta, rows, C);
    DeviceBuffer x(in.x.bytes()), gamma(in.gamma.bytes()), beta(in.beta.bytes()), out(in.x.bytes());
    x.upload(in.x.data());
    gamma.upload(in.gamma.data());
    beta.upload(in.beta.data());
    ASSERT_TRUE(layernorm_forward_cuda(out.get(), nullptr, nullptr, x.get(), gamma.get(),
                                       beta.get(), rows, C, DType::kF32, {kEps}, nullptr)
                    .ok());
    CUDA_OK(cudaDeviceSynchronize());
    HostArray got(DType::kF32, rows * C);
    EXPECT_TRUE(out.download(got.data()));
    expect_near_all("large mean C=" + std::to_string(C), got.values(), ref.out, 1e-4, 1e-4);
  }
#endif
}

TEST(LayerNormCudaTest, RejectsBadArguments) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  // Checked before anything is launched, so host addresses do as placeholders.
  float buf[64];
  void* p = buf;
  float* f = buf;
  const DType bf = DType::kBF16;
  EXPECT_CODE(layernorm_forward_cuda(nullptr, f, f, p, p, p, 2, 8, bf, {}, nullptr),
              kInvalidArgument);
  EXPECT_CODE(layernorm_forward_cuda(p, f, f, p, p, p, 2, 8, DType::kF64, {}, nullptr),
              kUnsupported);
  EXPECT_CODE(layernorm_forward_cuda(p, f, f, p, p, p, -2, 8, bf, {}, nullptr), kInvalidArgument);
  EXPECT_CODE(layernorm_forward_cuda(p, f, f, p, p, p, 2, 0, bf, {}, nullptr), kInvalidArgument);
  EXPECT_CODE(rmsnorm_forward_cuda(p, f, p, p, 2, 8, bf, {-1e-5f}, nullptr), kInvalidArgument);
  EXPECT_CODE(
      fused_residual_layernorm_forward_cuda(p, p, f, f, p, nullptr, p, p, 2, 8, bf, {}, nullptr),
      kInvalidArgument);
  const size_t need = layernorm_backward_scratch_bytes(2, 8);
  EXPECT_CODE(layernorm_backward_cuda(p, p, p, p, p, f, f, p, nullptr, need, 2, 8, bf, {}, nullptr),
              kInvalidArgument);
  EXPECT_CODE(layernorm_backward_cuda(p, p, p, p, p, f, f, p, p, need - 1, 2, 8, bf, {}, nullptr),
              kInvalidArgument);
  EXPECT_CODE(layernorm_backward_cuda(p, p, nullptr, p, p, f, f, p, p, need, 2, 8, bf, {}, nullptr),
              kInvalidArgument);
  EXPECT_CODE(rmsnorm_backward_cuda(p, p, p, p, f, p, p, rmsnorm_backward_scratch_bytes(2, 8) - 4,
                                    2, 8, bf, {}, nullptr),
              kInvalidArgument);
  EXPECT_CODE(rmsnorm_backward_cuda(p, p, p, p, f, p, p, 1024, 2, 8, DType::kI32, {}, nullptr),
              kUnsupported);
  EXPECT_CODE(layernorm_backward_cuda(p, p, p, p, p, f, f, p, p, need, 2, 8, bf,
                                      {.accumulate_dx = true, .residual_grad = f + 32}, nullptr),
              kInvalidArgument);
  EXPECT_CODE(
      fused_residual_rmsnorm_forward_cuda(p, p, f, p, nullptr, p, 2, 8, bf, {}, nullptr),
      kInvalidArgument);
  EXPECT_TRUE(layernorm_backward_cuda(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                      nullptr, nullptr, 0, 0, 8, bf, {}, nullptr)
                  .ok());
#endif
}

}  // namespace
}  // namespace colossal::kernels::layernorm
