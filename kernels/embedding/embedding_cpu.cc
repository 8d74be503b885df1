// CPU reference and backend for kernels/embedding.
//
// Forward: the add in the element type's math type (float for float32/16/bf16,
// double for float64), rounded once — the same operation the CUDA kernel does,
// so the two agree bit for bit. Backward: positions are stably sorted by token
// id (std::stable_sort, so each token's rows are in ascending position order),
// each token's rows are summed in double, and the sum is added to dwte with a
// single rounding; dwpe sums over the batch in double. Deterministic.
// The vocabulary-shard functions run the same code over table rows
// [vocab_start, vocab_start + vocab_size): other ids give zero rows in the
// forward and are skipped by the backward.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/common/dispatch.h"
#include "kernels/common/round_once.h"
#include "kernels/embedding/embedding.h"
#include "kernels/embedding/embedding_layout.h"

namespace colossal::kernels::embedding {
namespace {

// Adds a double sum to a stored gradient element with one rounding.
template <typename G>
void accumulate(G* p, double sum) {
  *p = round_once<G>(static_cast<double>(to_math(*p)) + sum);
}

template <typename F>
KernelStatus dispatch_cpu_types(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(float{});
    case DType::kF16: return f(Half{});
    case DType::kBF16: return f(BFloat16{});
    case DType::kF64: return f(double{});
    default:
      return KernelStatus::unsupported("embedding: dtype must be float32, float16, bfloat16 or float64");
  }
}

KernelStatus check_sizes(int64_t batch, int64_t seq_len, int64_t channels, int64_t vocab_size,
                         int64_t max_seq_len, int64_t vocab_start) {
  if (batch < 0 || seq_len < 0 || channels < 0 || vocab_size < 0 || max_seq_len < 0 ||
      vocab_start < 0) {
    return KernelStatus::invalid_argument("embedding: negative size");
  }
  if (seq_len > max_seq_len) return KernelStatus::invalid_argument("embedding: seq_len > max_seq_len");
  return KernelStatus();
}

// Ids must lie in [0, limit): vocab_size for the whole table, any
// non-negative id for a shard.
KernelStatus check_tokens(const int32_t* tokens, int64_t n, int64_t limit) {
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= limit) {
      return KernelStatus::invalid_argument(
          "embedding: token id negative, or outside [0, vocab_size) for the whole table");
    }
  }
  return KernelStatus();
}

// The rows this table holds: [start, start + size) of the vocabulary.
struct Rows {
  int64_t start = 0, size = 0;
  // The row of `token`, or -1 for another shard's id.
  int64_t of(int32_t token) const {
    const int64_t r = static_cast<int64_t>(token) - start;
    return r >= 0 && r < size ? r : -1;
  }
};

template <typename T>
void forward_typed(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t batch,
                   int64_t seq_len, int64_t channels, Rows rows) {
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq_len; ++t) {
      const int64_t p = b * seq_len + t;
      const int64_t row = rows.of(tokens[p]);
      T* o = out + p * channels;
      if (row < 0) {  // another shard's id (the whole table checked every id first)
        for (int64_t c = 0; c < channels; ++c) o[c] = from_math<T>(0);
        continue;
      }
      const T* e = wte + row * channels;
      if (wpe == nullptr) {  // token rows only: a copy (to_math/from_math round-trips exactly)
        for (int64_t c = 0; c < channels; ++c) o[c] = e[c];
        continue;
      }
      const T* q = wpe + t * channels;
      for (int64_t c = 0; c < channels; ++c) o[c] = from_math<T>(to_math(e[c]) + to_math(q[c]));
    }
  }
}

template <typename T, typename G>
void backward_typed(G* dwte, G* dwpe, const T* dout, const int32_t* tokens, int64_t batch,
                    int64_t seq_len, int64_t channels, Rows rows) {
  int64_t n = batch * seq_len;
  std::vector<double> acc(static_cast<size_t>(channels));
  // dwpe[t] += sum over b, b ascending (no position table: nothing to do).
  for (int64_t t = 0; dwpe != nullptr && t < seq_len; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t b = 0; b < batch; ++b) {
      const T* row = dout + (b * seq_len + t) * channels;
      for (int64_t c = 0; c < channels; ++c) acc[c] += static_cast<double>(to_math(row[c]));
    }
    for (int64_t c = 0; c < channels; ++c) accumulate(dwpe + t * channels + c, acc[c]);
  }
  // dwte: the positions of this table's ids, grouped by token, ascending within a token.
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) {
    if (rows.of(tokens[p]) >= 0) order.push_back(p);
  }
  n = static_cast<int64_t>(order.size());
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return tokens[a] < tokens[b]; });
  for (int64_t i = 0; i < n;) {
    const int32_t token = tokens[order[i]];
    std::fill(acc.begin(), acc.end(), 0.0);
    for (; i < n && tokens[order[i]] == token; ++i) {
      const T* row = dout + order[i] * channels;
      for (int64_t c = 0; c < channels; ++c) acc[c] += static_cast<double>(to_math(row[c]));
    }
    G* grad = dwte + rows.of(token) * channels;
    for (int64_t c = 0; c < channels; ++c) accumulate(grad + c, acc[c]);
  }
}

