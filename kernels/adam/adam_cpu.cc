// CPU Adam: the reference and the CPU backend (Colossal-AI's CPUAdam).
//
// The work is cut into pieces of kPiece elements (never spanning two tensors) that
// OpenMP threads take in a static schedule; each piece runs one range function
// picked once per call for (ISA, grad dtype, copy dtype). The AVX2 and AVX-512
// range functions are compiled with per-function target attributes, so this file
// needs no -march flag; the ISA is chosen at run time with __builtin_cpu_supports.
//
// Bit-exactness: every multiply-add is an explicit fma, the rest are single
// correctly rounded operations, and no plain add is left for the compiler to
// contract, so the scalar loop, the SIMD loops and the CUDA kernel agree bit for
// bit. Half conversions: fp16 in through F16C (exact), bf16 in by a 16-bit shift
// (exact); out with round-to-nearest-even, NaN made canonical (0x7fff) as
// kernels/common/half.h and CUDA's __float2half_rn / __float2bfloat16_rn do.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <omp.h>

#include "kernels/adam/adam.h"
#include "kernels/adam/adam_math.h"
#include "kernels/common/cpu_isa.h"
#include "kernels/common/half.h"
#include "kernels/common/simd_convert.h"

namespace colossal::kernels::adam {
namespace {

using internal::AdamConsts;
#if defined(__x86_64__)
using simd::load16;
using simd::load8;
using simd::store16;
using simd::store8;
#endif

// Elements per unit of parallel work (a multiple of 16 so only the last piece of a
// tensor has a scalar tail).
constexpr int64_t kPiece = 1 << 15;

struct NoCopy {};

template <typename C>
constexpr bool kHasCopy = !std::is_same_v<C, NoCopy>;

using RangeFn = void (*)(float* p, float* m, float* v, const void* g, void* c, int64_t n,
                         const AdamConsts& k);

// ---- scalar: the reference every other path must equal bit for bit ----

inline void adam_element(float& p, float& m, float& v, float g, const AdamConsts& k) {
  if (k.unscale) g = g / k.grad_scale;
  if (k.l2) g = std::fma(k.weight_decay, p, g);
  m = std::fma(k.beta1, m, k.one_minus_beta1 * g);
  v = std::fma(k.beta2, v, (k.one_minus_beta2 * g) * g);
  const float denom = std::fma(std::sqrt(v), k.inv_sqrt_bc2, k.eps);
  const float update = m / denom;
  if (k.decoupled) p = p * k.decay;
  p = std::fma(k.neg_step_size, update, p);
}

template <typename G, typename C>
void range_scalar(float* p, float* m, float* v, const void* graw, void* craw, int64_t n,
                  const AdamConsts& k) {
  const G* g = static_cast<const G*>(graw);
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i], mi = m[i], vi = v[i];
    adam_element(pi, mi, vi, to_float(g[i]), k);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if constexpr (kHasCopy<C>) static_cast<C*>(craw)[i] = from_float<C>(pi);
  }
}

#if defined(__x86_64__)

// GCC 12's false -Wmaybe-uninitialized inside its intrinsics (see simd_convert.h).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Elements done one by one first so that the vector loop's param loads and stores
// are `bytes`-aligned (no cache-line splits; m and v follow when they share p's
// offset, as in flat buffers). At most n.
inline int64_t head_to_alignment(const float* p, int64_t n, uintptr_t bytes) {
  const uintptr_t misalign = reinterpret_cast<uintptr_t>(p) % bytes;
  const int64_t head = misalign == 0 ? 0 : static_cast<int64_t>((bytes - misalign) / sizeof(float));
  return head < n ? head : n;
}

struct Consts8 {
  __m256 beta1, beta2, omb1, omb2, eps, wd, decay, neg_step, inv_sqrt_bc2, grad_scale;
};

COLOSSAL_AVX2 inline Consts8 broadcast8(const AdamConsts& k) {
  return Consts8{_mm256_set1_ps(k.beta1),        _mm256_set1_ps(k.beta2),
                 _mm256_set1_ps(k.one_minus_beta1), _mm256_set1_ps(k.one_minus_beta2),
                 _mm256_set1_ps(k.eps),          _mm256_set1_ps(k.weight_decay),
                 _mm256_set1_ps(k.decay),        _mm256_set1_ps(k.neg_step_size),
                 _mm256_set1_ps(k.inv_sqrt_bc2), _mm256_set1_ps(k.grad_scale)};
}

// Whether the model copy at `c` can take non-temporal stores of `bytes`-wide
// vectors. The copy is written once and read next by a PCIe copy (the next
// gather) or not at all: streaming it skips reading each line before the
// write, 2 of the ~30 bytes a 16-bit step moves per element.
template <typename C>
inline bool stream_copy(const C* c, int64_t i, uintptr_t bytes) {
  if constexpr (!kHasCopy<C>) {
    return false;
  } else {
    return reinterpret_cast<uintptr_t>(c + i) % bytes == 0;
  }
}

