// colossal::kernels::elementwise — contiguous elementwise arithmetic, casts and fills.
//
// The leaf ops behind the Tensor runtime's (core/) elementwise ops: every
// function works on n contiguous elements and has a CPU implementation (the
// reference and the CPU backend) and a CUDA one that give the same bits.
//
//   binary   out = a + b, a - b or a * b              every dtype
//   scale    out = alpha * a                          floating dtypes
//   axpby    out = alpha * a + beta * b               floating dtypes
//   cast     out (out_dtype) = in (in_dtype)          every pair of dtypes
//   fill     out[i] = value                           every dtype
//
// Semantics, identical on CPU and CUDA (results are bit-for-bit equal, NaN
// included; tests check equality, not a tolerance):
//   * float16/bfloat16 compute in float32 and round to nearest even once;
//     float32 computes in float32, float64 in float64. alpha/beta are rounded
//     once to the math type (float for float32/16-bit types). axpby rounds the
//     two products and the sum separately (no fused multiply-add on either side).
//   * Any NaN result is the canonical quiet NaN (float32 0x7fffffff, float64
//     0x7fffffffffffffff, float16/bfloat16 0x7fff).
//   * Integers (int32, int64, uint8, uint16) wrap modulo 2^bits in add/sub/mul
//     (two's complement). scale and axpby reject integer dtypes (unsupported):
//     a real-valued alpha has no exact integer meaning.
//   * cast: same dtype is a bit copy. float -> float rounds to nearest even,
//     directly from the source (float64 -> float16 is not rounded twice via
//     float32); integer -> float rounds to nearest even; float -> integer
//     truncates toward zero and saturates at the type's limits, NaN -> 0
//     (e.g. 300.7 -> uint8 255, -1.9 -> int32 -1, -inf -> int64 min);
//     integer -> integer wraps modulo 2^bits like static_cast (int32 -1 ->
//     uint8 255). Float NaN becomes the canonical NaN of the output type.
//   * fill: value is converted once to the dtype with the cast rules above
//     (from float64), then stored to every element.
//   * Aliasing: out may equal a and/or b (in place); otherwise the buffers must
//     not overlap. For cast, out may equal in only when both dtypes have the
//     same size.
//   * Device pointers need only the element type's natural alignment; 16-byte
//     aligned buffers take the vectorised path.
// No function here has a gradient: backward of these ops is composed from them
// by core/ (e.g. d(a+b) = dout to each input).
//
//   using namespace colossal::kernels;
//   KernelStatus s = elementwise::binary_cpu(out, a, b, n, DType::kF32, elementwise::BinaryOp::kAdd);
//   s = elementwise::cast_cpu(out_bf16, in_f32, n, DType::kBF16, DType::kF32);
//   #if COLOSSAL_WITH_CUDA
//   s = elementwise::axpby_cuda(d_out, d_a, d_b, 0.9, 0.1, n, DType::kBF16, stream);
//   #endif
#ifndef COLOSSAL_KERNELS_ELEMENTWISE_ELEMENTWISE_H_
#define COLOSSAL_KERNELS_ELEMENTWISE_ELEMENTWISE_H_

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/status.h"

#if COLOSSAL_WITH_CUDA
typedef struct CUstream_st* cudaStream_t;
#endif

namespace colossal::kernels::elementwise {

enum class BinaryOp : int { kAdd, kSub, kMul };

// "add", "sub", "mul" (or "unknown").
const char* binary_op_name(BinaryOp op);

// ---- CPU (reference and CPU backend); every function accepts n == 0 with null pointers.

// out[i] = a[i] op b[i] for 0 <= i < n; out, a, b of `dtype` (any DType).
KernelStatus binary_cpu(void* out, const void* a, const void* b, int64_t n, DType dtype,
                        BinaryOp op);

// out[i] = alpha * a[i]; dtype float32, float16, bfloat16 or float64.
KernelStatus scale_cpu(void* out, const void* a, double alpha, int64_t n, DType dtype);

// out[i] = alpha * a[i] + beta * b[i]; dtype float32, float16, bfloat16 or float64.
KernelStatus axpby_cpu(void* out, const void* a, const void* b, double alpha, double beta,
                       int64_t n, DType dtype);

// out[i] (out_dtype) = in[i] (in_dtype) converted; any pair of DTypes.
KernelStatus cast_cpu(void* out, const void* in, int64_t n, DType out_dtype, DType in_dtype);

// out[i] = value converted to dtype (any DType) for 0 <= i < n.
KernelStatus fill_cpu(void* out, double value, int64_t n, DType dtype);

#if COLOSSAL_WITH_CUDA
// ---- CUDA: the same contracts on device pointers, every DType (float64
// included). Enqueued on `stream`, not synchronised; the status is the launch
// status (asynchronous faults surface at the next synchronisation).

KernelStatus binary_cuda(void* out, const void* a, const void* b, int64_t n, DType dtype,
                         BinaryOp op, cudaStream_t stream);

KernelStatus scale_cuda(void* out, const void* a, double alpha, int64_t n, DType dtype,
                        cudaStream_t stream);

KernelStatus axpby_cuda(void* out, const void* a, const void* b, double alpha, double beta,
                        int64_t n, DType dtype, cudaStream_t stream);

KernelStatus cast_cuda(void* out, const void* in, int64_t n, DType out_dtype, DType in_dtype,
                       cudaStream_t stream);

KernelStatus fill_cuda(void* out, double value, int64_t n, DType dtype, cudaStream_t stream);
#endif

}  // namespace colossal::kernels::elementwise

#endif  // COLOSSAL_KERNELS_ELEMENTWISE_ELEMENTWISE_H_
