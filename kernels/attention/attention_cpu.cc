// CPU reference and backend for fused attention (causal or full mask): one
// (batch, kv head) per OpenMP thread at a time, its group's query heads in
// order, every row of scores computed in double and never stored as a T x T
// matrix; outputs rounded once to the tensor type. The backward sums dk, dv
// over the group's query heads in double before rounding. The varlen layout
// runs the same code on each sequence in turn (its rows, lse at row offset
// cu_seqlens[i] of every head's total_tokens).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_internal.h"
#include "kernels/common/dispatch.h"

namespace colossal::kernels::attention {
namespace {

using internal::Geometry;

template <typename F>
KernelStatus dispatch_cpu_types(DType dtype, F&& f) {
  if (dtype == DType::kF64) return f(double{});
  return dispatch_float_types(dtype, f);
}

template <typename T>
double load(T v) {
  return static_cast<double>(to_math(v));
}

template <typename T>
T store(double v) {
  using M = typename CpuMathType<T>::type;
  return from_math<T>(static_cast<M>(v));
}

// Gathers head h of batch b of a strided tensor into a dense [seq, d] double array
// (h indexes the tensor's own heads: kv heads for k and v).
template <typename T>
void gather(std::vector<double>& out, const T* p, const Geometry& g, int64_t row_stride, int64_t b,
            int64_t h) {
  const int64_t d = g.head_dim;
  out.resize(static_cast<size_t>(g.seq * d));
  for (int64_t t = 0; t < g.seq; ++t) {
    const T* row = p + (b * g.seq + t) * row_stride + h * d;
    for (int64_t c = 0; c < d; ++c) out[t * d + c] = load(row[c]);
  }
}

template <typename T>
void scatter(T* p, const std::vector<double>& in, const Geometry& g, int64_t row_stride, int64_t b,
             int64_t h) {
  const int64_t d = g.head_dim;
  for (int64_t t = 0; t < g.seq; ++t) {
    T* row = p + (b * g.seq + t) * row_stride + h * d;
    for (int64_t c = 0; c < d; ++c) row[c] = store<T>(in[t * d + c]);
  }
}

// The keys query t sees: 0 .. keys_of(t) - 1.
int64_t keys_of(int64_t t, int64_t seq, bool causal) { return causal ? t + 1 : seq; }

// Row t of the softmax: p[j] for j < n (n = keys_of(t)), and its natural-log
// logsumexp.
double softmax_row(std::vector<double>& p, const std::vector<double>& q,
                   const std::vector<double>& k, int64_t t, int64_t n, int64_t d, double scale) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    double s = 0;
    for (int64_t c = 0; c < d; ++c) s += q[t * d + c] * k[j * d + c];
    p[j] = scale * s;
    m = std::max(m, p[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    p[j] = std::exp(p[j] - m);
    sum += p[j];
  }
  for (int64_t j = 0; j < n; ++j) p[j] /= sum;
  return m + std::log(sum);
}

// lse of (b, h, t) at lse[b * heads * seq + h * lse_head_stride + t]: the
// batch layout [batch, heads, seq] with lse_head_stride = seq; one sequence of
// the varlen layout [heads, total_tokens] with lse_head_stride = total_tokens.
// (batch, kv head) pairs in parallel, each its group's query heads in order:
// a pair writes only its own heads' rows, so every output is the same
// whatever the thread count.
template <typename T>
void forward_typed(T* o, float* lse, const T* q, const T* k, const T* v, const Geometry& g,
                   double scale, bool causal, int64_t lse_head_stride) {
  const int64_t d = g.head_dim, T_ = g.seq, pairs = g.batch * g.kv_heads;
#pragma omp parallel for schedule(dynamic, 1) if (pairs > 1)
  for (int64_t pair = 0; pair < pairs; ++pair) {
    const int64_t b = pair / g.kv_heads, kvh = pair % g.kv_heads;
    std::vector<double> qh, kh, vh, oh(static_cast<size_t>(T_ * d)), p(static_cast<size_t>(T_));
    gather(kh, k, g, g.qkv_row_stride, b, kvh);
    gather(vh, v, g, g.qkv_row_stride, b, kvh);
    for (int64_t h = kvh * g.group(); h < (kvh + 1) * g.group(); ++h) {
      gather(qh, q, g, g.qkv_row_stride, b, h);
      for (int64_t t = 0; t < T_; ++t) {
        const int64_t n = keys_of(t, T_, causal);
        const double l = softmax_row(p, qh, kh, t, n, d, scale);
        if (lse != nullptr) {
          lse[b * g.heads * T_ + h * lse_head_stride + t] = static_cast<float>(l);
        }
        for (int64_t c = 0; c < d; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j) acc += p[j] * vh[j * d + c];
          oh[t * d + c] = acc;
        }
      }
      scatter(o, oh, g, g.o_row_stride, b, h);
    }
  }
}

// One query head's backward against its kv head: writes dqh and adds the
// head's share of the key and value gradients to dkh and dvh.
void backward_head(std::vector<double>& dqh, std::vector<double>& dkh, std::vector<double>& dvh,
                   const std::vector<double>& qh, const std::vector<double>& kh,
                   const std::vector<double>& vh, const std::vector<double>& gh, int64_t seq,
                   int64_t d, double scale, bool causal) {
  std::vector<double> p(static_cast<size_t>(seq)), ds(static_cast<size_t>(seq));
  for (int64_t t = 0; t < seq; ++t) {
    const int64_t n = keys_of(t, seq, causal);
    (void)softmax_row(p, qh, kh, t, n, d, scale);
    // D_t = dO_t . O_t with O_t recomputed in double.
    double delta = 0;
    for (int64_t c = 0; c < d; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += p[j] * vh[j * d + c];
      delta += gh[t * d + c] * acc;
    }
    for (int64_t j = 0; j < n; ++j) {
      double dp = 0;
      for (int64_t c = 0; c < d; ++c) dp += gh[t * d + c] * vh[j * d + c];
      ds[j] = p[j] * (dp - delta);
    }
    for (int64_t c = 0; c < d; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += ds[j] * kh[j * d + c];
      dqh[t * d + c] = scale * acc;
    }
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t c = 0; c < d; ++c) {
        dkh[j * d + c] += scale * ds[j] * qh[t * d + c];
        dvh[j * d + c] += p[j] * gh[t * d + c];
      }
    }
  }
}

