#include "kernels/attention/dq_parts.h"

#include <gtest/gtest.h>

#include <vector>

namespace colossal::kernels::attention::internal {
namespace {

// Every cell of the 64 x 64 part is one pair exactly once, and dq_part_pair
// finds it again.
TEST(DqPartsTest, CellsAreABijectionAndPairInvertsThem) {
  std::vector<int> seen(kDqPartPairs, 0);
  for (int pair = 0; pair < kDqPartPairs; ++pair) {
    const DqPartCell c = dq_part_cell(pair);
    ASSERT_GE(c.row, 0);
    ASSERT_LT(c.row, kDqPartRows);
    ASSERT_GE(c.col, 0);
    ASSERT_LT(c.col, kDqPartCols);
    ASSERT_EQ(c.col % 2, 0) << "pair " << pair;
    ++seen[c.row * (kDqPartCols / 2) + c.col / 2];
    EXPECT_EQ(dq_part_pair(c.row, c.col / 2), pair) << "row " << c.row << " col " << c.col;
  }
  for (int cell = 0; cell < kDqPartPairs; ++cell) EXPECT_EQ(seen[cell], 1) << "cell " << cell;
}

// The staging order: thread tid's float pair j is its accumulator's elements
// 2j, 2j + 1 -- row 16 warp + lane / 4 (+ 8 for the second row half), column
// 8 c + 2 (lane % 4) for column block c = j / 2.
TEST(DqPartsTest, PairsFollowTheAccumulatorLayout) {
  for (int tid = 0; tid < 128; ++tid) {
    for (int j = 0; j < 16; ++j) {
      const DqPartCell c = dq_part_cell(dq_part_staged(j, tid));
      EXPECT_EQ(c.row, 16 * (tid / 32) + (tid % 32) / 4 + 8 * (j % 2)) << tid << " " << j;
      EXPECT_EQ(c.col, 8 * (j / 2) + 2 * (tid % 4)) << tid << " " << j;
    }
  }
}

// A row's 32 column pairs, in column order, are 8 runs of 4 consecutive pair
// indices (8-byte pairs: whole 32-byte sectors) that start on a multiple of 4.
TEST(DqPartsTest, ARowReadsWholeSectors) {
  for (int row = 0; row < kDqPartRows; ++row) {
    for (int l = 0; l < 32; l += 4) {
      const int first = dq_part_pair(row, l);
      EXPECT_EQ(first % 4, 0) << "row " << row << " l " << l;
      for (int k = 1; k < 4; ++k) EXPECT_EQ(dq_part_pair(row, l + k), first + k);
    }
  }
}

}  // namespace
}  // namespace colossal::kernels::attention::internal