template <typename G, typename C>
COLOSSAL_AVX2 void range_avx2(float* p, float* m, float* v, const void* graw, void* craw,
                              int64_t n, const AdamConsts& k) {
  const G* g = static_cast<const G*>(graw);
  C* c = static_cast<C*>(craw);
  const Consts8 K = broadcast8(k);
  int64_t i = head_to_alignment(p, n, 32);
  if (i > 0) range_scalar<G, C>(p, m, v, g, craw, i, k);
  const bool stream = stream_copy(c, i, 8 * sizeof(C));
  for (; i + 8 <= n; i += 8) {
    __m256 gi = load8(g + i);
    __m256 pi = _mm256_loadu_ps(p + i);
    if (k.unscale) gi = _mm256_div_ps(gi, K.grad_scale);
    if (k.l2) gi = _mm256_fmadd_ps(K.wd, pi, gi);
    const __m256 mi = _mm256_fmadd_ps(K.beta1, _mm256_loadu_ps(m + i), _mm256_mul_ps(K.omb1, gi));
    const __m256 vi = _mm256_fmadd_ps(K.beta2, _mm256_loadu_ps(v + i),
                                      _mm256_mul_ps(_mm256_mul_ps(K.omb2, gi), gi));
    const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(vi), K.inv_sqrt_bc2, K.eps);
    const __m256 update = _mm256_div_ps(mi, denom);
    if (k.decoupled) pi = _mm256_mul_ps(pi, K.decay);
    pi = _mm256_fmadd_ps(K.neg_step, update, pi);
    _mm256_storeu_ps(p + i, pi);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    if constexpr (kHasCopy<C>) store8(c + i, pi, stream);
  }
  if (stream) _mm_sfence();
  if (i < n) {
    range_scalar<G, C>(p + i, m + i, v + i, g + i, kHasCopy<C> ? static_cast<void*>(c + i) : nullptr,
                       n - i, k);
  }
}

// ---- AVX-512F: 16 lanes ----

template <typename G, typename C>
COLOSSAL_AVX512 void range_avx512(float* p, float* m, float* v, const void* graw, void* craw,
                                  int64_t n, const AdamConsts& k) {
  const G* g = static_cast<const G*>(graw);
  C* c = static_cast<C*>(craw);
  const __m512 beta1 = _mm512_set1_ps(k.beta1), beta2 = _mm512_set1_ps(k.beta2);
  const __m512 omb1 = _mm512_set1_ps(k.one_minus_beta1), omb2 = _mm512_set1_ps(k.one_minus_beta2);
  const __m512 eps = _mm512_set1_ps(k.eps), wd = _mm512_set1_ps(k.weight_decay);
  const __m512 decay = _mm512_set1_ps(k.decay), neg_step = _mm512_set1_ps(k.neg_step_size);
  const __m512 inv_sqrt_bc2 = _mm512_set1_ps(k.inv_sqrt_bc2);
  const __m512 grad_scale = _mm512_set1_ps(k.grad_scale);
  int64_t i = head_to_alignment(p, n, 64);
  if (i > 0) range_scalar<G, C>(p, m, v, g, craw, i, k);
  const bool stream = stream_copy(c, i, 16 * sizeof(C));
  for (; i + 16 <= n; i += 16) {
    __m512 gi = load16(g + i);
    __m512 pi = _mm512_loadu_ps(p + i);
    if (k.unscale) gi = _mm512_div_ps(gi, grad_scale);
    if (k.l2) gi = _mm512_fmadd_ps(wd, pi, gi);
    const __m512 mi = _mm512_fmadd_ps(beta1, _mm512_loadu_ps(m + i), _mm512_mul_ps(omb1, gi));
    const __m512 vi =
        _mm512_fmadd_ps(beta2, _mm512_loadu_ps(v + i), _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
    const __m512 denom = _mm512_fmadd_ps(_mm512_sqrt_ps(vi), inv_sqrt_bc2, eps);
    const __m512 update = _mm512_div_ps(mi, denom);
    if (k.decoupled) pi = _mm512_mul_ps(pi, decay);
    pi = _mm512_fmadd_ps(neg_step, update, pi);
    _mm512_storeu_ps(p + i, pi);
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    if constexpr (kHasCopy<C>) store16(c + i, pi, stream);
  }
  if (stream) _mm_sfence();
  if (i < n) {
    range_scalar<G, C>(p + i, m + i, v + i, g + i, kHasCopy<C> ? static_cast<void*>(c + i) : nullptr,
                       n - i, k);
  }
}

#pragma GCC diagnostic pop

#endif  // defined(__x86_64__)

template <typename G, typename C>
RangeFn pick_isa(CpuIsa isa) {
#if defined(__x86_64__)
  if (isa == CpuIsa::kAvx512) return &range_avx512<G, C>;
  if (isa == CpuIsa::kAvx2) return &range_avx2<G, C>;
#endif
  return &range_scalar<G, C>;
}

template <typename G>
RangeFn pick_copy(CpuIsa isa, bool has_copy, DType copy_dtype) {
  if (!has_copy) return pick_isa<G, NoCopy>(isa);
  switch (copy_dtype) {
    case DType::kF16: return pick_isa<G, Half>(isa);
    case DType::kBF16: return pick_isa<G, BFloat16>(isa);
    default: return pick_isa<G, float>(isa);
  }
}

RangeFn pick(CpuIsa isa, DType grad_dtype, bool has_copy, DType copy_dtype) {
  switch (grad_dtype) {
    case DType::kF16: return pick_copy<Half>(isa, has_copy, copy_dtype);
    case DType::kBF16: return pick_copy<BFloat16>(isa, has_copy, copy_dtype);
    default: return pick_copy<float>(isa, has_copy, copy_dtype);
  }
}

// One unit of parallel work: elements [begin, end) of tensor `tensor`.
struct Piece {
  int64_t tensor;
  int64_t begin;
  int64_t end;
};

int thread_count(const AdamCpuOptions& cpu) {
  return cpu.num_threads > 0 ? cpu.num_threads : omp_get_max_threads();
}

}  // namespace

