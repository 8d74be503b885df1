// CPU reference and backend for kernels/moe, and the host-side expert_slots.
// Math in double, each output rounded once; tokens in parallel (each token's
// outputs are computed the same way whatever the thread count).
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/common/round_once.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_args.h"

namespace colossal::kernels::moe {
namespace {

// Below this many elements a loop runs on the calling thread.
constexpr int64_t kParallelMin = int64_t{1} << 16;

template <typename T>
double load(const T* p, int64_t i) {
  return static_cast<double>(to_math(p[i]));
}

// The routing weights' type for element type T.
template <typename T>
using WeightT = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename F>
KernelStatus dispatch_cpu_types(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(float{});
    case DType::kF16: return f(Half{});
    case DType::kBF16: return f(BFloat16{});
    case DType::kF64: return f(double{});
    default: return KernelStatus::unsupported("moe: dtype must be float32, float16, bfloat16 or float64");
  }
}

// One token's softmax over its E logits: p(l) = exp(l - max) / denom.
struct Softmax {
  double max = 0.0, denom = 0.0;
  double p(double logit) const { return std::exp(logit - max) / denom; }
};

template <typename T>
Softmax softmax_of(const T* l, int64_t E) {
  Softmax s;
  s.max = load(l, 0);
  for (int64_t e = 1; e < E; ++e) s.max = std::fmax(s.max, load(l, e));
  for (int64_t e = 0; e < E; ++e) s.denom += std::exp(load(l, e) - s.max);
  return s;
}

// One token's routing: the chosen experts (by logit, ties to the lower
// index), p = softmax(logits) of each, and their sum.
struct Route {
  int32_t expert[kMaxTopK];
  double p[kMaxTopK];
  double selected_sum = 0.0;
};

template <typename T>
Route route_token(const T* l, int64_t E, int64_t k) {
  Route r;
  const Softmax softmax = softmax_of(l, E);
  for (int64_t i = 0; i < k; ++i) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int64_t j = 0; j < i; ++j) taken |= r.expert[j] == e;
      if (taken) continue;
      if (best < 0 || load(l, e) > load(l, best)) best = e;
    }
    r.expert[i] = static_cast<int32_t>(best);
    r.p[i] = softmax.p(load(l, best));
    r.selected_sum += r.p[i];
  }
  return r;
}

}  // namespace

KernelStatus expert_slots(int32_t* slots, int64_t* offsets, const int32_t* experts, int64_t tokens,
                          int64_t num_experts, int64_t top_k) {
  KernelStatus st = internal::check_route(tokens, num_experts, top_k, {slots, experts});
  if (!st.ok()) return st;
  if (offsets == nullptr) return KernelStatus::invalid_argument("expert_slots: null offsets");
  const int64_t pairs = tokens * top_k;
  if (pairs > 0x7fffffff) return KernelStatus::invalid_argument("expert_slots: tokens * top_k >= 2^31");
  std::vector<int64_t> next(num_experts + 1, 0);
  for (int64_t p = 0; p < pairs; ++p) {
    const int32_t e = experts[p];
    if (e < 0 || e >= num_experts) {
      return KernelStatus::invalid_argument(
          "expert_slots: an expert index outside [0, num_experts) (non-finite router logits?)");
    }
    ++next[e + 1];
  }
  for (int64_t e = 0; e < num_experts; ++e) next[e + 1] += next[e];
  for (int64_t e = 0; e <= num_experts; ++e) offsets[e] = next[e];
  for (int64_t p = 0; p < pairs; ++p) slots[p] = static_cast<int32_t>(next[experts[p]]++);
  return KernelStatus();
}

KernelStatus route_forward_cpu(void* weights, int32_t* experts, const void* logits, int64_t tokens,
                               int64_t num_experts, int64_t top_k, bool normalize, DType dtype) {
  KernelStatus st = internal::check_route(tokens, num_experts, top_k, {weights, experts, logits});
  if (!st.ok()) return st;
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    using W = WeightT<T>;
#pragma omp parallel for schedule(static) if (tokens * num_experts >= kParallelMin)
    for (int64_t t = 0; t < tokens; ++t) {
      const Route r = route_token(static_cast<const T*>(logits) + t * num_experts, num_experts, top_k);
      for (int64_t i = 0; i < top_k; ++i) {
        experts[t * top_k + i] = r.expert[i];
        static_cast<W*>(weights)[t * top_k + i] =
            static_cast<W>(normalize ? r.p[i] / r.selected_sum : r.p[i]);
      }
    }
    return KernelStatus();
  });
}

