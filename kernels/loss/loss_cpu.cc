// CPU backend for kernels/loss. float32 logits (CPU training) take exp in
// float32 (x - max rounded to float32, libmvec's 8-lane expf within 4 ulp:
// each probability within (8 + max - x) * 2^-24 relative) with the sums, log
// and gradient in float64. Other element types compute every row in float64
// (max, sum of exponentials, log, gradient), exp being libmvec's 4-lane
// float64 exp (within 4 ulp), and round once to the output type: float64
// logits keep full float64 gradients for the finite-difference tests. Rows are
// independent; the kSum/kMean total is a float64 sum of the float32 row
// losses in index order. The vocabulary-shard functions take the same
// exponentials, shifted by the caller's global max, and round each row's sum
// once to float32.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/common/half.h"
#include "kernels/common/vector_exp.h"
#include "kernels/loss/loss.h"
#include "kernels/loss/loss_args.h"

namespace colossal::kernels::loss {
namespace {

using internal::Args;
using internal::Entry;

template <typename T>
double load(const T* x, int64_t j) {
  return static_cast<double>(to_math(x[j]));
}

template <typename T>
T store(double g) {
  if constexpr (std::is_same_v<T, double>) {
    return g;
  } else {
    return from_math<T>(static_cast<float>(g));
  }
}

// Rows are walked in chunks whose exp arguments are gathered in float64 and
// exponentiated 4 at a time (kernels/common/vector_exp.h).
constexpr int64_t kChunk = 256;

// sum_j exp(x_j - m) over j < v_real in float64, in four interleaved partial
// sums (j mod 4): a fixed order, the same on every CPU. The exponentials are
// kept in e[0, v_real) for the gradient.
template <typename T>
double sum_exp(const T* x, int64_t v_real, double m, double* e) {
  double s[4] = {0.0, 0.0, 0.0, 0.0};
  for (int64_t j0 = 0; j0 < v_real; j0 += kChunk) {
    const int64_t len = std::min(kChunk, v_real - j0);
    double* buf = e + j0;
#pragma omp simd
    for (int64_t k = 0; k < len; ++k) buf[k] = load(x, j0 + k) - m;
    exp_f64(buf, buf, len);
    for (int64_t k = 0; k < len; ++k) s[k & 3] += buf[k];
  }
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// The exponentials a row keeps for its gradient: float32 for float32 logits
// (the CPU training path: the difference x - max and exp in float32 through
// libmvec's 8-lane expf, 8 values per instruction), float64 otherwise.
template <typename T>
using ExpT = std::conditional_t<std::is_same_v<T, float>, float, double>;

// The largest of x[0, len) (-inf for len == 0); *nan is set when any is NaN,
// which the max passes over (as max_f32 and CUDA's fmaxf do).
template <typename T>
double row_max(const T* x, int64_t len, bool* nan) {
  if constexpr (std::is_same_v<T, float>) return max_f32(x, len, nan);
  double m = -std::numeric_limits<double>::infinity();
  bool any = false;
#pragma omp simd reduction(max : m) reduction(|| : any)
  for (int64_t j = 0; j < len; ++j) {
    const double xj = load(x, j);
    any = any || std::isnan(xj);
    m = xj > m ? xj : m;
  }
  *nan = any;
  return m;
}

// e[j] = exp(x_j - shift) for j < len and their float64 sum: float32 exp for
// float32 logits (the shift rounded to float32), float64 for the others.
template <typename T>
double exp_sum(const T* x, int64_t len, double shift, ExpT<T>* e) {
  if constexpr (std::is_same_v<T, float>) {
    return exp_shifted_sum_f32f(x, len, static_cast<float>(shift), e);
  } else {
    return sum_exp(x, len, shift, e);
  }
}

// A row's exponentials, kept between the sum and the gradient: one exp per
// element. One buffer per thread, grown to the longest row seen.
template <typename T>
ExpT<T>* row_buffer(int64_t len) {
  thread_local std::vector<ExpT<T>> e;
  if (static_cast<int64_t>(e.size()) < len) e.resize(len);
  return e.data();
}

// log(sum_j exp(x_j)) over j < v_real, max-shifted; NaN or +inf anywhere gives
// NaN (as on CUDA, where +inf - +inf appears), a row of -inf gives -inf. A
// finite result leaves e[j] = exp(x_j - max) for j < v_real and *sum their sum.
template <typename T>
double row_logsumexp(const T* x, int64_t v_real, ExpT<T>* e, double* sum) {
  bool nan = false;
  const double m = row_max(x, v_real, &nan);
  if (nan || m == std::numeric_limits<double>::infinity()) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (std::isinf(m)) return m;
  const double s = exp_sum(x, v_real, m, e);
  *sum = s;
  return m + std::log(s);
}

// dlogits row = scale * (softmax - onehot(t)) for j < v_real, 0 after, from
// the row's lse (exp once more per element). x may equal d: each chunk is read
// before it is written and never read again.
template <typename T>
void write_grad_row(T* d, const T* x, double lse, int32_t t, double scale, int64_t v,
                    int64_t v_real) {
  double buf[kChunk];
  for (int64_t j0 = 0; j0 < v_real; j0 += kChunk) {
    const int64_t len = std::min(kChunk, v_real - j0);
#pragma omp simd
    for (int64_t k = 0; k < len; ++k) buf[k] = load(x, j0 + k) - lse;
    exp_f64(buf, buf, len);
#pragma omp simd
    for (int64_t k = 0; k < len; ++k) d[j0 + k] = store<T>(scale * buf[k]);
    if (t >= j0 && t < j0 + len) d[t] = store<T>(scale * (buf[t - j0] - 1.0));
  }
  for (int64_t j = v_real; j < v; ++j) d[j] = store<T>(0.0);
}

// The same from the exponentials e[j] = exp(x_j - m) the forward kept and
// their sum s: softmax_j = e[j] / s (no second exp). t < 0: the target is not
// among these columns (another vocabulary shard's).
template <typename T, typename E>
void write_grad_row_from_exp(T* d, const E* e, double s, int64_t t, double scale, int64_t v,
                             int64_t v_real) {
  const double w = scale / s;
  if constexpr (std::is_same_v<T, float>) {
    scale_to_f32(e, v_real, w, d);
  } else {
#pragma omp simd
    for (int64_t j = 0; j < v_real; ++j) d[j] = store<T>(w * e[j]);
  }
  if (t >= 0) d[t] = store<T>(scale * (static_cast<double>(e[t]) / s - 1.0));
  for (int64_t j = v_real; j < v; ++j) d[j] = store<T>(0.0);
}

template <typename T>
void zero_row(T* d, int64_t v) {
  for (int64_t j = 0; j < v; ++j) d[j] = store<T>(0.0);
}

// Every non-ignored target must lie in [0, v_real); checked before any write.
KernelStatus check_targets(const Args& a) {
  for (int64_t i = 0; i < a.n; ++i) {
    const int32_t t = a.targets[i];
    if (t != a.options.ignore_index && (t < 0 || t >= a.v_real)) {
      return KernelStatus::invalid_argument("cross_entropy_cpu: target out of range [0, v_real)");
    }
  }
  return KernelStatus();
}

int64_t count_rows(const Args& a) {
  int64_t count = 0;
  for (int64_t i = 0; i < a.n; ++i) count += a.targets[i] != a.options.ignore_index;
  return count;
}

// dloss times the weight of each row's loss in options.reduction.
double row_scale(const Args& a, float dloss) {
  if (a.options.reduction != Reduction::kMean) return dloss;
  const int64_t count = count_rows(a);
  return count > 0 ? static_cast<double>(dloss) / static_cast<double>(count) : 0.0;
}

void write_total(const Args& a) {
  if (!internal::needs_total(a.options.reduction)) return;
  double sum = 0.0;
  for (int64_t i = 0; i < a.n; ++i) sum += a.row_losses[i];
  if (a.options.reduction == Reduction::kMean) {
    const int64_t count = count_rows(a);
    sum = count > 0 ? sum / static_cast<double>(count) : 0.0;
  }
  a.loss[0] = static_cast<float>(sum);
}

// Forward (grad == false) or fused forward+backward (grad == true).
template <typename T>
void forward_rows(const Args& a, bool grad, float dloss) {
  const T* logits = static_cast<const T*>(a.logits);
  T* dlogits = static_cast<T*>(a.dlogits);
  const double scale = grad ? row_scale(a, dloss) : 0.0;
  // Rows are independent and each is computed the same way whatever the
  // thread count; the total is summed afterwards in row order (write_total),
  // so results do not depend on the number of threads. Small problems stay on
  // the calling thread (waking the team would cost more).
#pragma omp parallel for schedule(static) if (a.n * a.v >= (int64_t{1} << 16))
  for (int64_t i = 0; i < a.n; ++i) {
    const T* x = logits + i * a.v;
    const int32_t t = a.targets[i];
    ExpT<T>* e = row_buffer<T>(a.v_real);
    double s = 0.0;
    const double lse = row_logsumexp(x, a.v_real, e, &s);
    if (a.lse_out != nullptr) a.lse_out[i] = static_cast<float>(lse);
    if (t == a.options.ignore_index) {
      a.row_losses[i] = 0.0f;
      if (grad) zero_row(dlogits + i * a.v, a.v);
      continue;
    }
    a.row_losses[i] = static_cast<float>(lse - load(x, t));
    if (grad) {
      // e[j] / s equals the contract's exp(x_j - lse) up to the rounding of
      // lse = m + log(s): under 2^-33 relative while |lse| < 2^20, far below
      // float32's 2^-24. Beyond (logits near float32's range, where log(s)
      // vanishes in lse), NaN, or a row of -inf: exp(x_j - lse) itself.
      if (std::fabs(lse) < 0x1p20) {
        write_grad_row_from_exp(dlogits + i * a.v, e, s, t, scale, a.v, a.v_real);
      } else {
        write_grad_row(dlogits + i * a.v, x, lse, t, scale, a.v, a.v_real);
      }
    }
  }
  write_total(a);
}

template <typename T>
void backward_rows(const Args& a, float dloss) {
  const T* logits = static_cast<const T*>(a.logits);
  T* dlogits = static_cast<T*>(a.dlogits);
  const double scale = row_scale(a, dloss);
#pragma omp parallel for schedule(static) if (a.n * a.v >= (int64_t{1} << 16))
  for (int64_t i = 0; i < a.n; ++i) {
    const int32_t t = a.targets[i];
    if (t == a.options.ignore_index) {
      zero_row(dlogits + i * a.v, a.v);
    } else {
      write_grad_row(dlogits + i * a.v, logits + i * a.v, static_cast<double>(a.lse_in[i]), t,
                     scale, a.v, a.v_real);
    }
  }
}

// ---- vocabulary shards ----

// The shift of a row's exponentials: the global max, or 0 when it is -inf.
double shift_of(float m) { return m == -std::numeric_limits<float>::infinity() ? 0.0 : m; }

// Column of row i's target among the shard's real columns, or -1 (ignored row,
// or a target in another shard).
int64_t local_target(const Args& a, int64_t i) {
  const int32_t t = a.targets[i];
  if (t == a.options.ignore_index) return -1;
  const int64_t j = t - a.v_start;
  return j >= 0 && j < a.local_real() ? j : -1;
}

// f(i, x) for every row i of logits x, rows in parallel as the other entries.
template <typename T, typename F>
void for_each_row(const Args& a, F&& f) {
  const T* logits = static_cast<const T*>(a.logits);
#pragma omp parallel for schedule(static) if (a.n * a.v >= (int64_t{1} << 16))
  for (int64_t i = 0; i < a.n; ++i) f(i, logits + i * a.v);
}

template <typename T>
void shard_max_rows(const Args& a) {
  for_each_row<T>(a, [&](int64_t i, const T* x) {
    bool nan = false;
    a.shard_max[i] = static_cast<float>(row_max(x, a.local_real(), &nan));
    const int64_t t = local_target(a, i);
    a.target_logit[i] = t >= 0 ? static_cast<float>(load(x, t)) : 0.0f;
  });
}

template <typename T>
void shard_sum_exp_rows(const Args& a) {
  const int64_t local = a.local_real();
  for_each_row<T>(a, [&](int64_t i, const T* x) {
    const double sum = exp_sum(x, local, shift_of(a.global_max[i]), row_buffer<T>(local));
    a.shard_sum[i] = static_cast<float>(sum);
  });
}

// Each row's exponentials are all taken before its first store, so dlogits
// may be the logits.
template <typename T>
void shard_backward_rows(const Args& a, float scale) {
  const int64_t local = a.local_real();
  for_each_row<T>(a, [&](int64_t i, const T* x) {
    T* d = static_cast<T*>(a.dlogits) + i * a.v;
    if (a.targets[i] == a.options.ignore_index) {
      zero_row(d, a.v);
      return;
    }
    ExpT<T>* e = row_buffer<T>(local);
    (void)exp_sum(x, local, shift_of(a.global_max[i]), e);
    write_grad_row_from_exp(d, e, a.global_sum[i], local_target(a, i), scale, a.v, local);
  });
}

template <typename F>
KernelStatus dispatch_cpu_types(DType dtype, F&& f) {
  if (dtype == DType::kF64) return f(double{});
  return dispatch_float_types(dtype, f);
}

KernelStatus run(Entry entry, const Args& a, float dloss) {
  KernelStatus s = internal::validate(entry, a, /*allow_f64=*/true);
  if (!s.ok()) return s;
  if (a.n == 0) {
    if (entry != Entry::kBackward && internal::needs_total(a.options.reduction)) a.loss[0] = 0.0f;
    return KernelStatus();
  }
  if (entry != Entry::kShardSumExp) {
    s = check_targets(a);
    if (!s.ok()) return s;
  }
  return dispatch_cpu_types(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    switch (entry) {
      case Entry::kForward: forward_rows<T>(a, /*grad=*/false, 0.0f); break;
      case Entry::kFused: forward_rows<T>(a, /*grad=*/true, dloss); break;
      case Entry::kBackward: backward_rows<T>(a, dloss); break;
      case Entry::kShardMax: shard_max_rows<T>(a); break;
      case Entry::kShardSumExp: shard_sum_exp_rows<T>(a); break;
      case Entry::kShardBackward: shard_backward_rows<T>(a, dloss); break;
    }
    return KernelStatus();
  });
}

}  // namespace

const char* reduction_name(Reduction reduction) {
  switch (reduction) {
    case Reduction::kNone: return "none";
    case Reduction::kSum: return "sum";
    case Reduction::kMean: return "mean";
  }
  return "unknown";
}

KernelStatus cross_entropy_forward_cpu(float* loss, float* row_losses, float* lse,
                                       const void* logits, const int32_t* targets, int64_t n,
                                       int64_t v, int64_t v_real, DType dtype,
                                       const CrossEntropyOptions& options) {
  const Args a = internal::forward_args(loss, row_losses, lse, logits, targets, n, v, v_real, dtype, options);
  return run(Entry::kForward, a, 0.0f);
}

KernelStatus cross_entropy_backward_cpu(void* dlogits, const void* logits, const float* lse,
                                        const int32_t* targets, float dloss, int64_t n, int64_t v,
                                        int64_t v_real, DType dtype,
                                        const CrossEntropyOptions& options) {
  const Args a = internal::backward_args(dlogits, logits, lse, targets, n, v, v_real, dtype, options);
  return run(Entry::kBackward, a, dloss);
}

KernelStatus cross_entropy_fused_cpu(float* loss, float* row_losses, float* lse, void* dlogits,
                                     const void* logits, const int32_t* targets, float dloss,
                                     int64_t n, int64_t v, int64_t v_real, DType dtype,
                                     const CrossEntropyOptions& options) {
  const Args a =
      internal::fused_args(loss, row_losses, lse, dlogits, logits, targets, n, v, v_real, dtype, options);
  return run(Entry::kFused, a, dloss);
}

KernelStatus vocab_shard_max_cpu(float* row_max, float* target_logit, const void* logits,
                                 const int32_t* targets, int64_t n, int64_t v, int64_t v_start,
                                 int64_t v_real, int32_t ignore_index, DType dtype) {
  return run(Entry::kShardMax,
             internal::shard_max_args(row_max, target_logit, logits, targets, n, v, v_start,
                                      v_real, ignore_index, dtype),
             0.0f);
}

KernelStatus vocab_shard_sum_exp_cpu(float* row_sum, const void* logits, const float* row_max,
                                     int64_t n, int64_t v, int64_t v_start, int64_t v_real,
                                     DType dtype) {
  return run(Entry::kShardSumExp,
             internal::shard_sum_exp_args(row_sum, logits, row_max, n, v, v_start, v_real, dtype),
             0.0f);
}

KernelStatus vocab_shard_backward_cpu(void* dlogits, const void* logits, const float* row_max,
                                      const float* row_sum, const int32_t* targets, float scale,
                                      int64_t n, int64_t v, int64_t v_start, int64_t v_real,
                                      int32_t ignore_index, DType dtype) {
  return run(Entry::kShardBackward,
             internal::shard_backward_args(dlogits, logits, row_max, row_sum, targets, n, v,
                                           v_start, v_real, ignore_index, dtype),
             scale);
}

}  // namespace colossal::kernels::loss