int64_t adam_cuda_scratch_bytes(int64_t num_tensors) {
  if (num_tensors <= 0) return 0;
  return num_tensors * static_cast<int64_t>(sizeof(internal::AdamDesc));
}

KernelStatus adam_step_tensors_cpu(const AdamTensor* tensors, const float* found_inf,
                                   int64_t num_tensors, DType grad_dtype, DType copy_dtype,
                                   const AdamOptions& options, const AdamCpuOptions& cpu) {
  AdamConsts k;
  KernelStatus s = internal::make_consts(options, &k);
  if (!s.ok()) return s;
  s = internal::check_dtypes(grad_dtype, copy_dtype);
  if (!s.ok()) return s;
  CpuIsa isa;
  s = resolve_cpu_isa(cpu.isa, &isa, "adam: unknown CpuIsa",
                      "adam: this CPU lacks the requested instruction set");
  if (!s.ok()) return s;
  if (num_tensors < 0) return KernelStatus::invalid_argument("adam: num_tensors < 0");
  if (num_tensors > 0 && tensors == nullptr) {
    return KernelStatus::invalid_argument("adam: null tensor list with num_tensors > 0");
  }
  std::vector<Piece> pieces;
  for (int64_t t = 0; t < num_tensors; ++t) {
    const AdamTensor& x = tensors[t];
    s = internal::check_tensor(x.param, x.m, x.v, x.grad, x.model_copy, x.n, grad_dtype,
                               copy_dtype);
    if (!s.ok()) return s;
    for (int64_t b = 0; b < x.n; b += kPiece) pieces.push_back({t, b, std::min(x.n, b + kPiece)});
  }
  if (found_inf != nullptr && *found_inf != 0.0f) return KernelStatus();  // skipped step
  if (pieces.empty()) return KernelStatus();

  const RangeFn with_copy = pick(isa, grad_dtype, true, copy_dtype);
  const RangeFn without_copy = pick(isa, grad_dtype, false, copy_dtype);
  const size_t gs = dtype_size(grad_dtype), cs = dtype_size(copy_dtype);
  const int64_t count = static_cast<int64_t>(pieces.size());
  const int threads = static_cast<int>(std::min<int64_t>(thread_count(cpu), count));
#pragma omp parallel for schedule(static) num_threads(threads) if (count > 1)
  for (int64_t i = 0; i < count; ++i) {
    const Piece& w = pieces[i];
    const AdamTensor& x = tensors[w.tensor];
    const int64_t b = w.begin;
    const void* g = static_cast<const char*>(x.grad) + b * gs;
    if (x.model_copy != nullptr) {
      with_copy(x.param + b, x.m + b, x.v + b, g, static_cast<char*>(x.model_copy) + b * cs,
                w.end - b, k);
    } else {
      without_copy(x.param + b, x.m + b, x.v + b, g, nullptr, w.end - b, k);
    }
  }
  return KernelStatus();
}

KernelStatus adam_step_cpu(float* param, float* exp_avg, float* exp_avg_sq, void* model_copy,
                           const void* grad, const float* found_inf, int64_t n, DType grad_dtype,
                           DType copy_dtype, const AdamOptions& options,
                           const AdamCpuOptions& cpu) {
  const AdamTensor one{param, exp_avg, exp_avg_sq, grad, model_copy, n};
  return adam_step_tensors_cpu(&one, found_inf, 1, grad_dtype, copy_dtype, options, cpu);
}

}  // namespace colossal::kernels::adam
