// Test support shared by kernels/embedding's tests: token ids, float64
// gradient references with the sum of |terms| for tolerances, gradient
// comparison, and guarded device buffers.
#ifndef COLOSSAL_KERNELS_EMBEDDING_EMBEDDING_TEST_UTIL_H_
#define COLOSSAL_KERNELS_EMBEDDING_EMBEDDING_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/dtype.h"
#include "tests/util/host_buffer.h"
#include "tests/util/test_data.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colossal::kernels::embedding::test {

using Buf = testing::HostBuffer;

struct Shape {
  int64_t batch, seq_len, channels, vocab, max_seq_len;
  int64_t positions() const { return batch * seq_len; }
  std::string str() const {
    return "B=" + std::to_string(batch) + " T=" + std::to_string(seq_len) + " C=" + std::to_string(channels) +
           " V=" + std::to_string(vocab);
  }
};

enum class Ids { kUniform, kAllEqual, kZipf };
inline const char* ids_name(Ids ids) {
  return ids == Ids::kUniform ? "uniform" : ids == Ids::kAllEqual ? "all-equal" : "zipf";
}

// Token ids in [0, vocab): uniform, all one id, or Zipf-like (p(v) ~ 1 / (v + 1)^1.1,
// as in text: a few ids cover a large share of the positions).
inline std::vector<int32_t> make_tokens(Ids ids, int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  if (ids == Ids::kAllEqual) {
    const auto v = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(0, vocab - 1)(rng));
    for (auto& x : t) x = v;
  } else if (ids == Ids::kUniform) {
    std::uniform_int_distribution<int64_t> d(0, vocab - 1);
    for (auto& x : t) x = static_cast<int32_t>(d(rng));
  } else {
    std::vector<double> w(vocab);
    for (int64_t v = 0; v < vocab; ++v) w[v] = 1.0 / std::pow(static_cast<double>(v + 1), 1.1);
    std::discrete_distribution<int32_t> d(w.begin(), w.end());
    for (auto& x : t) x = d(rng);
  }
  return t;
}

// Activation and gradient dtypes the backward takes: the same type, or float32
// gradients for 16-bit activations (float64: the CPU only).
struct Types {
  DType dtype, grad;
};
inline constexpr Types kCpuGradTypes[] = {{DType::kF32, DType::kF32},  {DType::kF16, DType::kF16},
                                          {DType::kBF16, DType::kBF16}, {DType::kF64, DType::kF64},
                                          {DType::kF16, DType::kF32},  {DType::kBF16, DType::kF32}};
inline constexpr Types kCudaGradTypes[] = {{DType::kF32, DType::kF32},  {DType::kF16, DType::kF16},
                                           {DType::kBF16, DType::kBF16}, {DType::kF16, DType::kF32},
                                           {DType::kBF16, DType::kF32}};

// One rounding of a stored value (relative), as in kernels/activation's tests.
inline double round_tol(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 1.2e-7;
    case DType::kF16: return 1.0e-3;
    case DType::kBF16: return 8.0e-3;
    default: return 1e-15;
  }
}

// Sums in double: its error (~1e-16 relative per term) is far below every
// tolerance used here.
struct GradRef {
  std::vector<double> dwte, dwte_abs, dwpe, dwpe_abs;  // want, and sum of |terms| + |start|
  std::vector<bool> touched;                                // per vocab row
};

inline GradRef reference_backward(const Buf& dwte0, const Buf& dwpe0, const Buf& dout,
                                  const std::vector<int32_t>& tok, const Shape& s) {
  GradRef r;
  const int64_t C = s.channels;
  r.dwte.resize(dwte0.size());
  r.dwte_abs.resize(dwte0.size());
  r.dwpe.resize(dwpe0.size());
  r.dwpe_abs.resize(dwpe0.size());
  r.touched.assign(s.vocab, false);
  for (int64_t i = 0; i < dwte0.size(); ++i) r.dwte[i] = dwte0.get(i), r.dwte_abs[i] = std::fabs(dwte0.get(i));
  for (int64_t i = 0; i < dwpe0.size(); ++i) r.dwpe[i] = dwpe0.get(i), r.dwpe_abs[i] = std::fabs(dwpe0.get(i));
  for (int64_t p = 0; p < s.positions(); ++p) {
    if (tok[p] < 0 || tok[p] >= s.vocab) continue;  // skipped (the CUDA contract)
    r.touched[tok[p]] = true;
    const int64_t t = p % s.seq_len;
    for (int64_t c = 0; c < C; ++c) {
      const double d = dout.get(p * C + c);
      r.dwte[tok[p] * C + c] += d;
      r.dwte_abs[tok[p] * C + c] += std::fabs(d);
      r.dwpe[t * C + c] += d;
      r.dwpe_abs[t * C + c] += std::fabs(d);
    }
  }
  return r;
}

