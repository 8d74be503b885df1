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
#include <cstring>
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

// ---- split masters (split_master.h): the master joined from hi and lo ----

using SplitRangeFn = void (*)(uint16_t* hi, int16_t* lo, float* m, float* v, const void* g,
                              int64_t n, const AdamConsts& k);

inline float join_master(uint16_t hi, int16_t lo) {
  const uint32_t u = join_master_bits(hi, lo);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline void split_master(float f, uint16_t* hi, int16_t* lo) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  split_master_bits(u, hi, lo);
}

template <typename G>
void split_range_scalar(uint16_t* hi, int16_t* lo, float* m, float* v, const void* graw, int64_t n,
                        const AdamConsts& k) {
  const G* g = static_cast<const G*>(graw);
  for (int64_t i = 0; i < n; ++i) {
    float p = join_master(hi[i], lo[i]);
    adam_element(p, m[i], v[i], to_float(g[i]), k);
    split_master(p, hi + i, lo + i);
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

// adam_element on 8 lanes: p, m and v (loaded) updated in registers.
COLOSSAL_AVX2 inline void adam8(__m256& p, __m256& m, __m256& v, __m256 g, const Consts8& K,
                                const AdamConsts& k) {
  if (k.unscale) g = _mm256_div_ps(g, K.grad_scale);
  if (k.l2) g = _mm256_fmadd_ps(K.wd, p, g);
  m = _mm256_fmadd_ps(K.beta1, m, _mm256_mul_ps(K.omb1, g));
  v = _mm256_fmadd_ps(K.beta2, v, _mm256_mul_ps(_mm256_mul_ps(K.omb2, g), g));
  const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(v), K.inv_sqrt_bc2, K.eps);
  const __m256 update = _mm256_div_ps(m, denom);
  if (k.decoupled) p = _mm256_mul_ps(p, K.decay);
  p = _mm256_fmadd_ps(K.neg_step, update, p);
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
    __m256 pi = _mm256_loadu_ps(p + i), mi = _mm256_loadu_ps(m + i), vi = _mm256_loadu_ps(v + i);
    adam8(pi, mi, vi, load8(g + i), K, k);
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

struct Consts16 {
  __m512 beta1, beta2, omb1, omb2, eps, wd, decay, neg_step, inv_sqrt_bc2, grad_scale;
};

COLOSSAL_AVX512 inline Consts16 broadcast16(const AdamConsts& k) {
  return Consts16{_mm512_set1_ps(k.beta1),        _mm512_set1_ps(k.beta2),
                  _mm512_set1_ps(k.one_minus_beta1), _mm512_set1_ps(k.one_minus_beta2),
                  _mm512_set1_ps(k.eps),          _mm512_set1_ps(k.weight_decay),
                  _mm512_set1_ps(k.decay),        _mm512_set1_ps(k.neg_step_size),
                  _mm512_set1_ps(k.inv_sqrt_bc2), _mm512_set1_ps(k.grad_scale)};
}

// adam_element on 16 lanes.
COLOSSAL_AVX512 inline void adam16(__m512& p, __m512& m, __m512& v, __m512 g, const Consts16& K,
                                   const AdamConsts& k) {
  if (k.unscale) g = _mm512_div_ps(g, K.grad_scale);
  if (k.l2) g = _mm512_fmadd_ps(K.wd, p, g);
  m = _mm512_fmadd_ps(K.beta1, m, _mm512_mul_ps(K.omb1, g));
  v = _mm512_fmadd_ps(K.beta2, v, _mm512_mul_ps(_mm512_mul_ps(K.omb2, g), g));
  const __m512 denom = _mm512_fmadd_ps(_mm512_sqrt_ps(v), K.inv_sqrt_bc2, K.eps);
  const __m512 update = _mm512_div_ps(m, denom);
  if (k.decoupled) p = _mm512_mul_ps(p, K.decay);
  p = _mm512_fmadd_ps(K.neg_step, update, p);
}

template <typename G, typename C>
COLOSSAL_AVX512 void range_avx512(float* p, float* m, float* v, const void* graw, void* craw,
                                  int64_t n, const AdamConsts& k) {
  const G* g = static_cast<const G*>(graw);
  C* c = static_cast<C*>(craw);
  const Consts16 K = broadcast16(k);
  int64_t i = head_to_alignment(p, n, 64);
  if (i > 0) range_scalar<G, C>(p, m, v, g, craw, i, k);
  const bool stream = stream_copy(c, i, 16 * sizeof(C));
  for (; i + 16 <= n; i += 16) {
    __m512 pi = _mm512_loadu_ps(p + i), mi = _mm512_loadu_ps(m + i), vi = _mm512_loadu_ps(v + i);
    adam16(pi, mi, vi, load16(g + i), K, k);
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

// Split masters on 8 lanes: join_master_bits / split_master_bits in integer
// lanes (the same operations, so the same bits as the scalar loop).
COLOSSAL_AVX2 inline __m256 join8(const uint16_t* hi, const int16_t* lo) {
  const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)));
  const __m256i l = _mm256_cvtepi16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo)));
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(h, 16), l));
}

