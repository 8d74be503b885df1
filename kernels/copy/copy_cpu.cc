#include <cstring>

#include "kernels/copy/copy.h"

namespace colossal::kernels::copy {

KernelStatus copy_2d_cpu(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                         size_t width, size_t height) {
  if (width == 0 || height == 0) return KernelStatus();
  if (dst == nullptr || src == nullptr || dst_pitch < width || src_pitch < width) {
    return KernelStatus::invalid_argument("copy_2d_cpu: null buffer or a pitch below the width");
  }
  for (size_t r = 0; r < height; ++r) {
    std::memcpy(static_cast<char*>(dst) + r * dst_pitch,
                static_cast<const char*>(src) + r * src_pitch, width);
  }
  return KernelStatus();
}

}  // namespace colossal::kernels::copy
