// CPU random fills: one Philox block (four stream elements) at a time, the
// same element mapping and arithmetic as the CUDA kernel (random_math.h).
#include <cstdint>
#include <type_traits>

#include "kernels/common/dispatch.h"
#include "kernels/random/philox.h"
#include "kernels/random/random.h"
#include "kernels/random/random_math.h"

namespace colossal::kernels::random {
namespace {

// Writes stream elements [offset, offset + n) of `dist` to out.
template <typename T, typename Dist>
void fill_stream(T* out, uint64_t seed, uint64_t offset, int64_t n, const Dist& dist) {
  using M = typename CpuMathType<T>::type;
  const uint64_t first_block = offset >> 2;
  const int64_t lead = static_cast<int64_t>(offset & 3);  // elements of the first block before offset
  const int64_t blocks = (lead + n + 3) / 4;
  for (int64_t b = 0; b < blocks; ++b) {
    M v[4];
    dist(philox_stream_block(seed, first_block + static_cast<uint64_t>(b)), v);
    for (int t = 0; t < 4; ++t) {
      const int64_t o = 4 * b + t - lead;
      if (o >= 0 && o < n) out[o] = from_math<T>(v[t]);
    }
  }
}

template <typename F>
KernelStatus dispatch_random(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(float{});
    case DType::kF16: return f(Half{});
    case DType::kBF16: return f(BFloat16{});
    case DType::kF64: return f(double{});
    default: return KernelStatus::unsupported("random fill: unsupported dtype");
  }
}

}  // namespace

KernelStatus fill_uniform_cpu(void* out, double lo, double hi, uint64_t seed, uint64_t offset,
                              int64_t n, DType dtype) {
  KernelStatus s = internal::check_fill("fill_uniform_cpu: n < 0 or null out", out, n, dtype);
  if (s.ok()) s = internal::check_uniform(lo, hi);
  if (!s.ok() || n == 0) return s;
  return dispatch_random(dtype, [&](auto tag) {
    using T = decltype(tag);
    using M = typename CpuMathType<T>::type;
    const internal::Uniform<M> dist{static_cast<M>(lo), static_cast<M>(hi - lo)};
    fill_stream(static_cast<T*>(out), seed, offset, n, dist);
    return KernelStatus();
  });
}

KernelStatus fill_normal_cpu(void* out, double mean, double std, uint64_t seed, uint64_t offset,
                             int64_t n, DType dtype) {
  KernelStatus s = internal::check_fill("fill_normal_cpu: n < 0 or null out", out, n, dtype);
  if (s.ok()) s = internal::check_normal(mean, std);
  if (!s.ok() || n == 0) return s;
  return dispatch_random(dtype, [&](auto tag) {
    using T = decltype(tag);
    using M = typename CpuMathType<T>::type;
    const internal::Normal<M> dist{static_cast<M>(mean), static_cast<M>(std)};
    fill_stream(static_cast<T*>(out), seed, offset, n, dist);
    return KernelStatus();
  });
}

}  // namespace colossal::kernels::random
