// Argument checks shared by the CPU and CUDA entry points of kernels/loss, so
// both backends accept and reject exactly the same calls (private header).
#ifndef COLOSSAL_KERNELS_LOSS_LOSS_ARGS_H_
#define COLOSSAL_KERNELS_LOSS_LOSS_ARGS_H_

#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"
#include "kernels/loss/loss.h"

namespace colossal::kernels::loss::internal {

enum class Entry { kForward, kBackward, kFused, kShardMax, kShardSumExp, kShardBackward };

inline bool is_shard(Entry e) { return e >= Entry::kShardMax; }
// Entries that read only the real columns and write per-row values (pass 1).
inline bool row_stats_only(Entry e) {
  return e == Entry::kForward || e == Entry::kShardMax || e == Entry::kShardSumExp;
}
inline bool writes_grad(Entry e) {
  return e == Entry::kBackward || e == Entry::kFused || e == Entry::kShardBackward;
}

struct Args {
  float* loss = nullptr;
  float* row_losses = nullptr;
  float* lse_out = nullptr;
  const float* lse_in = nullptr;
  void* dlogits = nullptr;
  const void* logits = nullptr;
  const int32_t* targets = nullptr;
  int64_t n = 0;
  int64_t v = 0;
  int64_t v_real = 0;
  DType dtype = DType::kF32;
  CrossEntropyOptions options;
  // Vocabulary shards: the logits are global columns [v_start, v_start + v)
  // and v_real is the GLOBAL real vocabulary size (0 and v_real <= v otherwise).
  int64_t v_start = 0;
  float* shard_max = nullptr;         // kShardMax outputs
  float* target_logit = nullptr;
  float* shard_sum = nullptr;         // kShardSumExp output
  const float* global_max = nullptr;  // kShardSumExp, kShardBackward
  const float* global_sum = nullptr;  // kShardBackward