// dwte within round_tol * |want| + sum_tol * (sum of |terms| + |start|); rows
// the call must not touch (tokens absent) bit-identical to the start.
inline void expect_dwte(const Buf& dwte, const Buf& dwte0, const GradRef& ref, const Shape& s, double sum_tol,
                        const std::string& what) {
  const int64_t C = s.channels;
  const double rt = round_tol(dwte.dtype());
  for (int64_t v = 0; v < s.vocab; ++v) {
    if (!ref.touched[v]) {
      ASSERT_TRUE(dwte.same_range(dwte0, v * C, (v + 1) * C)) << what << " dwte row " << v << " changed";
      continue;
    }
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = v * C + c;
      const double want = ref.dwte[i];
      ASSERT_LE(std::fabs(dwte.get(i) - want), rt * std::fabs(want) + sum_tol * ref.dwte_abs[i])
          << what << " dwte[" << v << ", " << c << "] got " << dwte.get(i) << " want " << want;
    }
  }
}

// expect_dwte, and dwpe the same way (rows >= seq_len untouched).
inline void expect_grads(const Buf& dwte, const Buf& dwpe, const Buf& dwte0, const Buf& dwpe0, const GradRef& ref,
                         const Shape& s, double sum_tol, const std::string& what) {
  expect_dwte(dwte, dwte0, ref, s, sum_tol, what);
  if (::testing::Test::HasFatalFailure()) return;
  const int64_t C = s.channels;
  const double rt = round_tol(dwpe.dtype());
  for (int64_t i = 0; i < s.seq_len * C; ++i) {
    const double want = ref.dwpe[i];
    ASSERT_LE(std::fabs(dwpe.get(i) - want), rt * std::fabs(want) + sum_tol * ref.dwpe_abs[i])
        << what << " dwpe[" << i / C << ", " << i % C << "]";
  }
  ASSERT_TRUE(dwpe.same_range(dwpe0, s.seq_len * C, s.max_seq_len * C)) << what << " dwpe rows >= seq_len changed";
}

#if COLOSSAL_WITH_CUDA
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// float32 summation on the device against long double: the error of a float32
// sum of n terms is far below 1e-5 of the sum of |terms| for n up to 10^5
// (random rounding errors grow like sqrt(n) * 6e-8).
inline constexpr double kSumTol = 1e-5;

// A device copy of `host` placed `offset` elements into an allocation with
// kGuard poisoned elements on each side; fetch() verifies they survived.
class DeviceBuf {
 public:
  static constexpr int64_t kGuard = 32;
  DeviceBuf(const void* host, size_t elem, int64_t n, int64_t offset) : elem_(elem), n_(n), offset_(offset) {
    total_ = (n_ + 2 * kGuard + offset_) * elem_;
    std::vector<uint8_t> init(total_);
    testing::poison(init.data(), total_);
    std::memcpy(init.data() + (kGuard + offset_) * elem_, host, n_ * elem_);
    ok_ = cudaMalloc(&base_, total_) == cudaSuccess &&
          cudaMemcpy(base_, init.data(), total_, cudaMemcpyHostToDevice) == cudaSuccess;
  }
  DeviceBuf(const Buf& host, int64_t offset) : DeviceBuf(host.data(), dtype_size(host.dtype()), host.size(), offset) {}
  ~DeviceBuf() { cudaFree(base_); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  bool ok() const { return ok_; }
  template <typename P = void>
  P* ptr() {
    return reinterpret_cast<P*>(static_cast<uint8_t*>(base_) + (kGuard + offset_) * elem_);
  }
  void fetch(void* host, const std::string& what) {
    std::vector<uint8_t> all(total_);
    ASSERT_EQ(cudaMemcpy(all.data(), base_, total_, cudaMemcpyDeviceToHost), cudaSuccess) << what;
    std::memcpy(host, all.data() + (kGuard + offset_) * elem_, n_ * elem_);
    for (size_t i = 0; i < (kGuard + offset_) * elem_; ++i) ASSERT_EQ(all[i], 0xA5) << what << " guard before";
    for (size_t i = (kGuard + offset_ + n_) * elem_; i < total_; ++i) ASSERT_EQ(all[i], 0xA5) << what << " guard after";
  }
  void fetch(Buf* host, const std::string& what) { fetch(host->data(), what); }

 private:
  size_t elem_;
  int64_t n_, offset_;
  size_t total_ = 0;
  void* base_ = nullptr;
  bool ok_ = false;
};
#endif  // COLOSSAL_WITH_CUDA

}  // namespace colossal::kernels::embedding::test

#endif  // COLOSSAL_KERNELS_EMBEDDING_EMBEDDING_TEST_UTIL_H_