// The low 16 bits of each 32-bit lane, in order: a truncation, as the scalar
// cast and AVX-512's vpmovdw (masked first, so the unsigned pack never saturates).
COLOSSAL_AVX2 inline __m128i low_halves8(__m256i x) {
  const __m256i low = _mm256_and_si256(x, _mm256_set1_epi32(0xffff));
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(low, low), 0x08));
}

COLOSSAL_AVX2 inline void split8(__m256 p, uint16_t* hi, int16_t* lo) {
  const __m256i bits = _mm256_castps_si256(p);
  __m256i h = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x8000)), 16);
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  h = _mm256_blendv_epi8(h, quiet, nan);
  const __m256i l = _mm256_sub_epi32(bits, _mm256_slli_epi32(h, 16));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(hi), low_halves8(h));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(lo), low_halves8(l));
}

template <typename G>
COLOSSAL_AVX2 void split_range_avx2(uint16_t* hi, int16_t* lo, float* m, float* v,
                                    const void* graw, int64_t n, const AdamConsts& k) {
  const G* g = static_cast<const G*>(graw);
  const Consts8 K = broadcast8(k);
  int64_t i = head_to_alignment(m, n, 32);
  if (i > 0) split_range_scalar<G>(hi, lo, m, v, g, i, k);
  for (; i + 8 <= n; i += 8) {
    __m256 pi = join8(hi + i, lo + i), mi = _mm256_loadu_ps(m + i), vi = _mm256_loadu_ps(v + i);
    adam8(pi, mi, vi, load8(g + i), K, k);
    split8(pi, hi + i, lo + i);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
  }
  if (i < n) split_range_scalar<G>(hi + i, lo + i, m + i, v + i, g + i, n - i, k);
}

COLOSSAL_AVX512 inline __m512 join16(const uint16_t* hi, const int16_t* lo) {
  const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi)));
  const __m512i l = _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo)));
  return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(h, 16), l));
}

COLOSSAL_AVX512 inline void split16(__m512 p, uint16_t* hi, int16_t* lo) {
  const __m512i bits = _mm512_castps_si512(p);
  __m512i h = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x8000)), 16);
  const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(magnitude, _mm512_set1_epi32(0x7f800000));
  h = _mm512_mask_mov_epi32(h, nan, _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40)));
  const __m512i l = _mm512_sub_epi32(bits, _mm512_slli_epi32(h, 16));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi), _mm512_cvtepi32_epi16(h));  // truncating
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo), _mm512_cvtepi32_epi16(l));
}

