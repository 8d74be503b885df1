// CPU row reductions. Sums are pairwise over 1024-element blocks, each block
// summed with 8 interleaved partial sums (vectorisable, and an error growing
// with log2(cols / 1024) + 128 roundings rather than with cols); max is a
// plain scan (exact, order-free).
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/dispatch.h"
#include "kernels/reduction/reduction.h"
#include "kernels/reduction/reduction_plan.h"

namespace colossal::kernels::reduction {
namespace {

using internal::MaxOp;
using internal::SumOp;

constexpr int64_t kBlock = 1024;
constexpr int kLanes = 8;

// Accumulator type: double for double input, float otherwise.
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
Acc<T> sum_block(const T* p, int64_t n) {
  Acc<T> lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lane[k] += to_math(p[i + k]);
  }
  for (int k = 0; i < n; ++i, ++k) lane[k] += to_math(p[i]);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// Pairwise over whole blocks: the left half gets ceil(blocks / 2) blocks.
template <typename T>
Acc<T> sum_pairwise(const T* p, int64_t n) {
  if (n <= kBlock) return sum_block(p, n);
  const int64_t half = (n / kBlock + 1) / 2 * kBlock;
  return sum_pairwise(p, half) + sum_pairwise(p + half, n - half);
}

template <typename T>
Acc<T> max_scan(const T* p, int64_t n) {
  const MaxOp op;
  Acc<T> m = MaxOp::identity<Acc<T>>();
  for (int64_t i = 0; i < n; ++i) m = op(m, static_cast<Acc<T>>(to_math(p[i])));
  return m;
}

// Rounds the accumulator to the output type; NaN becomes the canonical NaN.
template <typename Out, typename A>
Out store(A v) {
  if (v != v) {
    if constexpr (std::is_same_v<Out, double>) {
      const uint64_t bits = 0x7fffffffffffffffull;
      double d;
      std::memcpy(&d, &bits, sizeof(d));
      return d;
    } else {
      const uint32_t bits = 0x7fffffffu;
      float f;
      std::memcpy(&f, &bits, sizeof(f));
      return from_math<Out>(f);  // float16/bfloat16 NaN is 0x7fff either way
    }
  }
  if constexpr (std::is_same_v<Out, double> || std::is_same_v<Out, float>) {
    return static_cast<Out>(v);
  } else {
    return from_math<Out>(static_cast<float>(v));
  }
}

template <typename Out, typename T>
void reduce_typed(Out* out, const T* in, int64_t rows, int64_t cols, RowReduceOp op) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = in + r * cols;
    const Acc<T> v = op == RowReduceOp::kMax
                         ? max_scan(row, cols)
                         : internal::finish(sum_pairwise(row, cols), cols, op == RowReduceOp::kMean);
    out[r] = store<Out>(v);
  }
}

template <typename F>
KernelStatus dispatch_input(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: return f(float{});
    case DType::kF16: return f(Half{});
    case DType::kBF16: return f(BFloat16{});
    case DType::kF64: return f(double{});
    default:
      return KernelStatus::unsupported(
          "reduce_rows: input must be float32, float16, bfloat16 or float64");
  }
}

}  // namespace

const char* row_reduce_op_name(RowReduceOp op) {
  switch (op) {
    case RowReduceOp::kSum: return "sum";
    case RowReduceOp::kMean: return "mean";
    case RowReduceOp::kMax: return "max";
  }
  return "unknown";
}

int64_t reduce_rows_scratch_bytes(int64_t rows, int64_t cols, DType in_dtype) {
  return internal::scratch_bytes(rows, cols, in_dtype);
}

KernelStatus reduce_rows_cpu(void* out, const void* in, int64_t rows, int64_t cols, DType out_dtype,
                             DType in_dtype, RowReduceOp op) {
  if (rows < 0 || cols < 0) return KernelStatus::invalid_argument("reduce_rows_cpu: negative size");
  if (op != RowReduceOp::kSum && op != RowReduceOp::kMean && op != RowReduceOp::kMax) {
    return KernelStatus::invalid_argument("reduce_rows_cpu: unknown RowReduceOp");
  }
  if (rows == 0) return KernelStatus();
  if (out == nullptr || (cols > 0 && in == nullptr)) {
    return KernelStatus::invalid_argument("reduce_rows_cpu: null buffer with rows * cols > 0");
  }
  if (cols == 0 && op == RowReduceOp::kMax) {
    return KernelStatus::invalid_argument("reduce_rows_cpu: max of an empty row");
  }
  return dispatch_input(in_dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in);
    if (out_dtype == DType::kF32) {
      reduce_typed(static_cast<float*>(out), x, rows, cols, op);
    } else if (out_dtype == in_dtype) {
      reduce_typed(static_cast<T*>(out), x, rows, cols, op);
    } else {
      return KernelStatus::unsupported("reduce_rows_cpu: out_dtype must be float32 or in_dtype");
    }
    return KernelStatus();
  });
}

}  // namespace colossal::kernels::reduction