// (batch, kv head) pairs in parallel, as the forward: a pair writes its kv
// head's dk, dv and its query heads' dq alone.
template <typename T>
void backward_typed(T* dq, T* dk, T* dv, const T* d_o, const T* q, const T* k, const T* v,
                    const Geometry& g, double scale, bool causal) {
  const size_t n = static_cast<size_t>(g.seq * g.head_dim);
  const int64_t pairs = g.batch * g.kv_heads;
#pragma omp parallel for schedule(dynamic, 1) if (pairs > 1)
  for (int64_t pair = 0; pair < pairs; ++pair) {
    const int64_t b = pair / g.kv_heads, kvh = pair % g.kv_heads;
    std::vector<double> qh, kh, vh, gh, dqh(n), dkh(n, 0.0), dvh(n, 0.0);
    gather(kh, k, g, g.qkv_row_stride, b, kvh);
    gather(vh, v, g, g.qkv_row_stride, b, kvh);
    // The group's query heads in order, each adding its share to dkh, dvh.
    for (int64_t h = kvh * g.group(); h < (kvh + 1) * g.group(); ++h) {
      gather(qh, q, g, g.qkv_row_stride, b, h);
      gather(gh, d_o, g, g.o_row_stride, b, h);
      backward_head(dqh, dkh, dvh, qh, kh, vh, gh, g.seq, g.head_dim, scale, causal);
      scatter(dq, dqh, g, g.qkv_row_stride, b, h);
    }
    scatter(dk, dkh, g, g.qkv_row_stride, b, kvh);
    scatter(dv, dvh, g, g.qkv_row_stride, b, kvh);
  }
}

bool cpu_dtype(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 ||
         dtype == DType::kF64;
}


// The forward's argument checks on geometry g (the varlen layout's flat
// geometry): OK with *work false when there is nothing to compute.
KernelStatus check_forward(const Geometry& g, void* o, float* lse, const void* q, const void* k,
                           const void* v, DType dtype, AttentionMask mask, bool* work) {
  *work = false;
  KernelStatus s = internal::check_geometry(g);
  if (!s.ok()) return s;
  if (mask != AttentionMask::kCausal && mask != AttentionMask::kFull) {
    return KernelStatus::invalid_argument("attention cpu: unknown mask");
  }
  if (!cpu_dtype(dtype)) return KernelStatus::unsupported("attention cpu: dtype must be floating");
  if (g.empty()) return KernelStatus();
  if (internal::any_null({o, q, k, v})) {
    return KernelStatus::invalid_argument("attention forward: null o, q, k or v");
  }
  const size_t elem = dtype_size(dtype);
  const auto [qe, ke, ve] = internal::qkv_extents(q, k, v, g, elem);
  const auto oe = internal::extent(o, g, g.o_row_stride, g.heads, elem);
  const size_t lse_bytes = static_cast<size_t>(g.batch * g.heads * g.seq) * sizeof(float);
  if (internal::outputs_overlap_inputs({oe}, {qe, ke, ve}) ||
      (lse != nullptr && internal::outputs_overlap_inputs({internal::plain_extent(lse, lse_bytes)},
                                                          {qe, ke, ve, oe}))) {
    return KernelStatus::invalid_argument("attention forward: o or lse overlaps an input");
  }
  *work = true;
  return KernelStatus();
}

