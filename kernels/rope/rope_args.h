// Argument checks and the head-to-buffer map shared by the CPU and CUDA
// implementations of kernels/rope, so both backends accept and reject the
// same calls. Internal to kernels/rope.
#ifndef COLOSSAL_KERNELS_ROPE_ROPE_ARGS_H_
#define COLOSSAL_KERNELS_ROPE_ROPE_ARGS_H_

#include <cstdint>

#include "kernels/common/status.h"

namespace colossal::kernels::rope::internal {

// The sizes of one rope_pack call. Head h of a row, 0 <= h < packed_heads():
// q head h for h < q_heads, then k head h - q_heads, then v head h - q_heads - kv_heads;
// the first rotated_heads() are rotated, the v heads copied.
struct Shape {
  int64_t batch, seq, q_heads, kv_heads, head_dim;
  const int32_t* positions;  // row r's position, or null: r % seq
  int64_t rows() const { return batch * seq; }
  int64_t rotated_heads() const { return q_heads + kv_heads; }
  int64_t packed_heads() const { return q_heads + 2 * kv_heads; }
};

// `packed` and `a`, `b`, `c` are the four buffers of the call (qkv and q, k, v;
// or dqkv and dq, dk, dv). Sizes are checked before pointers.
inline KernelStatus check_pack_args(const Shape& s, const void* packed, const void* a,
                                    const void* b, const void* c, const float* inv_freq) {
  if (s.batch <= 0 || s.seq <= 0 || s.q_heads <= 0 || s.kv_heads <= 0 || s.head_dim <= 0) {
    return KernelStatus::invalid_argument("rope_pack: batch, seq, q_heads, kv_heads and head_dim must be > 0");
  }
  if (s.head_dim % 2 != 0) return KernelStatus::invalid_argument("rope_pack: head_dim must be even");
  if (packed == nullptr || a == nullptr || b == nullptr || c == nullptr || inv_freq == nullptr) {
    return KernelStatus::invalid_argument("rope_pack: null buffer");
  }
  return KernelStatus();
}

}  // namespace colossal::kernels::rope::internal

#endif  // COLOSSAL_KERNELS_ROPE_ROPE_ARGS_H_
