// colossal::kernels::activation — GELU (tanh approximation), fused bias + GELU,
// and SwiGLU (Llama's MLP gate).
//
//   gelu(x) = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
//
// the approximation of GPT-2, llm.c and PyTorch's F.gelu(approximate="tanh").
// Both backends evaluate it as the identical x * sigmoid(2u), u = sqrt(2/pi) *
// (x + 0.044715 x^3), which avoids the cancellation in 1 + tanh(u) for large
// negative x. The fused form is the GPT-2 MLP's first activation:
//
//   bias_gelu:  out[r, c] = gelu(x[r, c] + bias[c])        x, out: [rows, cols] row-major
//
// SwiGLU, with silu(x) = x * sigmoid(x) (PyTorch's F.silu):
//
//   swiglu:  out[i] = silu(gate[i]) * up[i]
//   backward: dgate[i] = dout[i] * up[i] * silu'(gate[i]),  dup[i] = dout[i] * silu(gate[i])
//             silu'(x) = s (1 + x (1 - s)), s = sigmoid(x)
//
// Both backends take the sigmoid through e = exp(-|x|) <= 1 (sigmoid(|x|) =
// 1 / (1 + e), sigmoid(-|x|) = e / (1 + e)) and 1 - s as sigmoid(-x), so nothing
// overflows or cancels for large |x|.
//
// Gradient conventions (llm.c's, as everywhere in colossal):
//   * input gradients (dx) are OVERWRITTEN;
//   * parameter gradients (dbias) are ACCUMULATED: dbias[c] += sum_r dpre[r, c],
//     where dpre = dout * gelu'(x + bias) is the pre-activation gradient in the
//     compute precision (before dx is rounded). Zero dbias once per step.
//
// Aliasing: out may equal x (in place); dx may equal dout (in place). SwiGLU:
// out may equal gate or up; dgate may equal dout and dup may equal up (dgate and
// dup must be distinct). No other overlap between buffers is allowed.
//
// Precision:
//   * CPU (reference and CPU backend): float32, float16, bfloat16 and float64;
//     math and the dbias sum in double, each output rounded once.
//   * CUDA: float32, float16, bfloat16 in and out; math in float32 (exp through
//     the hardware ex2 unit, ~1e-6 relative), each output rounded once. SwiGLU
//     likewise (relative error below 1e-7 (|gate| + 10) before the rounding). dbias is
//     reduced over rows in two fixed-order stages through a float32 scratch
//     (bias_gelu_backward_scratch_bytes): no atomics, bit-identical run to run.
//
//   using namespace colossal::kernels;
//   KernelStatus s = activation::bias_gelu_forward_cpu(out, x, bias, rows, cols, DType::kF32);
//   s = activation::bias_gelu_backward_cpu(dx, dbias, dout, x, bias, rows, cols, DType::kF32);
//   s = activation::swiglu_forward_cpu(h, gate, up, rows * hidden, DType::kF32);
//   s = activation::swiglu_backward_cpu(dgate, dup, dh, gate, up, rows * hidden, DType::kF32);
//   #if COLOSSAL_WITH_CUDA
//   size_t bytes = activation::bias_gelu_backward_scratch_bytes(rows, cols);   // cudaMalloc it once
//   s = activation::bias_gelu_backward_cuda(d_dx, d_dbias, d_dout, d_x, d_bias, d_scratch, bytes,
//                                           rows, cols, DType::kBF16, stream);
//   #endif
#ifndef COLOSSAL_KERNELS_ACTIVATION_ACTIVATION_H_
#define COLOSSAL_KERNELS_ACTIVATION_ACTIVATION_H_

#include <cstddef>
#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

#if COLOSSAL_WITH_CUDA
typedef struct CUstream_st* cudaStream_t;
#endif

