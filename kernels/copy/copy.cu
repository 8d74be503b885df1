// One thread per word of the copy, a grid-stride loop over height x words:
// consecutive threads take consecutive words of a row (coalesced), and a row
// narrower than a warp still keeps every thread busy (no thread per row).
#include <algorithm>
#include <cstdint>

#include "kernels/common/cuda_utils.cuh"
#include "kernels/copy/copy.h"

namespace colossal::kernels::copy {
namespace {

constexpr int kThreads = 256;

template <typename Word>
__global__ void copy_2d_kernel(char* __restrict__ dst, size_t dst_pitch,
                               const char* __restrict__ src, size_t src_pitch,
                               int64_t words_per_row, int64_t total) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t r = i / words_per_row, c = i - r * words_per_row;
    reinterpret_cast<Word*>(dst + r * dst_pitch)[c] =
        reinterpret_cast<const Word*>(src + r * src_pitch)[c];
  }
}

template <typename Word>
KernelStatus launch(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                    size_t height, cudaStream_t stream) {
  const int64_t words = static_cast<int64_t>(width / sizeof(Word));
  const int64_t total = words * static_cast<int64_t>(height);
  // Enough blocks to fill the GPU several times over; the loop covers the rest.
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 132 * 32);
  copy_2d_kernel<Word><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<char*>(dst), dst_pitch, static_cast<const char*>(src), src_pitch, words, total);
  return cuda::last_launch_status();
}

}  // namespace

KernelStatus copy_2d_cuda(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                          size_t width, size_t height, cudaStream_t stream) {
  if (width == 0 || height == 0) return KernelStatus();
  if (dst == nullptr || src == nullptr || dst_pitch < width || src_pitch < width) {
    return KernelStatus::invalid_argument("copy_2d_cuda: null buffer or a pitch below the width");
  }
  const uintptr_t all = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) |
                        dst_pitch | src_pitch | width;
  if (all % 16 == 0) return launch<uint4>(dst, dst_pitch, src, src_pitch, width, height, stream);
  if (all % 8 == 0) return launch<uint2>(dst, dst_pitch, src, src_pitch, width, height, stream);
  if (all % 4 == 0) return launch<uint32_t>(dst, dst_pitch, src, src_pitch, width, height, stream);
  if (all % 2 == 0) return launch<uint16_t>(dst, dst_pitch, src, src_pitch, width, height, stream);
  return launch<uint8_t>(dst, dst_pitch, src, src_pitch, width, height, stream);
}

}  // namespace colossal::kernels::copy
