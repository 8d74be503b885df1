// CPU multi-tensor L2 norm, scale and accumulate (+= with the sum's norm): the
// reference and the CPU backend.
//
// Work is cut into pieces of kCpuPiece elements (never spanning two tensors) that
// OpenMP threads take in a static schedule. l2_norm (and accumulate, of its
// results) sums each piece's squares in double in a fixed order of 16 lanes
// (lane_sums.h: the scalar, AVX2 and AVX-512 loops agree bit for bit), then the
// piece sums of each tensor in order, then the tensor sums in order: the result
// depends on neither the thread count, the schedule nor the CPU. A piece whose
// double sum is not finite is rescanned element by element, so found_inf means
// "an element is inf/NaN", not "a float64 square overflowed".
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include <omp.h>

#include "kernels/common/dispatch.h"
#include "kernels/common/half.h"
#include "kernels/multi_tensor/lane_sums.h"
#include "kernels/multi_tensor/multi_tensor.h"
#include "kernels/multi_tensor/multi_tensor_internal.h"

namespace colossal::kernels::multi_tensor {
namespace {

using internal::kCpuPiece;

struct Piece {
  int64_t tensor;
  int64_t begin;
  int64_t end;
};

int thread_count(int requested, int64_t pieces) {
  const int64_t t = requested > 0 ? requested : omp_get_max_threads();
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(t, pieces)));
}

// Calls f(T{}) for the CPU dtypes of this family: float32, float16, bfloat16, float64.
template <typename F>
KernelStatus dispatch_cpu_float(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(float{});
    case DType::kF16: return f(Half{});
    case DType::kBF16: return f(BFloat16{});
    case DType::kF64: return f(double{});
    default: return KernelStatus::unsupported(what);
  }
}

template <typename T>
double as_double(T v) {
  return static_cast<double>(to_math(v));
}

// *bad when an element of x[0..n) is inf/NaN, given `sum`, their (or their
// results') sum of squares: only a non-finite sum needs the scan.
template <typename T>
void flag_non_finite(const T* x, int64_t n, double sum, bool* bad) {
  *bad = false;
  if (!std::isfinite(sum)) {
    for (int64_t k = 0; k < n && !*bad; ++k) *bad = !std::isfinite(as_double(x[k]));
  }
}

// tensors[0..num_tensors) (each with an element count n) cut into pieces of
// at most kCpuPiece elements, in tensor order.
template <typename Tensor>
std::vector<Piece> cut_pieces(const Tensor* tensors, int64_t num_tensors) {
  std::vector<Piece> pieces;
  for (int64_t t = 0; t < num_tensors; ++t) {
    for (int64_t b = 0; b < tensors[t].n; b += kCpuPiece) {
      pieces.push_back({t, b, std::min(tensors[t].n, b + kCpuPiece)});
    }
  }
  return pieces;
}

// (*sums)[i] = sum_of(pieces[i], &flag), (*bad)[i] = flag, the pieces taken by
// OpenMP threads in a static schedule.
template <typename F>
void sum_pieces(const std::vector<Piece>& pieces, int num_threads, std::vector<double>* sums,
                std::vector<char>* bad, F&& sum_of) {
  const int64_t count = static_cast<int64_t>(pieces.size());
  sums->assign(count, 0.0);
  bad->assign(count, 0);
  const int threads = thread_count(num_threads, count);
#pragma omp parallel for schedule(static) num_threads(threads) if (count > 1)
  for (int64_t i = 0; i < count; ++i) {
    bool b = false;
    (*sums)[i] = sum_of(pieces[i], &b);
    (*bad)[i] = b;
  }
}

// The piece sums (in tensor order, so each tensor's pieces are consecutive)
// summed per tensor, then over the tensors, in order: the norm does not depend
// on how threads took the pieces.
inline void finish_norm(const std::vector<Piece>& pieces, const std::vector<double>& sums,
                        const std::vector<char>& bad, int64_t num_tensors, float* global_norm,
                        float* per_tensor_norms, float* found_inf, float* clip_coef,
                        float max_norm) {
  std::vector<double> tensor_sq(num_tensors, 0.0);
  bool any_bad = false;
  for (size_t i = 0; i < pieces.size(); ++i) {
    tensor_sq[pieces[i].tensor] += sums[i];
    any_bad = any_bad || bad[i];
  }
  double total = 0;
  for (int64_t t = 0; t < num_tensors; ++t) {
    total += tensor_sq[t];
    if (per_tensor_norms != nullptr) {
      per_tensor_norms[t] = static_cast<float>(std::sqrt(tensor_sq[t]));
    }
  }
  const double norm = std::sqrt(total);
  *global_norm = static_cast<float>(norm);
  if (clip_coef != nullptr) {
    double coef = static_cast<double>(max_norm) / (norm + internal::kClipEps);
    if (coef > 1.0) coef = 1.0;  // a NaN norm leaves a NaN coefficient, as torch does
    *clip_coef = static_cast<float>(coef);
  }
  if (any_bad && found_inf != nullptr) *found_inf = 1.0f;
}

