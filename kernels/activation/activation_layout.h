// Constants shared by the CPU and CUDA implementations of kernels/activation:
// the GELU coefficients and the layout of bias_gelu_backward_cuda's scratch,
// so bias_gelu_backward_scratch_bytes (host code, always built) and the CUDA
// launcher can never disagree. Internal to kernels/activation.
#ifndef COLOSSAL_KERNELS_ACTIVATION_ACTIVATION_LAYOUT_H_
#define COLOSSAL_KERNELS_ACTIVATION_ACTIVATION_LAYOUT_H_

#include <cstddef>
#include <cstdint>

namespace colossal::kernels::activation::internal {

// sqrt(2 / pi) and the cubic coefficient of the tanh approximation.
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;
inline constexpr double kCubic = 0.044715;

// Stage 1 of the dbias reduction sums blocks of this many rows into one float32
// partial row of the scratch; stage 2 sums the partial rows in order.
inline constexpr int64_t kBiasGradRowsPerChunk = 64;

inline int64_t bias_grad_chunks(int64_t rows) {
  return (rows + kBiasGradRowsPerChunk - 1) / kBiasGradRowsPerChunk;
}

inline size_t bias_grad_scratch_bytes(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return 0;
  return static_cast<size_t>(bias_grad_chunks(rows)) * static_cast<size_t>(cols) * sizeof(float);
}

}  // namespace colossal::kernels::activation::internal

#endif  // COLOSSAL_KERNELS_ACTIVATION_ACTIVATION_LAYOUT_H_