template <typename G>
COLOSSAL_AVX512 void split_range_avx512(uint16_t* hi, int16_t* lo, float* m, float* v,
                                        const void* graw, int64_t n, const AdamConsts& k) {
  const G* g = static_cast<const G*>(graw);
  const Consts16 K = broadcast16(k);
  int64_t i = head_to_alignment(m, n, 64);
  if (i > 0) split_range_scalar<G>(hi, lo, m, v, g, i, k);
  for (; i + 16 <= n; i += 16) {
    __m512 pi = join16(hi + i, lo + i), mi = _mm512_loadu_ps(m + i), vi = _mm512_loadu_ps(v + i);
    adam16(pi, mi, vi, load16(g + i), K, k);
    split16(pi, hi + i, lo + i);
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
  }
  if (i < n) split_range_scalar<G>(hi + i, lo + i, m + i, v + i, g + i, n - i, k);
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

template <typename G>
SplitRangeFn pick_split_isa(CpuIsa isa) {
#if defined(__x86_64__)
  if (isa == CpuIsa::kAvx512) return &split_range_avx512<G>;
  if (isa == CpuIsa::kAvx2) return &split_range_avx2<G>;
#endif
  return &split_range_scalar<G>;
}

SplitRangeFn pick_split(CpuIsa isa, DType grad_dtype) {
  switch (grad_dtype) {
    case DType::kF16: return pick_split_isa<Half>(isa);
    case DType::kBF16: return pick_split_isa<BFloat16>(isa);
    default: return pick_split_isa<float>(isa);
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

// fn(begin, end) over [0, n) in pieces of kPiece, on up to `threads` OpenMP threads.
template <typename Fn>
void for_pieces(int64_t n, int threads, Fn fn) {
  const int64_t count = (n + kPiece - 1) / kPiece;
  const int t = static_cast<int>(std::min<int64_t>(threads, count));
#pragma omp parallel for schedule(static) num_threads(t) if (count > 1)
  for (int64_t i = 0; i < count; ++i) fn(i * kPiece, std::min(n, (i + 1) * kPiece));
}

bool aligned(const void* p, size_t bytes) { return internal::aligned_to(p, bytes); }

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

KernelStatus adam_step_split_cpu(uint16_t* hi, int16_t* lo, float* exp_avg, float* exp_avg_sq,
                                 const void* grad, const float* found_inf, int64_t n,
                                 DType grad_dtype, const AdamOptions& options,
                                 const AdamCpuOptions& cpu) {
  AdamConsts k;
  KernelStatus s = internal::make_consts(options, &k);
  if (!s.ok()) return s;
  s = internal::check_dtypes(grad_dtype, DType::kF32);
  if (!s.ok()) return s;
  CpuIsa isa;
  s = resolve_cpu_isa(cpu.isa, &isa, "adam: unknown CpuIsa",
                      "adam: this CPU lacks the requested instruction set");
  if (!s.ok()) return s;
  s = internal::check_split(hi, lo, exp_avg, exp_avg_sq, grad, n, grad_dtype);
  if (!s.ok()) return s;
  if (n == 0 || (found_inf != nullptr && *found_inf != 0.0f)) return KernelStatus();
  const SplitRangeFn fn = pick_split(isa, grad_dtype);
  const size_t gs = dtype_size(grad_dtype);
  for_pieces(n, thread_count(cpu), [&](int64_t b, int64_t e) {
    fn(hi + b, lo + b, exp_avg + b, exp_avg_sq + b, static_cast<const char*>(grad) + b * gs, e - b, k);
  });
  return KernelStatus();
}

KernelStatus split_master_cpu(const float* master, uint16_t* hi, int16_t* lo, int64_t n) {
  if (n < 0) return KernelStatus::invalid_argument("split_master: n < 0");
  if (n > 0 && (master == nullptr || hi == nullptr || lo == nullptr || !aligned(master, 4) ||
                !aligned(hi, 2) || !aligned(lo, 2))) {
    return KernelStatus::invalid_argument("split_master: null or misaligned buffer with n > 0");
  }
  for_pieces(n, omp_get_max_threads(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) split_master(master[i], hi + i, lo + i);
  });
  return KernelStatus();
}

KernelStatus join_master_cpu(const uint16_t* hi, const int16_t* lo, float* master, int64_t n) {
  if (n < 0) return KernelStatus::invalid_argument("join_master: n < 0");
  if (n > 0 && (master == nullptr || hi == nullptr || lo == nullptr || !aligned(master, 4) ||
                !aligned(hi, 2) || !aligned(lo, 2))) {
    return KernelStatus::invalid_argument("join_master: null or misaligned buffer with n > 0");
  }
  for_pieces(n, omp_get_max_threads(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) master[i] = join_master(hi[i], lo[i]);
  });
  return KernelStatus();
}

}  // namespace colossal::kernels::adam
