// SGD step: the CPU path against a float64 reference of torch.optim.SGD over
// several steps (momentum, dampening, nesterov, weight decay, unscaling, half
// gradients and model copies); clamp semantics; CUDA against CPU bit for bit.
#include "nn/optim/kernels/optim_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/common/half.h"
#include "tests/util/gpu_test.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::nn::optim_kernels {
namespace {

using ::colossal::kernels::BFloat16;
using ::colossal::kernels::Half;

std::vector<uint8_t> to_dtype(const std::vector<float>& f, DType t) {
  std::vector<uint8_t> out(f.size() * ::colossal::kernels::dtype_size(t));
  for (size_t i = 0; i < f.size(); ++i) {
    switch (t) {
      case DType::kF16:
        reinterpret_cast<Half*>(out.data())[i] = ::colossal::kernels::float_to_half(f[i]);
        break;
      case DType::kBF16:
        reinterpret_cast<BFloat16*>(out.data())[i] = ::colossal::kernels::float_to_bfloat16(f[i]);
        break;
      default: reinterpret_cast<float*>(out.data())[i] = f[i]; break;
    }
  }
  return out;
}

float from_dtype(const std::vector<uint8_t>& b, DType t, size_t i) {
  switch (t) {
    case DType::kF16: return ::colossal::kernels::half_to_float(reinterpret_cast<const Half*>(b.data())[i]);
    case DType::kBF16:
      return ::colossal::kernels::bfloat16_to_float(reinterpret_cast<const BFloat16*>(b.data())[i]);
    default: return reinterpret_cast<const float*>(b.data())[i];
  }
}

struct SgdCase {
  float lr, momentum, dampening, weight_decay;
  bool nesterov;
  float grad_scale;
};

// torch.optim.SGD in float64, with the gradient unscaled first.
void reference_step(std::vector<double>& p, std::vector<double>& buf, const std::vector<double>& g,
                    const SgdCase& c, bool first) {
  for (size_t i = 0; i < p.size(); ++i) {
    double d = g[i] / c.grad_scale;
    if (c.weight_decay != 0) d += c.weight_decay * p[i];
    if (c.momentum != 0) {
      buf[i] = first ? d : c.momentum * buf[i] + (1.0 - c.dampening) * d;
      d = c.nesterov ? d + c.momentum * buf[i] : buf[i];
    }
    p[i] -= c.lr * d;
  }
}

TEST(SgdCpuTest, MatchesFloat64ReferenceOverSteps) {
  const SgdCase cases[] = {
      {0.1f, 0.0f, 0.0f, 0.0f, false, 1.0f},   {0.05f, 0.9f, 0.0f, 0.0f, false, 1.0f},
      {0.05f, 0.9f, 0.0f, 1e-2f, true, 1.0f},  {0.02f, 0.8f, 0.3f, 1e-3f, false, 1.0f},
      {0.01f, 0.9f, 0.0f, 0.1f, true, 1024.0f}};
  const int64_t n = 1037;
  for (const DType gt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const SgdCase& c : cases) {
      std::vector<float> p = testing::random_floats(n, 1, -1.0f, 1.0f);
      std::vector<float> buf(n, 0.0f);
      std::vector<double> rp(p.begin(), p.end()), rbuf(n, 0.0);
      std::vector<float> copy(n);
      for (int step = 0; step < 5; ++step) {
        std::vector<float> gf = testing::random_floats(n, 100 + step, -c.grad_scale, c.grad_scale);
        const std::vector<uint8_t> g = to_dtype(gf, gt);
        std::vector<double> rg(n);
        for (int64_t i = 0; i < n; ++i) rg[i] = from_dtype(g, gt, i);
        SgdKernelOptions o;
        o.lr = c.lr;
        o.momentum = c.momentum;
        o.dampening = c.dampening;
        o.weight_decay = c.weight_decay;
        o.nesterov = c.nesterov;
        o.grad_scale = c.grad_scale;
        o.first_step = step == 0;
        ASSERT_TRUE(sgd_step_cpu(p.data(), buf.data(), copy.data(), g.data(), n, gt, DType::kF32, o)
                        .ok());
        reference_step(rp, rbuf, rg, c, step == 0);
      }
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(p[i], rp[i], 2e-6) << "element " << i << " grad " << dtype_name(gt);
        ASSERT_EQ(copy[i], p[i]);
        if (c.momentum != 0) {
          ASSERT_NEAR(buf[i], rbuf[i], 2e-5) << i;
        }
      }
    }
  }
}

