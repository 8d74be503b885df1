// x86-64 SIMD loads and stores of float32 / float16 / bfloat16 elements as
// float lanes, for CPU kernels' AVX2 (8 lanes) and AVX-512 (16 lanes) paths.
// Each function carries its target attribute (COLOSSAL_AVX2 /
// COLOSSAL_AVX512), so a file using them needs no -march flag; call them only
// from functions with the same attribute, after cpu_isa_available said yes.
//
// Exactness, as kernels/common/half.h: fp16 in through F16C and bf16 in by a
// 16-bit shift are exact; out, both round to nearest even and turn any NaN
// into the canonical 0x7fff, as the scalar from_float and CUDA's
// __float2half_rn / __float2bfloat16_rn do.
#ifndef COLOSSAL_KERNELS_COMMON_SIMD_CONVERT_H_
#define COLOSSAL_KERNELS_COMMON_SIMD_CONVERT_H_

#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/common/half.h"

#define COLOSSAL_AVX2 __attribute__((target("avx2,fma,f16c")))
#define COLOSSAL_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

// GCC 12 warns about the self-initialised placeholders (`__Y = __Y`) inside its own
// AVX-512 / AVX intrinsics once they are inlined into a target-attribute function
// (GCC bug 105593, fixed in GCC 13); the warning is about the header, not this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace colossal::kernels::simd {

// Float bit patterns that convert to the canonical half / bfloat16 NaN 0x7fff:
// NaN lanes are replaced by them before conversion, to match the scalar path.
inline constexpr int kHalfNanAsFloat = 0x7fffe000;
inline constexpr int kBf16NanAsFloat = 0x7fff0000;

// ---- AVX2 + FMA + F16C: 8 lanes ----

COLOSSAL_AVX2 inline __m256 load8(const float* x) { return _mm256_loadu_ps(x); }
COLOSSAL_AVX2 inline __m256 load8(const Half* x) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}
COLOSSAL_AVX2 inline __m256 load8(const BFloat16* x) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// store8 / store16 with `stream` write with a non-temporal store, which skips
// reading the line first; `out` must then be aligned to the vector's bytes
// (16 / 32 / 64), and the writer fences (_mm_sfence) before others read.
COLOSSAL_AVX2 inline void store8(float* out, __m256 x, bool stream = false) {
  if (stream) {
    _mm256_stream_ps(out, x);
  } else {
    _mm256_storeu_ps(out, x);
  }
}
COLOSSAL_AVX2 inline void store8(Half* out, __m256 x, bool stream = false) {
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  x = _mm256_blendv_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(kHalfNanAsFloat)), nan);
  const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
  if (stream) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(out), h);
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), h);
  }
}
COLOSSAL_AVX2 inline void store8(BFloat16* out, __m256 x, bool stream = false) {
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  x = _mm256_blendv_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(kBf16NanAsFloat)), nan);
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  // packus works per 128-bit lane: [r0..r3 r0..r3 | r4..r7 r4..r7]; gather 64-bit halves 0 and 2.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  if (stream) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(packed));
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(packed));
  }
}

// ---- AVX-512F: 16 lanes ----

COLOSSAL_AVX512 inline __m512 load16(const float* x) { return _mm512_loadu_ps(x); }
COLOSSAL_AVX512 inline __m512 load16(const Half* x) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
}
COLOSSAL_AVX512 inline __m512 load16(const BFloat16* x) {
  const __m512i wide =
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

COLOSSAL_AVX512 inline void store16(float* out, __m512 x, bool stream = false) {
  if (stream) {
    _mm512_stream_ps(out, x);
  } else {
    _mm512_storeu_ps(out, x);
  }
}
COLOSSAL_AVX512 inline void store16(Half* out, __m512 x, bool stream = false) {
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  x = _mm512_mask_mov_ps(x, nan, _mm512_castsi512_ps(_mm512_set1_epi32(kHalfNanAsFloat)));
  const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
  if (stream) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out), h);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), h);
  }
}
COLOSSAL_AVX512 inline void store16(BFloat16* out, __m512 x, bool stream = false) {
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  x = _mm512_mask_mov_ps(x, nan, _mm512_castsi512_ps(_mm512_set1_epi32(kBf16NanAsFloat)));
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
  if (stream) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(r));
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(r));
  }
}

}  // namespace colossal::kernels::simd

#pragma GCC diagnostic pop

#endif  // defined(__x86_64__)

#endif  // COLOSSAL_KERNELS_COMMON_SIMD_CONVERT_H_