template <typename T>
KernelStatus l2_norm_typed(float* global_norm, float* per_tensor_norms, float* found_inf,
                           float* clip_coef, const TensorRef* tensors, int64_t num_tensors,
                           float max_norm, int num_threads, CpuIsa isa) {
  const std::vector<Piece> pieces = cut_pieces(tensors, num_tensors);
  const internal::SquaresFn<T> squares = internal::squares_for<T>(isa);
  std::vector<double> sums;
  std::vector<char> bad;
  sum_pieces(pieces, num_threads, &sums, &bad, [&](const Piece& w, bool* b) {
    const T* x = static_cast<const T*>(tensors[w.tensor].data) + w.begin;
    const double sum = squares(x, w.end - w.begin);
    flag_non_finite(x, w.end - w.begin, sum, b);
    return sum;
  });
  finish_norm(pieces, sums, bad, num_tensors, global_norm, per_tensor_norms, found_inf,
              clip_coef, max_norm);
  return KernelStatus();
}

template <typename T>
KernelStatus accumulate_typed(float* global_norm, float* found_inf,
                              const AccumulateTensor* tensors, int64_t num_tensors,
                              int num_threads, CpuIsa isa) {
  const std::vector<Piece> pieces = cut_pieces(tensors, num_tensors);
  const internal::AccumulateFn<T> accumulate = internal::accumulate_for<T>(isa);
  std::vector<double> sums;
  std::vector<char> bad;
  sum_pieces(pieces, num_threads, &sums, &bad, [&](const Piece& w, bool* b) {
    const AccumulateTensor& x = tensors[w.tensor];
    T* acc = static_cast<T*>(x.acc) + w.begin;
    const double sum = accumulate(acc, static_cast<const T*>(x.part) + w.begin, w.end - w.begin);
    flag_non_finite(acc, w.end - w.begin, sum, b);
    return sum;
  });
  if (global_norm != nullptr || found_inf != nullptr) {
    float norm = 0.0f;
    finish_norm(pieces, sums, bad, num_tensors, &norm, nullptr, found_inf, nullptr, 0.0f);
    if (global_norm != nullptr) *global_norm = norm;
  }
  return KernelStatus();
}

// Math in float unless a buffer is float64; one rounding to the output dtype.
template <typename In, typename Out>
using ScaleMath = std::conditional_t<std::is_same_v<In, double> || std::is_same_v<Out, double>,
                                     double, float>;

template <typename Out, typename M>
Out to_out(M y) {
  if constexpr (std::is_same_v<Out, double>) {
    return y;
  } else {
    return from_float<Out>(static_cast<float>(y));  // float64 -> half rounds through float32
  }
}

// 1 when x is inf or NaN (all exponent bits set); branch-free so loops vectorize.
inline uint32_t nonfinite(float x) {
  return (kernels::internal::float_bits(x) & 0x7f800000u) == 0x7f800000u;
}
inline uint32_t nonfinite(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof(u));
  return (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
}

// `omp simd`: Bazel's -O2 would not vectorize this loop on its own. in == out is
// fine (each element is read before it is written in the same iteration).
template <typename In, typename Out>
bool scale_range(const In* in, Out* out, int64_t n, ScaleMath<In, Out> s) {
  using M = ScaleMath<In, Out>;
  uint32_t bad = 0;
#pragma omp simd reduction(| : bad)
  for (int64_t i = 0; i < n; ++i) {
    const M x = static_cast<M>(to_math(in[i]));
    const Out o = to_out<Out, M>(x * s);
    out[i] = o;
    bad |= nonfinite(x) | nonfinite(static_cast<M>(to_math(o)));
  }
  return bad != 0;
}

template <typename In, typename Out>
KernelStatus scale_typed(float* found_inf, const ScaleTensor* tensors, const float* scale_factor,
                         int64_t num_tensors, float scale, int num_threads) {
  using M = ScaleMath<In, Out>;
  // s itself is always a float product, as on the device.
  const M s = static_cast<M>(scale_factor != nullptr ? scale * *scale_factor : scale);
  const std::vector<Piece> pieces = cut_pieces(tensors, num_tensors);
  const int64_t count = static_cast<int64_t>(pieces.size());
  int any_bad = 0;
  const int threads = thread_count(num_threads, count);
#pragma omp parallel for schedule(static) num_threads(threads) if (count > 1) \
    reduction(| : any_bad)
  for (int64_t i = 0; i < count; ++i) {
    const Piece& w = pieces[i];
    const ScaleTensor& x = tensors[w.tensor];
    any_bad |= scale_range(static_cast<const In*>(x.in) + w.begin,
                           static_cast<Out*>(x.out) + w.begin, w.end - w.begin, s)
                   ? 1
                   : 0;
  }
  if (any_bad && found_inf != nullptr) *found_inf = 1.0f;
  return KernelStatus();
}

}  // namespace

