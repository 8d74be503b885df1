// Test helpers for nn/: CPU tensors from and to float vectors, random parameters.
#ifndef COLOSSAL_NN_OPTIM_TEST_UTIL_H_
#define COLOSSAL_NN_OPTIM_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/device/stream.h"
#include "core/tensor/tensor.h"
#include "kernels/common/half.h"
#include "nn/optim/param.h"
#include "tests/util/test_data.h"

namespace colossal::nn::testing {

// A CPU tensor of `shape` and `dtype` (float32/16/bfloat16) holding `values`,
// rounded to nearest even.
inline core::Tensor cpu_tensor(const core::Shape& shape, core::DType dtype,
                               const std::vector<float>& values) {
  core::Tensor t = core::Tensor::empty(shape, dtype, core::Stream::cpu()).value();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = values.at(i);
    switch (dtype) {
      case core::DType::kF16: t.data<kernels::Half>()[i] = kernels::float_to_half(v); break;
      case core::DType::kBF16: t.data<kernels::BFloat16>()[i] = kernels::float_to_bfloat16(v); break;
      default: t.data<float>()[i] = v; break;
    }
  }
  return t;
}

inline core::Tensor random_cpu_tensor(const core::Shape& shape, core::DType dtype, uint32_t seed,
                                      float lo = -1.0f, float hi = 1.0f) {
  return cpu_tensor(shape, dtype, colossal::testing::random_floats(shape.numel(), seed, lo, hi));
}

// The values of a float32/16/bfloat16 tensor (copied to the host on `stream`
// when on CUDA).
inline std::vector<float> to_floats(const core::Tensor& t,
                                    const core::Stream& stream = core::Stream::cpu()) {
  core::Tensor h = t;
  if (t.device().is_cuda()) {
    h = t.to(core::Device::cpu(), stream).value();
    stream.synchronize();
  }
  std::vector<float> out(h.numel());
  for (int64_t i = 0; i < h.numel(); ++i) {
    switch (h.dtype()) {
      case core::DType::kF16: out[i] = kernels::half_to_float(h.data<kernels::Half>()[i]); break;
      case core::DType::kBF16: out[i] = kernels::bfloat16_to_float(h.data<kernels::BFloat16>()[i]); break;
      default: out[i] = h.data<float>()[i]; break;
    }
  }
  return out;
}

// Raw bytes of a tensor (host copy), for bit-for-bit comparisons.
inline std::vector<uint8_t> to_bytes(const core::Tensor& t,
                                     const core::Stream& stream = core::Stream::cpu()) {
  core::Tensor h = t;
  if (t.device().is_cuda()) {
    h = t.to(core::Device::cpu(), stream).value();
    stream.synchronize();
  }
  std::vector<uint8_t> out(h.nbytes());
  if (!out.empty()) std::memcpy(out.data(), h.raw_data(), out.size());
  return out;
}

// A deep copy on the CPU.
inline core::Tensor clone_cpu(const core::Tensor& t,
                              const core::Stream& stream = core::Stream::cpu()) {
  core::Tensor out = core::Tensor::empty(t.shape(), t.dtype(), core::Stream::cpu()).value();
  if (!out.copy_from(t, t.device().is_cuda() ? stream : core::Stream::cpu()).ok()) std::abort();
  stream.synchronize();
  return out;
}

// A float32 CPU parameter with random master in [-1, 1) and a random gradient
// of `grad_dtype` in [-1, 1).
inline ParamRef random_param(std::string name, const core::Shape& shape, uint32_t seed,
                             core::DType grad_dtype = core::DType::kF32) {
  return ParamRef{std::move(name), random_cpu_tensor(shape, core::DType::kF32, seed),
                  random_cpu_tensor(shape, grad_dtype, seed + 1000), {}, {}};
}

// Fills an existing CPU gradient with new random values.
inline void refill(const core::Tensor& grad, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  core::Tensor fresh = random_cpu_tensor(grad.shape(), grad.dtype(), seed, lo, hi);
  std::memcpy(grad.raw_data(), fresh.raw_data(), grad.nbytes());
}

}  // namespace colossal::nn::testing

#endif  // COLOSSAL_NN_OPTIM_TEST_UTIL_H_
