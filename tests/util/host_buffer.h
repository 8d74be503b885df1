// A host buffer of n elements of one kernels DType, read and written as
// double, for kernel tests. New buffers are poisoned (test_data.h); random()
// fills fresh uniform values, stored once in the buffer's dtype.
//
//   HostBuffer x = HostBuffer::random(DType::kBF16, 1000, /*seed=*/1);
//   HostBuffer y(DType::kBF16, 1000);           // poisoned
//   ... kernel(y.data(), x.data(), 1000, DType::kBF16) ...
//   double y0 = y.get(0);
#ifndef COLOSSAL_TESTS_UTIL_HOST_BUFFER_H_
#define COLOSSAL_TESTS_UTIL_HOST_BUFFER_H_

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/common/dtype.h"
#include "kernels/common/half.h"
#include "tests/util/test_data.h"

namespace colossal::testing {

class HostBuffer {
 public:
  using DType = kernels::DType;

  HostBuffer() : HostBuffer(DType::kF32, 0) {}
  HostBuffer(DType dtype, int64_t n)
      : dtype_(dtype), n_(n), bytes_(n * kernels::dtype_size(dtype)) {
    poison(bytes_.data(), bytes_.size());
  }
  // n values uniform in [lo, hi), each rounded once to `dtype`.
  static HostBuffer random(DType dtype, int64_t n, uint32_t seed, float lo = -1.0f,
                           float hi = 1.0f) {
    HostBuffer b(dtype, n);
    const std::vector<float> v = random_floats(n, seed, lo, hi);
    for (int64_t i = 0; i < n; ++i) b.set(i, v[i]);
    return b;
  }

  double get(int64_t i) const {
    double v = 0;
    (void)kernels::dispatch_all_types(dtype_, [&](auto tag) {
      using T = decltype(tag);
      v = static_cast<double>(kernels::to_math(reinterpret_cast<const T*>(bytes_.data())[i]));
      return kernels::KernelStatus();
    });
    return v;
  }
  void set(int64_t i, double v) {
    (void)kernels::dispatch_all_types(dtype_, [&](auto tag) {
      using T = decltype(tag);
      T* p = reinterpret_cast<T*>(bytes_.data());
      if constexpr (std::is_same_v<T, kernels::Half> || std::is_same_v<T, kernels::BFloat16>) {
        p[i] = kernels::from_float<T>(static_cast<float>(v));
      } else {
        p[i] = static_cast<T>(v);
      }
      return kernels::KernelStatus();
    });
  }

  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  size_t bytes() const { return bytes_.size(); }
  int64_t size() const { return n_; }
  DType dtype() const { return dtype_; }
  bool same_bits(const HostBuffer& o) const { return bytes_ == o.bytes_; }
  // Whether elements [begin, end) hold the same bytes as in `o`.
  bool same_range(const HostBuffer& o, int64_t begin, int64_t end) const {
    const size_t es = kernels::dtype_size(dtype_);
    return std::memcmp(bytes_.data() + begin * es, o.bytes_.data() + begin * es,
                       (end - begin) * es) == 0;
  }

 private:
  DType dtype_;
  int64_t n_;
  std::vector<uint8_t> bytes_;
};

}  // namespace colossal::testing

#endif  // COLOSSAL_TESTS_UTIL_HOST_BUFFER_H_
