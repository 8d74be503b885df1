// colossal::kernels::copy — strided 2-D copies: `height` rows of `width`
// bytes from `src` (rows `src_pitch` bytes apart) to `dst` (rows `dst_pitch`
// apart), cudaMemcpy2DAsync's contract, as a kernel. Device-to-device
// cudaMemcpy2DAsync moves rows of a few KB far below memory bandwidth
// (docs/benchmarks.md, session 11), and splitting or merging attention heads
// (sequence parallelism's head exchange, head-major layouts) is made of
// such rows.
//
// Contracts (CPU and CUDA alike): pitches >= width; dst rows must not overlap
// src rows; bytes between rows (the pitch gaps) are not touched. width or
// height 0 is a no-op (null pointers allowed then). Rows move as the widest
// of 16-, 8-, 4-, 2- or 1-byte words that divides both pointers, both pitches
// and the width.
//
//   using namespace colossal::kernels;
//   KernelStatus s = copy::copy_2d_cpu(dst, 4096, src, 8192, 2048, rows);
//   s = copy::copy_2d_cuda(d_dst, 4096, d_src, 8192, 2048, rows, stream);
#ifndef COLOSSAL_KERNELS_COPY_COPY_H_
#define COLOSSAL_KERNELS_COPY_COPY_H_

#include <cstddef>

#include "kernels/common/status.h"

#if COLOSSAL_WITH_CUDA
typedef struct CUstream_st* cudaStream_t;
#endif

namespace colossal::kernels::copy {

KernelStatus copy_2d_cpu(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                         size_t width, size_t height);

#if COLOSSAL_WITH_CUDA
// Device pointers; enqueued on `stream`, not synchronised (the status is the
// launch's).
KernelStatus copy_2d_cuda(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                          size_t width, size_t height, cudaStream_t stream);
#endif

}  // namespace colossal::kernels::copy

#endif  // COLOSSAL_KERNELS_COPY_COPY_H_