// The ids a shard accepts: any non-negative one (other shards' give zeros).
constexpr int64_t kAnyId = int64_t{1} << 32;

// The whole table is Rows{0, vocab_size} with ids below vocab_size; a shard
// its rows, any non-negative id, no position table, batch 1.
KernelStatus forward(void* out, const int32_t* tokens, const void* wte, const void* wpe,
                     int64_t batch, int64_t seq_len, int64_t channels, int64_t max_seq_len,
                     Rows rows, int64_t id_limit, DType dtype) {
  KernelStatus s = check_sizes(batch, seq_len, channels, rows.size, max_seq_len, rows.start);
  if (!s.ok()) return s;
  const int64_t n = batch * seq_len;
  if (n == 0 || channels == 0) return KernelStatus();
  if (out == nullptr || tokens == nullptr || wte == nullptr) {
    return KernelStatus::invalid_argument("embedding_forward_cpu: null buffer");
  }
  s = check_tokens(tokens, n, id_limit);
  if (!s.ok()) return s;
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_typed(static_cast<T*>(out), tokens, static_cast<const T*>(wte),
                  static_cast<const T*>(wpe), batch, seq_len, channels, rows);
    return KernelStatus();
  });
}

KernelStatus backward(void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                      int64_t batch, int64_t seq_len, int64_t channels, int64_t max_seq_len,
                      Rows rows, int64_t id_limit, DType dtype, DType grad_dtype) {
  KernelStatus s = check_sizes(batch, seq_len, channels, rows.size, max_seq_len, rows.start);
  if (!s.ok()) return s;
  if (grad_dtype != dtype && !(grad_dtype == DType::kF32 && dtype != DType::kF64)) {
    return KernelStatus::unsupported("embedding_backward_cpu: grad_dtype must be dtype or float32");
  }
  const int64_t n = batch * seq_len;
  if (n == 0 || channels == 0) return KernelStatus();
  if (dwte == nullptr || dout == nullptr || tokens == nullptr) {
    return KernelStatus::invalid_argument("embedding_backward_cpu: null buffer");
  }
  s = check_tokens(tokens, n, id_limit);
  if (!s.ok()) return s;
  return dispatch_cpu_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* dy = static_cast<const T*>(dout);
    if (grad_dtype == dtype) {
      backward_typed(static_cast<T*>(dwte), static_cast<T*>(dwpe), dy, tokens, batch, seq_len,
                     channels, rows);
    } else {
      backward_typed(static_cast<float*>(dwte), static_cast<float*>(dwpe), dy, tokens, batch,
                     seq_len, channels, rows);
    }
    return KernelStatus();
  });
}

}  // namespace

const char* grad_mode_name(GradMode mode) {
  switch (mode) {
    case GradMode::kDeterministic: return "deterministic";
    case GradMode::kAtomic: return "atomic";
  }
  return "unknown";
}

size_t embedding_backward_scratch_bytes(int64_t batch, int64_t seq_len, int64_t channels,
                                        GradMode mode) {
  if (mode != GradMode::kDeterministic || batch <= 0 || seq_len <= 0 || channels <= 0) return 0;
  return internal::deterministic_layout(batch * seq_len, channels).total;
}

size_t embedding_shard_backward_scratch_bytes(int64_t n, int64_t channels, GradMode mode) {
  return embedding_backward_scratch_bytes(1, n, channels, mode);
}

KernelStatus embedding_forward_cpu(void* out, const int32_t* tokens, const void* wte, const void* wpe,
                                   int64_t batch, int64_t seq_len, int64_t channels,
                                   int64_t vocab_size, int64_t max_seq_len, DType dtype) {
  return forward(out, tokens, wte, wpe, batch, seq_len, channels, max_seq_len,
                 Rows{0, vocab_size}, vocab_size, dtype);
}

KernelStatus embedding_backward_cpu(void* dwte, void* dwpe, const void* dout, const int32_t* tokens,
                                    int64_t batch, int64_t seq_len, int64_t channels,
                                    int64_t vocab_size, int64_t max_seq_len, DType dtype,
                                    DType grad_dtype) {
  return backward(dwte, dwpe, dout, tokens, batch, seq_len, channels, max_seq_len,
                  Rows{0, vocab_size}, vocab_size, dtype, grad_dtype);
}

KernelStatus embedding_shard_forward_cpu(void* out, const int32_t* tokens, const void* wte,
                                         int64_t n, int64_t channels, int64_t vocab_size,
                                         int64_t vocab_start, DType dtype) {
  return forward(out, tokens, wte, nullptr, 1, n, channels, n, Rows{vocab_start, vocab_size},
                 kAnyId, dtype);
}

KernelStatus embedding_shard_backward_cpu(void* dwte, const void* dout, const int32_t* tokens,
                                          int64_t n, int64_t channels, int64_t vocab_size,
                                          int64_t vocab_start, DType dtype, DType grad_dtype) {
  return backward(dwte, nullptr, dout, tokens, 1, n, channels, n, Rows{vocab_start, vocab_size},
                  kAnyId, dtype, grad_dtype);
}

}  // namespace colossal::kernels::embedding