int64_t l2_norm_cuda_scratch_bytes(const TensorRef* tensors, int64_t num_tensors) {
  // An empty list is reduced as one empty tensor (the outputs are still written).
  if (num_tensors <= 0 || tensors == nullptr) return internal::norm_scratch_layout(1, 0).bytes;
  int64_t chunks = 0;
  for (int64_t t = 0; t < num_tensors; ++t) {
    chunks += internal::chunks_of(std::max<int64_t>(0, tensors[t].n));
  }
  return internal::norm_scratch_layout(num_tensors, chunks).bytes;
}

int64_t accumulate_cuda_scratch_bytes(const AccumulateTensor* tensors, int64_t num_tensors) {
  int64_t pieces = 0;
  for (int64_t t = 0; t < num_tensors && tensors != nullptr; ++t) {
    pieces += internal::cpu_pieces_of(std::max<int64_t>(0, tensors[t].n));
  }
  return internal::accumulate_scratch_layout(pieces).bytes;
}

int64_t scale_cuda_scratch_bytes(int64_t num_tensors) {
  if (num_tensors <= 0) return 0;
  return num_tensors * static_cast<int64_t>(sizeof(internal::ScaleDesc));
}

KernelStatus l2_norm_cpu(float* global_norm, float* per_tensor_norms, float* found_inf,
                         float* clip_coef, const TensorRef* tensors, int64_t num_tensors,
                         DType dtype, float max_norm, int num_threads, CpuIsa isa) {
  KernelStatus s = internal::check_norm_args(global_norm, clip_coef, tensors, num_tensors, max_norm);
  if (!s.ok()) return s;
  s = resolve_cpu_isa(isa, &isa, "l2_norm_cpu: unknown CpuIsa",
                      "l2_norm_cpu: this CPU lacks the requested instruction set");
  if (!s.ok()) return s;
  return dispatch_cpu_float(dtype, "l2_norm_cpu: dtype must be float32/16, bfloat16 or float64",
                            [&](auto tag) {
                              using T = decltype(tag);
                              for (int64_t t = 0; t < num_tensors; ++t) {
                                const KernelStatus c =
                                    internal::check_norm_tensor(tensors[t], sizeof(T));
                                if (!c.ok()) return c;
                              }
                              return l2_norm_typed<T>(global_norm, per_tensor_norms, found_inf,
                                                      clip_coef, tensors, num_tensors, max_norm,
                                                      num_threads, isa);
                            });
}

KernelStatus scale_cpu(float* found_inf, const ScaleTensor* tensors, const float* scale_factor,
                       int64_t num_tensors, DType in_dtype, DType out_dtype, float scale,
                       int num_threads) {
  KernelStatus s = internal::check_scale_args(tensors, num_tensors);
  if (!s.ok()) return s;
  const char* bad_dtype = "scale_cpu: dtypes must be float32/16, bfloat16 or float64";
  return dispatch_cpu_float(in_dtype, bad_dtype, [&](auto in_tag) {
    using In = decltype(in_tag);
    return dispatch_cpu_float(out_dtype, bad_dtype, [&](auto out_tag) {
      using Out = decltype(out_tag);
      for (int64_t t = 0; t < num_tensors; ++t) {
        const KernelStatus c = internal::check_scale_tensor(tensors[t], sizeof(In), sizeof(Out));
        if (!c.ok()) return c;
      }
      return scale_typed<In, Out>(found_inf, tensors, scale_factor, num_tensors, scale,
                                  num_threads);
    });
  });
}

KernelStatus accumulate_cpu(float* global_norm, float* found_inf, const AccumulateTensor* tensors,
                            int64_t num_tensors, DType dtype, int num_threads, CpuIsa isa) {
  const KernelStatus s = resolve_cpu_isa(isa, &isa, "accumulate_cpu: unknown CpuIsa",
                                         "accumulate_cpu: this CPU lacks the requested instruction set");
  if (!s.ok()) return s;
  const KernelStatus args = internal::check_accumulate_args(tensors, num_tensors);
  if (!args.ok()) return args;
  return dispatch_cpu_float(
      dtype, "accumulate_cpu: dtype must be float32/16, bfloat16 or float64", [&](auto tag) {
        using T = decltype(tag);
        for (int64_t t = 0; t < num_tensors; ++t) {
          const KernelStatus c = internal::check_accumulate_tensor(tensors[t], sizeof(T));
          if (!c.ok()) return c;
        }
        return accumulate_typed<T>(global_norm, found_inf, tensors, num_tensors, num_threads, isa);
      });
}

}  // namespace colossal::kernels::multi_tensor