KernelStatus route_backward_cpu(void* dlogits, const void* dweights, const void* logits,
                                const int32_t* experts, int64_t tokens, int64_t num_experts,
                                int64_t top_k, bool normalize, DType dtype) {
  KernelStatus st =
      internal::check_route(tokens, num_experts, top_k, {dlogits, dweights, logits, experts});
  if (!st.ok()) return st;
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    using W = WeightT<T>;
#pragma omp parallel for schedule(static) if (tokens * num_experts >= kParallelMin)
    for (int64_t t = 0; t < tokens; ++t) {
      const T* l = static_cast<const T*>(logits) + t * num_experts;
      const W* dw = static_cast<const W*>(dweights) + t * top_k;
      const int32_t* ex = experts + t * top_k;
      const Softmax softmax = softmax_of(l, num_experts);
      // dp_j, the gradient of p at the chosen experts; with normalize,
      // w_j = p_j / S gives dp_j = (dw_j - sum_i dw_i w_i) / S.
      double p[kMaxTopK], dp[kMaxTopK], S = 0.0, dot = 0.0;
      for (int64_t i = 0; i < top_k; ++i) {
        p[i] = softmax.p(load(l, ex[i]));
        S += p[i];
      }
      for (int64_t i = 0; i < top_k; ++i) dot += static_cast<double>(dw[i]) * (p[i] / S);
      double pdp = 0.0;  // sum_j dp_j p_j
      for (int64_t i = 0; i < top_k; ++i) {
        dp[i] = normalize ? (static_cast<double>(dw[i]) - dot) / S : static_cast<double>(dw[i]);
        pdp += dp[i] * p[i];
      }
      // Softmax backward: dl_e = p_e (dp_e - sum_j dp_j p_j), dp_e = 0 off the choice.
      T* dl = static_cast<T*>(dlogits) + t * num_experts;
      for (int64_t e = 0; e < num_experts; ++e) {
        double g = 0.0;
        for (int64_t i = 0; i < top_k; ++i) {
          if (ex[i] == e) g = dp[i];
        }
        const double pe = softmax.p(load(l, e));
        dl[e] = round_once<T>(pe * (g - pdp));
      }
    }
    return KernelStatus();
  });
}

KernelStatus dispatch_cpu(void* rows, const void* x, const int32_t* slots, int64_t tokens, int64_t top_k,
                          int64_t cols, DType dtype) {
  KernelStatus st = internal::check_rows(tokens, top_k, cols, {rows, x, slots});
  if (!st.ok()) return st;
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
#pragma omp parallel for schedule(static) if (tokens * top_k * cols >= kParallelMin)
    for (int64_t t = 0; t < tokens; ++t) {
      const T* src = static_cast<const T*>(x) + t * cols;
      for (int64_t i = 0; i < top_k; ++i) {
        T* dst = static_cast<T*>(rows) + int64_t{slots[t * top_k + i]} * cols;
        for (int64_t c = 0; c < cols; ++c) dst[c] = src[c];
      }
    }
    return KernelStatus();
  });
}

KernelStatus combine_cpu(void* out, const void* rows, const int32_t* slots, const void* weights,
                         const void* residual, int64_t tokens, int64_t top_k, int64_t cols, DType dtype) {
  KernelStatus st = internal::check_rows(tokens, top_k, cols, {out, rows, slots});
  if (!st.ok()) return st;
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    using W = WeightT<T>;
    const T* in = static_cast<const T*>(rows);
    const T* res = static_cast<const T*>(residual);
#pragma omp parallel for schedule(static) if (tokens * top_k * cols >= kParallelMin)
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t c = 0; c < cols; ++c) {
        double acc = res != nullptr ? load(res, t * cols + c) : 0.0;
        for (int64_t i = 0; i < top_k; ++i) {
          const double w =
              weights != nullptr ? static_cast<double>(static_cast<const W*>(weights)[t * top_k + i]) : 1.0;
          acc += w * load(in, int64_t{slots[t * top_k + i]} * cols + c);
        }
        static_cast<T*>(out)[t * cols + c] = round_once<T>(acc);
      }
    }
    return KernelStatus();
  });
}

KernelStatus combine_backward_cpu(void* drows, void* dweights, const void* dout, const void* rows,
                                  const int32_t* slots, const void* weights, int64_t tokens,
                                  int64_t top_k, int64_t cols, DType dtype) {
  KernelStatus st = internal::check_rows(tokens, top_k, cols, {drows, dout, rows, slots, weights});
  if (!st.ok()) return st;
  if (tokens > 0 && (dweights == nullptr || weights == nullptr)) return KernelStatus::invalid_argument("moe rows: null buffer");
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    using W = WeightT<T>;
    const T* dy = static_cast<const T*>(dout);
    const T* y = static_cast<const T*>(rows);
#pragma omp parallel for schedule(static) if (tokens * top_k * cols >= kParallelMin)
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t i = 0; i < top_k; ++i) {
        const int64_t r = slots[t * top_k + i];
        const double w = static_cast<double>(static_cast<const W*>(weights)[t * top_k + i]);
        double dot = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
          const double g = load(dy, t * cols + c);
          dot += g * load(y, r * cols + c);
          static_cast<T*>(drows)[r * cols + c] = round_once<T>(w * g);
        }
        static_cast<W*>(dweights)[t * top_k + i] = static_cast<W>(dot);
      }
    }
    return KernelStatus();
  });
}

}  // namespace colossal::kernels::moe