TEST(SgdCpuTest, HalfModelCopyIsRoundedMaster) {
  const int64_t n = 100;
  std::vector<float> p = testing::random_floats(n, 3);
  const std::vector<float> g = testing::random_floats(n, 4);
  std::vector<BFloat16> copy(n);
  SgdKernelOptions o;
  o.lr = 0.5f;
  ASSERT_TRUE(sgd_step_cpu(p.data(), nullptr, copy.data(), g.data(), n, DType::kF32, DType::kBF16, o)
                  .ok());
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(copy[i].bits, ::colossal::kernels::float_to_bfloat16(p[i]).bits) << i;
  }
}

TEST(SgdCpuTest, RejectsBadArguments) {
  float p = 1, b = 0, g = 1;
  SgdKernelOptions o;
  o.lr = -1.0f;
  EXPECT_EQ(sgd_step_cpu(&p, &b, nullptr, &g, 1, DType::kF32, DType::kF32, o).code(),
            KernelStatus::Code::kInvalidArgument);
  o = SgdKernelOptions();
  o.momentum = 0.9f;
  EXPECT_EQ(sgd_step_cpu(&p, nullptr, nullptr, &g, 1, DType::kF32, DType::kF32, o).code(),
            KernelStatus::Code::kInvalidArgument);
  o = SgdKernelOptions();
  o.nesterov = true;
  EXPECT_EQ(sgd_step_cpu(&p, &b, nullptr, &g, 1, DType::kF32, DType::kF32, o).code(),
            KernelStatus::Code::kInvalidArgument);
  o = SgdKernelOptions();
  EXPECT_EQ(sgd_step_cpu(&p, &b, nullptr, &g, 1, DType::kI32, DType::kF32, o).code(),
            KernelStatus::Code::kUnsupported);
  o.grad_scale = 0.0f;
  EXPECT_EQ(sgd_step_cpu(&p, &b, nullptr, &g, 1, DType::kF32, DType::kF32, o).code(),
            KernelStatus::Code::kInvalidArgument);
  EXPECT_TRUE(sgd_step_cpu(nullptr, nullptr, nullptr, nullptr, 0, DType::kF32, DType::kF32, {}).ok());
}

TEST(ClampCpuTest, ClampsKeepsNanAndInRangeValues) {
  std::vector<float> x = {-3.0f, -1.0f, 0.25f, 1.0f, 7.0f, std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::infinity()};
  ASSERT_TRUE(clamp_cpu(x.data(), x.size(), DType::kF32, -1.0f, 1.0f).ok());
  EXPECT_EQ(x[0], -1.0f);
  EXPECT_EQ(x[1], -1.0f);
  EXPECT_EQ(x[2], 0.25f);
  EXPECT_EQ(x[3], 1.0f);
  EXPECT_EQ(x[4], 1.0f);
  EXPECT_TRUE(std::isnan(x[5]));
  EXPECT_EQ(x[6], -1.0f);

  std::vector<float> f = {-2.0f, 0.3f, 2.0f};
  std::vector<uint8_t> h = to_dtype(f, DType::kBF16);
  ASSERT_TRUE(clamp_cpu(h.data(), 3, DType::kBF16, -0.5f, 0.5f).ok());
  EXPECT_EQ(from_dtype(h, DType::kBF16, 0), -0.5f);
  EXPECT_EQ(from_dtype(h, DType::kBF16, 1), ::colossal::kernels::bfloat16_to_float(
                                                ::colossal::kernels::float_to_bfloat16(0.3f)));
  EXPECT_EQ(from_dtype(h, DType::kBF16, 2), 0.5f);

  EXPECT_EQ(clamp_cpu(x.data(), 1, DType::kF32, 1.0f, -1.0f).code(),
            KernelStatus::Code::kInvalidArgument);
  EXPECT_EQ(clamp_cpu(x.data(), 1, DType::kI64, -1.0f, 1.0f).code(),
            KernelStatus::Code::kUnsupported);
}

