// CPU dropout: one Philox block (four stream elements) at a time, the same
// element mapping and arithmetic as the CUDA kernel.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/dispatch.h"
#include "kernels/dropout/dropout.h"
#include "kernels/dropout/dropout_internal.h"
#include "kernels/random/philox.h"

namespace colossal::kernels::dropout {
namespace {

using random::philox_stream_block;
using random::PhiloxBlock;

using internal::check;

// Calls f(first_output_index, block words) for every Philox block covering
// stream elements [offset, offset + n); f handles element o = 4b + t - lead.
template <typename F>
void for_each_element(uint64_t seed, uint64_t offset, int64_t n, F&& f) {
  const uint64_t first_block = offset >> 2;
  const int64_t lead = static_cast<int64_t>(offset & 3);
  const int64_t blocks = (lead + n + 3) / 4;
  for (int64_t b = 0; b < blocks; ++b) {
    const PhiloxBlock bits = philox_stream_block(seed, first_block + static_cast<uint64_t>(b));
    for (int t = 0; t < 4; ++t) {
      const int64_t o = 4 * b + t - lead;
      if (o >= 0 && o < n) f(o, bits.w[t]);
    }
  }
}

}  // namespace

KernelStatus dropout_cpu(void* out, const void* in, double p, uint64_t seed, uint64_t offset,
                         int64_t n, DType dtype) {
  KernelStatus s = check("dropout_cpu: n < 0 or null buffer", out, in, p, n);
  if (!s.ok() || n == 0) return s;
  const uint32_t threshold = drop_threshold(p);
  const double scale = 1.0 / (1.0 - p);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    using M = typename CpuMathType<T>::type;
    const M sc = static_cast<M>(scale);
    const T* x = static_cast<const T*>(in);
    T* y = static_cast<T*>(out);
    for_each_element(seed, offset, n, [&](int64_t o, uint32_t word) {
      const M v = keeps(word, threshold) ? to_math(x[o]) * sc : M(0);
      y[o] = from_math<T>(v);
    });
    return KernelStatus();
  };
  switch (dtype) {
    case DType::kF32: return run(float{});
    case DType::kF16: return run(Half{});
    case DType::kBF16: return run(BFloat16{});
    case DType::kF64: return run(double{});
    default: return KernelStatus::unsupported("dropout_cpu: unsupported dtype");
  }
}

KernelStatus dropout_mask_cpu(uint8_t* mask, double p, uint64_t seed, uint64_t offset, int64_t n) {
  KernelStatus s = check("dropout_mask_cpu: n < 0 or null mask", mask, mask, p, n);
  if (!s.ok() || n == 0) return s;
  const uint32_t threshold = drop_threshold(p);
  for_each_element(seed, offset, n, [&](int64_t o, uint32_t word) {
    mask[o] = keeps(word, threshold) ? 1 : 0;
  });
  return KernelStatus();
}

}  // namespace colossal::kernels::dropout
