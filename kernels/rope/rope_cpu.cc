// CPU reference and backend for kernels/rope. Rows run in parallel with OpenMP;
// each row computes cos and sin of its D/2 float32 angles once in double and
// reuses them for every head, and each output is computed the same way
// whatever the thread count.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/common/round_once.h"
#include "kernels/common/exact_math.h"
#include "kernels/rope/rope.h"
#include "kernels/rope/rope_args.h"

namespace colossal::kernels::rope {
namespace {

using internal::Shape;

// Below this many packed elements a call runs on the calling thread.
constexpr int64_t kParallelMin = int64_t{1} << 16;

constexpr double kPi = 3.14159265358979323846;

template <typename T>
double as_double(T v) {
  return static_cast<double>(to_math(v));
}

// Moves every head of every row between the compact buffers (q, k, v) and the
// packed one. kToPacked: forward (compact -> packed, angle +a); otherwise the
// backward (packed -> compact, angle -a). Rotated heads: the first
// rotated_heads(); the v heads are copied.
template <typename T, bool kToPacked>
void rope_rows(T* packed, T* const compact[3], const float* inv_freq, const Shape& s) {
  const int64_t D = s.head_dim, half = D / 2, R = s.packed_heads();
  const int64_t width[3] = {s.q_heads * D, s.kv_heads * D, s.kv_heads * D};
  const int64_t first[3] = {0, s.q_heads, s.rotated_heads()};
  const double sign = kToPacked ? 1.0 : -1.0;
#pragma omp parallel if (s.rows() * R * D >= kParallelMin)
  {
    std::vector<double> cs(half), sn(half);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < s.rows(); ++r) {
      const float t = static_cast<float>(s.positions != nullptr ? int64_t{s.positions[r]} : r % s.seq);
      for (int64_t i = 0; i < half; ++i) {
        const float a = t * inv_freq[i];  // the float32 angle
        cs[i] = std::cos(static_cast<double>(a));
        sn[i] = sign * std::sin(static_cast<double>(a));
      }
      for (int64_t h = 0; h < R; ++h) {
        const int g = h < s.q_heads ? 0 : (h < s.rotated_heads() ? 1 : 2);
        T* c = compact[g] + r * width[g] + (h - first[g]) * D;
        T* p = packed + (r * R + h) * D;
        const T* src = kToPacked ? c : p;
        T* dst = kToPacked ? p : c;
        if (g == 2) {
          std::memcpy(dst, src, D * sizeof(T));
          continue;
        }
        for (int64_t i = 0; i < half; ++i) {
          const double lo = as_double(src[i]), hi = as_double(src[i + half]);
          dst[i] = round_once<T>(lo * cs[i] - hi * sn[i]);
          dst[i + half] = round_once<T>(hi * cs[i] + lo * sn[i]);
        }
      }
    }
  }
}

template <bool kToPacked>
KernelStatus rope_pack_cpu(void* packed, void* q, void* k, void* v, const float* inv_freq, const Shape& s,
                           DType dtype) {
  KernelStatus st = internal::check_pack_args(s, packed, q, k, v, inv_freq);
  if (!st.ok()) return st;
  if (!dtype_is_floating(dtype)) {
    return KernelStatus::unsupported("rope_pack: dtype must be float32, float16, bfloat16 or float64");
  }
  return dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_integral_v<T>) {
      T* const compact[3] = {static_cast<T*>(q), static_cast<T*>(k), static_cast<T*>(v)};
      rope_rows<T, kToPacked>(static_cast<T*>(packed), compact, inv_freq, s);
    }
    return KernelStatus();
  });
}

}  // namespace

KernelStatus rope_inv_freq(float* inv_freq, int64_t head_dim, double theta,
                           const Llama3RopeScaling* llama3) {
  if (inv_freq == nullptr) return KernelStatus::invalid_argument("rope_inv_freq: null inv_freq");
  if (head_dim < 2 || head_dim % 2 != 0) {
    return KernelStatus::invalid_argument("rope_inv_freq: head_dim must be even and >= 2");
  }
  if (!(std::isfinite(theta) && theta > 0)) {
    return KernelStatus::invalid_argument("rope_inv_freq: theta must be finite and > 0");
  }
  if (llama3 != nullptr &&
      !(llama3->factor > 0 && llama3->low_freq_factor > 0 &&
        llama3->high_freq_factor > llama3->low_freq_factor &&
        llama3->original_max_position_embeddings > 0)) {
    return KernelStatus::invalid_argument(
        "rope_inv_freq: llama3 needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
        "original_max_position_embeddings > 0");
  }
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double e = static_cast<double>(2 * i) / static_cast<double>(head_dim);
    inv_freq[i] = static_cast<float>(1.0 / std::pow(theta, e));
  }
  if (llama3 == nullptr) return KernelStatus();
  const double old_len = static_cast<double>(llama3->original_max_position_embeddings);
  const double low = llama3->low_freq_factor, high = llama3->high_freq_factor;
  const double factor = llama3->factor;
  const double low_freq_wavelen = old_len / low, high_freq_wavelen = old_len / high;
  for (int64_t i = 0; i < half; ++i) {
    const double f = inv_freq[i];
    const double wavelen = 2 * kPi / f;
    double scaled = f;  // wavelen < high_freq_wavelen: unchanged
    if (wavelen > low_freq_wavelen) {
      scaled = f / factor;
    } else if (!(wavelen < high_freq_wavelen)) {
      const double smooth = (old_len / wavelen - low) / (high - low);
      scaled = (1 - smooth) * f / factor + smooth * f;
    }
    inv_freq[i] = static_cast<float>(scaled);
  }
  return KernelStatus();
}

KernelStatus rope_pack_forward_cpu(void* qkv, const void* q, const void* k, const void* v,
                                   const float* inv_freq, const int32_t* positions, int64_t batch,
                                   int64_t seq, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                                   DType dtype) {
  // q, k and v are only read (kToPacked).
  return rope_pack_cpu<true>(qkv, const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), inv_freq,
                             Shape{batch, seq, q_heads, kv_heads, head_dim, positions}, dtype);
}

KernelStatus rope_pack_backward_cpu(void* dq, void* dk, void* dv, const void* dqkv,
                                    const float* inv_freq, const int32_t* positions, int64_t batch,
                                    int64_t seq, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                                    DType dtype) {
  // dqkv is only read (!kToPacked).
  return rope_pack_cpu<false>(const_cast<void*>(dqkv), dq, dk, dv, inv_freq,
                              Shape{batch, seq, q_heads, kv_heads, head_dim, positions}, dtype);
}

}  // namespace colossal::kernels::rope