#if COLOSSAL_WITH_CUDA
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

template <typename T>
struct DeviceCopy {
  T* d = nullptr;
  size_t bytes = 0;
  explicit DeviceCopy(const std::vector<T>& h) : bytes(h.size() * sizeof(T)) {
    if (cudaMalloc(&d, bytes) != cudaSuccess) d = nullptr;
    if (d != nullptr) cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice);
  }
  ~DeviceCopy() { cudaFree(d); }
  std::vector<T> get() const {
    std::vector<T> h(bytes / sizeof(T));
    cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost);
    return h;
  }
};
#endif

TEST(SgdCudaTest, MatchesCpuBitForBit) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const int64_t n = 70001;
  for (const DType gt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const DType ct : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (const bool nesterov : {false, true}) {
        std::vector<float> p = testing::random_floats(n, 7);
        std::vector<float> buf = testing::random_floats(n, 8);
        const std::vector<uint8_t> g = to_dtype(testing::random_floats(n, 9, -8.0f, 8.0f), gt);
        std::vector<uint8_t> copy(n * ::colossal::kernels::dtype_size(ct), 0);
        DeviceCopy<float> dp(p), dbuf(buf);
        DeviceCopy<uint8_t> dg(g), dcopy(copy);
        ASSERT_NE(dp.d, nullptr);
        SgdKernelOptions o;
        o.lr = 0.03f;
        o.momentum = 0.9f;
        o.dampening = 0.1f;
        o.weight_decay = 0.01f;
        o.nesterov = nesterov;
        o.grad_scale = 8.0f;
        for (int step = 0; step < 3; ++step) {
          o.first_step = step == 0;
          ASSERT_TRUE(sgd_step_cpu(p.data(), buf.data(), copy.data(), g.data(), n, gt, ct, o).ok());
          ASSERT_TRUE(sgd_step_cuda(dp.d, dbuf.d, dcopy.d, dg.d, n, gt, ct, o, nullptr).ok());
        }
        CUDA_OK(cudaDeviceSynchronize());
        const auto hp = dp.get(), hbuf = dbuf.get();
        const auto hcopy = dcopy.get();
        ASSERT_EQ(std::memcmp(hp.data(), p.data(), n * 4), 0);
        ASSERT_EQ(std::memcmp(hbuf.data(), buf.data(), n * 4), 0);
        ASSERT_EQ(hcopy, copy);
      }
    }
  }
#endif
}

TEST(ClampCudaTest, MatchesCpuBitForBit) {
  COLOSSAL_REQUIRE_GPU();
#if COLOSSAL_WITH_CUDA
  const int64_t n = 4099;
  for (const DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<float> f = testing::random_floats(n, 11, -3.0f, 3.0f);
    f[5] = std::numeric_limits<float>::quiet_NaN();
    std::vector<uint8_t> h = to_dtype(f, t);
    DeviceCopy<uint8_t> d(h);
    ASSERT_NE(d.d, nullptr);
    ASSERT_TRUE(clamp_cpu(h.data(), n, t, -1.5f, 0.75f).ok());
    ASSERT_TRUE(clamp_cuda(d.d, n, t, -1.5f, 0.75f, nullptr).ok());
    CUDA_OK(cudaDeviceSynchronize());
    const auto got = d.get();
    if (t == DType::kF32) {
      for (int64_t i = 0; i < n; ++i) {
        const float a = from_dtype(got, t, i), b = from_dtype(h, t, i);
        ASSERT_TRUE((std::isnan(a) && std::isnan(b)) || a == b) << i;
      }
    } else {
      ASSERT_EQ(got, h);
    }
  }
#endif
}

}  // namespace
}  // namespace colossal::nn::optim_kernels