// The backward's argument checks, as check_forward's.
KernelStatus check_backward(const Geometry& g, void* dq, void* dk, void* dv, const void* d_o,
                            const void* q, const void* k, const void* v, DType dtype,
                            AttentionMask mask, bool* work) {
  *work = false;
  KernelStatus s = internal::check_geometry(g);
  if (!s.ok()) return s;
  if (mask != AttentionMask::kCausal && mask != AttentionMask::kFull) {
    return KernelStatus::invalid_argument("attention cpu: unknown mask");
  }
  if (!cpu_dtype(dtype)) return KernelStatus::unsupported("attention cpu: dtype must be floating");
  if (g.empty()) return KernelStatus();
  if (internal::any_null({dq, dk, dv, d_o, q, k, v})) {
    return KernelStatus::invalid_argument("attention backward: null dq, dk, dv, d_o, q, k or v");
  }
  const size_t elem = dtype_size(dtype);
  const auto [dqe, dke, dve] = internal::qkv_extents(dq, dk, dv, g, elem);
  const auto [qe, ke, ve] = internal::qkv_extents(q, k, v, g, elem);
  if (internal::outputs_overlap_inputs(
          {dqe, dke, dve}, {qe, ke, ve, internal::extent(d_o, g, g.o_row_stride, g.heads, elem)})) {
    return KernelStatus::invalid_argument("attention backward: dq, dk or dv overlaps an input");
  }
  *work = true;
  return KernelStatus();
}

// The varlen layout's own checks, on the host copy of cu_seqlens: its
// geometry (internal::check_varlen_geometry), then cu_seqlens[0] = 0,
// non-decreasing, cu_seqlens[num_seqs] = total_tokens.
KernelStatus check_varlen(const Geometry& flat, const int32_t* cu_seqlens, int64_t num_seqs) {
  KernelStatus s = internal::check_varlen_geometry(flat, num_seqs);
  if (!s.ok()) return s;
  if (cu_seqlens == nullptr) return KernelStatus::invalid_argument("attention varlen: null cu_seqlens");
  if (cu_seqlens[0] != 0) {
    return KernelStatus::invalid_argument("attention varlen: cu_seqlens[0] is not 0");
  }
  for (int64_t i = 0; i < num_seqs; ++i) {
    if (cu_seqlens[i + 1] < cu_seqlens[i]) {
      return KernelStatus::invalid_argument("attention varlen: cu_seqlens decreases");
    }
  }
  if (cu_seqlens[num_seqs] != flat.seq) {
    return KernelStatus::invalid_argument(
        "attention varlen: cu_seqlens[num_seqs] is not total_tokens");
  }
  return KernelStatus();
}

// Sequence i of the varlen layout as a batch of one: its geometry and the
// row offset of its first position.
struct Sequence {
  Geometry g;
  int64_t row0;
};

Sequence sequence(const Geometry& flat, const int32_t* cu_seqlens, int64_t i) {
  Geometry g = flat;
  g.seq = cu_seqlens[i + 1] - cu_seqlens[i];
  return {g, cu_seqlens[i]};
}

}  // namespace

KernelStatus attention_forward_cpu(void* o, float* lse, const void* q, const void* k,
                                   const void* v, int64_t batch, int64_t heads, int64_t kv_heads,
                                   int64_t seq, int64_t head_dim, int64_t qkv_row_stride,
                                   int64_t o_row_stride, DType dtype, float scale,
                                   AttentionMask mask) {
  const Geometry g{batch, heads, kv_heads, seq, head_dim, qkv_row_stride, o_row_stride};
  bool work = false;
  KernelStatus s = check_forward(g, o, lse, q, k, v, dtype, mask, &work);
  if (!s.ok() || !work) return s;
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_typed(static_cast<T*>(o), lse, static_cast<const T*>(q), static_cast<const T*>(k),
                  static_cast<const T*>(v), g, static_cast<double>(scale),
                  mask == AttentionMask::kCausal, seq);
    return KernelStatus();
  });
}

KernelStatus attention_backward_cpu(void* dq, void* dk, void* dv, const void* d_o, const void* q,
                                    const void* k, const void* v, const void* o, const float* lse,
                                    int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq,
                                    int64_t head_dim, int64_t qkv_row_stride,
                                    int64_t o_row_stride, DType dtype, float scale,
                                    AttentionMask mask) {
  (void)o;
  (void)lse;
  const Geometry g{batch, heads, kv_heads, seq, head_dim, qkv_row_stride, o_row_stride};
  bool work = false;
  KernelStatus s = check_backward(g, dq, dk, dv, d_o, q, k, v, dtype, mask, &work);
  if (!s.ok() || !work) return s;
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    backward_typed(static_cast<T*>(dq), static_cast<T*>(dk), static_cast<T*>(dv),
                   static_cast<const T*>(d_o), static_cast<const T*>(q), static_cast<const T*>(k),
                   static_cast<const T*>(v), g, static_cast<double>(scale),
                   mask == AttentionMask::kCausal);
    return KernelStatus();
  });
}