  // Columns of a row that are real: v_real for the whole vocabulary, the
  // shard's part of [0, v_real) for a shard (possibly none).
  int64_t local_real() const { return std::clamp<int64_t>(v_real - v_start, 0, v); }
};

// The Args of each public entry point, from its parameters (the same for the
// CPU and CUDA functions).
inline Args forward_args(float* loss, float* row_losses, float* lse, const void* logits,
                         const int32_t* targets, int64_t n, int64_t v, int64_t v_real,
                         DType dtype, const CrossEntropyOptions& options) {
  Args a;
  a.loss = loss;
  a.row_losses = row_losses;
  a.lse_out = lse;
  a.logits = logits;
  a.targets = targets;
  a.n = n;
  a.v = v;
  a.v_real = v_real;
  a.dtype = dtype;
  a.options = options;
  return a;
}

inline Args backward_args(void* dlogits, const void* logits, const float* lse,
                          const int32_t* targets, int64_t n, int64_t v, int64_t v_real,
                          DType dtype, const CrossEntropyOptions& options) {
  Args a = forward_args(nullptr, nullptr, nullptr, logits, targets, n, v, v_real, dtype, options);
  a.dlogits = dlogits;
  a.lse_in = lse;
  return a;
}

inline Args fused_args(float* loss, float* row_losses, float* lse, void* dlogits,
                       const void* logits, const int32_t* targets, int64_t n, int64_t v,
                       int64_t v_real, DType dtype, const CrossEntropyOptions& options) {
  Args a = forward_args(loss, row_losses, lse, logits, targets, n, v, v_real, dtype, options);
  a.dlogits = dlogits;
  return a;
}

inline Args shard_max_args(float* row_max, float* target_logit, const void* logits,
                           const int32_t* targets, int64_t n, int64_t v, int64_t v_start,
                           int64_t v_real, int32_t ignore_index, DType dtype) {
  CrossEntropyOptions options;
  options.reduction = Reduction::kNone;
  options.ignore_index = ignore_index;
  Args a = forward_args(nullptr, nullptr, nullptr, logits, targets, n, v, v_real, dtype, options);
  a.v_start = v_start;
  a.shard_max = row_max;
  a.target_logit = target_logit;
  return a;
}

inline Args shard_sum_exp_args(float* row_sum, const void* logits, const float* row_max, int64_t n,
                               int64_t v, int64_t v_start, int64_t v_real, DType dtype) {
  Args a = shard_max_args(nullptr, nullptr, logits, nullptr, n, v, v_start, v_real,
                          kDefaultIgnoreIndex, dtype);
  a.shard_sum = row_sum;
  a.global_max = row_max;
  return a;
}

inline Args shard_backward_args(void* dlogits, const void* logits, const float* row_max,
                                const float* row_sum, const int32_t* targets, int64_t n, int64_t v,
                                int64_t v_start, int64_t v_real, int32_t ignore_index,
                                DType dtype) {
  Args a = shard_max_args(nullptr, nullptr, logits, targets, n, v, v_start, v_real, ignore_index,
                          dtype);
  a.dlogits = dlogits;
  a.global_max = row_max;
  a.global_sum = row_sum;
  return a;
}

inline bool aligned(const void* p, size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

inline bool needs_total(Reduction r) { return r == Reduction::kSum || r == Reduction::kMean; }

// The checks every entry point runs before touching memory. `allow_f64` is
// true for the CPU backend only. A call that returns ok with n == 0 has
// nothing to do except write loss = 0 for kSum/kMean.
inline KernelStatus validate(Entry entry, const Args& a, bool allow_f64) {
  const Reduction r = a.options.reduction;
  if (r != Reduction::kNone && r != Reduction::kSum && r != Reduction::kMean) {
    return KernelStatus::invalid_argument("cross_entropy: unknown Reduction");
  }
  const bool float_type = a.dtype == DType::kF32 || a.dtype == DType::kF16 ||
                          a.dtype == DType::kBF16 || (allow_f64 && a.dtype == DType::kF64);
  if (!float_type) {
    return KernelStatus::unsupported(allow_f64
                                         ? "cross_entropy: dtype must be float32/float16/bfloat16/float64"
                                         : "cross_entropy: dtype must be float32/float16/bfloat16");
  }
  if (a.n < 0 || a.v < 0 || a.v_real < 0 || a.v_start < 0) {
    return KernelStatus::invalid_argument("cross_entropy: negative size");
  }
  // A shard's v_real is the global vocabulary's: it may exceed the shard's v.
  if (!is_shard(entry) && a.v_real > a.v) {
    return KernelStatus::invalid_argument("cross_entropy: v_real > v");
  }
  if (needs_total(r) && entry != Entry::kBackward && a.loss == nullptr) {
    return KernelStatus::invalid_argument("cross_entropy: loss is null with reduction sum/mean");
  }
  if (a.loss != nullptr && !aligned(a.loss, alignof(float))) {
    return KernelStatus::invalid_argument("cross_entropy: misaligned loss");
  }
  if (a.n == 0) return KernelStatus();
  if (a.v_real == 0) return KernelStatus::invalid_argument("cross_entropy: v_real == 0 with n > 0");
  if (a.v == 0) return KernelStatus::invalid_argument("cross_entropy: v == 0 with n > 0");
  if (a.v_start > std::numeric_limits<int64_t>::max() - a.v ||
      a.n > std::numeric_limits<int64_t>::max() / a.v / 8) {
    return KernelStatus::invalid_argument("cross_entropy: n * v or v_start + v too large");
  }
  // vocab_shard_sum_exp alone reads no targets.
  if (a.logits == nullptr || (a.targets == nullptr && entry != Entry::kShardSumExp)) {
    return KernelStatus::invalid_argument("cross_entropy: null logits or targets with n > 0");
  }
  if ((entry == Entry::kForward || entry == Entry::kFused) && a.row_losses == nullptr) {
    return KernelStatus::invalid_argument("cross_entropy: null row_losses with n > 0");
  }
  if (entry == Entry::kBackward && a.lse_in == nullptr) {
    return KernelStatus::invalid_argument("cross_entropy: backward needs lse");
  }
  if (writes_grad(entry) && a.dlogits == nullptr) {
    return KernelStatus::invalid_argument("cross_entropy: null dlogits with n > 0");
  }
  if ((entry == Entry::kShardMax && (a.shard_max == nullptr || a.target_logit == nullptr)) ||
      (entry == Entry::kShardSumExp && (a.shard_sum == nullptr || a.global_max == nullptr)) ||
      (entry == Entry::kShardBackward && (a.global_max == nullptr || a.global_sum == nullptr))) {
    return KernelStatus::invalid_argument("vocab_shard: null row_max, target_logit or row_sum");
  }
  const size_t es = dtype_size(a.dtype);
  bool ok = aligned(a.logits, es) && (a.dlogits == nullptr || aligned(a.dlogits, es)) &&
            aligned(a.targets, alignof(int32_t));
  const float* floats[] = {a.row_losses, a.lse_out,   a.lse_in,     a.shard_max,
                           a.target_logit, a.shard_sum, a.global_max, a.global_sum};
  for (const float* p : floats) {
    ok = ok && (p == nullptr || aligned(p, alignof(float)));
  }
  if (!ok) return KernelStatus::invalid_argument("cross_entropy: misaligned pointer");
  if (writes_grad(entry) && a.dlogits != a.logits) {
    const uintptr_t x = reinterpret_cast<uintptr_t>(a.logits);
    const uintptr_t d = reinterpret_cast<uintptr_t>(a.dlogits);
    const uintptr_t bytes = static_cast<uintptr_t>(a.n * a.v) * es;
    if (x < d + bytes && d < x + bytes) {
      return KernelStatus::invalid_argument("cross_entropy: dlogits partially overlaps logits");
    }
  }
  return KernelStatus();
}

}  // namespace colossal::kernels::loss::internal

#endif  // COLOSSAL_KERNELS_LOSS_LOSS_ARGS_H_
