// Private to kernels/attention: the layout of the fused-dQ backward's float32
// parts (attention_hopper_backward.cu), host-and-device so a CPU test checks
// that the kernel that writes them and the one that reads them agree.
//
// Every dK/dV step adds, from each consumer warpgroup, a 64-query x 64-column
// part of dQ into dq_accum, in the order its threads stage it in shared
// memory: float pair j of thread tid (its wgmma accumulator elements 2j and
// 2j + 1) at pair index j * 128 + tid (dq_part_staged), which keeps the
// 8-byte shared stores free of bank conflicts. In the accumulator layout that pair is row
// 16 (tid / 32) + (tid % 32) / 4 + 8 (j % 2), columns 8 (j / 2) + 2 (tid % 4)
// and + 1 (dq_part_cell). The convert kernel reads a row's pairs in column
// order (dq_part_pair): four consecutive column pairs are four consecutive
// pair indices, one whole 32-byte sector.
#ifndef COLOSSAL_KERNELS_ATTENTION_DQ_PARTS_H_
#define COLOSSAL_KERNELS_ATTENTION_DQ_PARTS_H_

#include "kernels/common/host_device.h"

namespace colossal::kernels::attention::internal {

constexpr int kDqPartRows = 64;                         // queries of a part
constexpr int kDqPartCols = 64;                         // head_dim columns of a part
constexpr int kDqPartPairs = kDqPartRows * kDqPartCols / 2;

struct DqPartCell {
  int row;  // 0 .. kDqPartRows - 1
  int col;  // the pair's first (even) column, 0 .. kDqPartCols - 2
};

// The pair index at which consumer thread `tid` (0 <= tid < 128) stages its
// float pair j (0 <= j < kDqPartPairs / 128): the staging order.
COLOSSAL_HOST_DEVICE int dq_part_staged(int j, int tid) { return j * 128 + tid; }

// Where pair index `pair` (0 <= pair < kDqPartPairs) of a part lies:
// dq_part_staged's thread and pair in the accumulator layout.
COLOSSAL_HOST_DEVICE DqPartCell dq_part_cell(int pair) {
  const int j = pair / 128, tid = pair % 128, lane = tid % 32;
  return {16 * (tid / 32) + lane / 4 + 8 * (j % 2), 8 * (j / 2) + 2 * (lane % 4)};
}

// The pair index holding row `row`'s columns 2l and 2l + 1 (0 <= l < 32):
// dq_part_cell's inverse.
COLOSSAL_HOST_DEVICE int dq_part_pair(int row, int l) {
  const int j = 2 * (l / 4) + (row % 16) / 8;
  const int tid = 32 * (row / 16) + 4 * (row % 8) + l % 4;
  return dq_part_staged(j, tid);
}

}  // namespace colossal::kernels::attention::internal

#endif  // COLOSSAL_KERNELS_ATTENTION_DQ_PARTS_H_