KernelStatus attention_varlen_forward_cpu(void* o, float* lse, const void* q, const void* k,
                                          const void* v, const int32_t* cu_seqlens,
                                          int64_t num_seqs, int64_t total_tokens, int64_t heads,
                                          int64_t kv_heads, int64_t head_dim,
                                          int64_t qkv_row_stride, int64_t o_row_stride,
                                          DType dtype, float scale, AttentionMask mask) {
  const Geometry flat = internal::flat_geometry(total_tokens, heads, kv_heads, head_dim,
                                                qkv_row_stride, o_row_stride);
  KernelStatus s = check_varlen(flat, cu_seqlens, num_seqs);
  if (!s.ok()) return s;
  bool work = false;
  s = check_forward(flat, o, lse, q, k, v, dtype, mask, &work);
  if (!s.ok() || !work) return s;
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < num_seqs; ++i) {
      const auto [g, r] = sequence(flat, cu_seqlens, i);
      forward_typed(static_cast<T*>(o) + r * o_row_stride, lse == nullptr ? nullptr : lse + r,
                    static_cast<const T*>(q) + r * qkv_row_stride,
                    static_cast<const T*>(k) + r * qkv_row_stride,
                    static_cast<const T*>(v) + r * qkv_row_stride, g, static_cast<double>(scale),
                    mask == AttentionMask::kCausal, total_tokens);
    }
    return KernelStatus();
  });
}

KernelStatus attention_varlen_backward_cpu(void* dq, void* dk, void* dv, const void* d_o,
                                           const void* q, const void* k, const void* v,
                                           const void* o, const float* lse,
                                           const int32_t* cu_seqlens, int64_t num_seqs,
                                           int64_t total_tokens, int64_t heads, int64_t kv_heads,
                                           int64_t head_dim, int64_t qkv_row_stride,
                                           int64_t o_row_stride, DType dtype, float scale,
                                           AttentionMask mask) {
  (void)o;
  (void)lse;
  const Geometry flat = internal::flat_geometry(total_tokens, heads, kv_heads, head_dim,
                                                qkv_row_stride, o_row_stride);
  KernelStatus s = check_varlen(flat, cu_seqlens, num_seqs);
  if (!s.ok()) return s;
  bool work = false;
  s = check_backward(flat, dq, dk, dv, d_o, q, k, v, dtype, mask, &work);
  if (!s.ok() || !work) return s;
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    const int64_t qs = qkv_row_stride;
    for (int64_t i = 0; i < num_seqs; ++i) {
      const auto [g, r] = sequence(flat, cu_seqlens, i);
      backward_typed(static_cast<T*>(dq) + r * qs, static_cast<T*>(dk) + r * qs,
                     static_cast<T*>(dv) + r * qs, static_cast<const T*>(d_o) + r * o_row_stride,
                     static_cast<const T*>(q) + r * qs, static_cast<const T*>(k) + r * qs,
                     static_cast<const T*>(v) + r * qs, g, static_cast<double>(scale),
                     mask == AttentionMask::kCausal);
    }
    return KernelStatus();
  });
}

KernelStatus causal_attention_forward_cpu(void* o, float* lse, const void* q, const void* k,
                                          const void* v, int64_t batch, int64_t heads,
                                          int64_t kv_heads, int64_t seq, int64_t head_dim,
                                          int64_t qkv_row_stride, int64_t o_row_stride, DType dtype,
                                          float scale) {
  return attention_forward_cpu(o, lse, q, k, v, batch, heads, kv_heads, seq, head_dim,
                               qkv_row_stride, o_row_stride, dtype, scale, AttentionMask::kCausal);
}

KernelStatus causal_attention_backward_cpu(void* dq, void* dk, void* dv, const void* d_o,
                                           const void* q, const void* k, const void* v,
                                           const void* o, const float* lse, int64_t batch,
                                           int64_t heads, int64_t kv_heads, int64_t seq,
                                           int64_t head_dim, int64_t qkv_row_stride,
                                           int64_t o_row_stride, DType dtype, float scale) {
  return attention_backward_cpu(dq, dk, dv, d_o, q, k, v, o, lse, batch, heads, kv_heads, seq,
                                head_dim, qkv_row_stride, o_row_stride, dtype, scale,
                                AttentionMask::kCausal);
}

}  // namespace colossal::kernels::attention