namespace colossal::kernels::activation {

// ---- CPU: reference and CPU backend. dtype: float32, float16, bfloat16, float64. ----

// out[i] = gelu(x[i]) for 0 <= i < n. out may equal x.
KernelStatus gelu_forward_cpu(void* out, const void* x, int64_t n, DType dtype);

// dx[i] = dout[i] * gelu'(x[i]) (overwritten). dx may equal dout.
KernelStatus gelu_backward_cpu(void* dx, const void* dout, const void* x, int64_t n, DType dtype);

// out[r, c] = gelu(x[r, c] + bias[c]); x, out [rows, cols], bias [cols]. out may equal x.
KernelStatus bias_gelu_forward_cpu(void* out, const void* x, const void* bias, int64_t rows,
                                   int64_t cols, DType dtype);

// With dpre[r, c] = dout[r, c] * gelu'(x[r, c] + bias[c]):
//   dx[r, c]  = dpre[r, c]              (overwritten; dx may equal dout)
//   dbias[c] += sum_r dpre[r, c]        (accumulated)
// dout, x, dx [rows, cols]; bias, dbias [cols]; all of `dtype`.
KernelStatus bias_gelu_backward_cpu(void* dx, void* dbias, const void* dout, const void* x,
                                    const void* bias, int64_t rows, int64_t cols, DType dtype);

// out[i] = silu(gate[i]) * up[i], 0 <= i < n. out may equal gate or up.
KernelStatus swiglu_forward_cpu(void* out, const void* gate, const void* up, int64_t n, DType dtype);

// dgate[i] = dout[i] * up[i] * silu'(gate[i]);  dup[i] = dout[i] * silu(gate[i])
// (both overwritten; dgate may equal dout, dup may equal up).
KernelStatus swiglu_backward_cpu(void* dgate, void* dup, const void* dout, const void* gate,
                                 const void* up, int64_t n, DType dtype);

// Bytes of float32 scratch bias_gelu_backward_cuda needs for [rows, cols]
// (a function of the shape only; 0 for empty or negative shapes). Host code,
// available in CPU-only builds too so callers can plan memory.
size_t bias_gelu_backward_scratch_bytes(int64_t rows, int64_t cols);

#if COLOSSAL_WITH_CUDA
// ---- CUDA: device pointers, dtype float32/float16/bfloat16; enqueued on `stream`,
// not synchronised. Returns the launch status (faults surface at the next sync).
// 16-byte vector loads are used when every pointer is 16-byte aligned (and, for
// the bias forms, cols is a multiple of 16 / element size); otherwise a scalar path.

KernelStatus gelu_forward_cuda(void* out, const void* x, int64_t n, DType dtype,
                               cudaStream_t stream);

KernelStatus gelu_backward_cuda(void* dx, const void* dout, const void* x, int64_t n, DType dtype,
                                cudaStream_t stream);

KernelStatus bias_gelu_forward_cuda(void* out, const void* x, const void* bias, int64_t rows,
                                    int64_t cols, DType dtype, cudaStream_t stream);

// As swiglu_forward_cpu / swiglu_backward_cpu.
KernelStatus swiglu_forward_cuda(void* out, const void* gate, const void* up, int64_t n, DType dtype,
                                 cudaStream_t stream);

KernelStatus swiglu_backward_cuda(void* dgate, void* dup, const void* dout, const void* gate,
                                  const void* up, int64_t n, DType dtype, cudaStream_t stream);

// As bias_gelu_backward_cpu. `scratch` is device memory of at least
// bias_gelu_backward_scratch_bytes(rows, cols) bytes, 16-byte aligned, owned
// by the caller and free for the duration of the call (no need to zero it).
KernelStatus bias_gelu_backward_cuda(void* dx, void* dbias, const void* dout, const void* x,
                                     const void* bias, void* scratch, size_t scratch_bytes,
                                     int64_t rows, int64_t cols, DType dtype, cudaStream_t stream);
#endif

}  // namespace colossal::kernels::activation

#endif  // COLOSSAL_KERNELS_ACTIVATION_ACTIVATION_H_
