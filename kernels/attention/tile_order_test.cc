#include "kernels/attention/tile_order.h"

#include <gtest/gtest.h>

#include <vector>

namespace colossal::kernels::attention::internal {
namespace {

// Every (head, rank) pair exactly once; inside a section, ranks in order
// (heaviest first) with the section's heads consecutive at each rank; every
// tile of a section before any of the next one's.
TEST(TileOrderTest, SlotsCoverEveryTileBySectionThenRankThenHead) {
  struct Case {
    int heads, blocks, section;
  };
  const Case cases[] = {{1, 1, 1},  {7, 3, 7}, {7, 3, 2}, {7, 3, 3}, {32, 16, 8},
                        {12, 5, 5}, {5, 1, 2}, {1, 9, 1}, {6, 4, 4}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "heads " << c.heads << " blocks " << c.blocks
                                      << " section " << c.section);
    std::vector<int> seen(c.heads * c.blocks, 0);
    TileSlot prev{-1, -1};
    for (int tau = 0; tau < c.heads * c.blocks; ++tau) {
      const TileSlot s = tile_slot(tau, c.heads, c.blocks, c.section);
      ASSERT_GE(s.head, 0);
      ASSERT_LT(s.head, c.heads);
      ASSERT_GE(s.rank, 0);
      ASSERT_LT(s.rank, c.blocks);
      ++seen[s.head * c.blocks + s.rank];
      if (tau > 0) {
        const int sec = s.head / c.section, prev_sec = prev.head / c.section;
        ASSERT_GE(sec, prev_sec) << "tau " << tau;
        if (sec == prev_sec) {
          // The same rank, the next head; or the next rank, from the section's first head.
          const bool next_head = s.rank == prev.rank && s.head == prev.head + 1;
          const bool next_rank = s.rank == prev.rank + 1 && s.head == sec * c.section;
          EXPECT_TRUE(next_head || next_rank) << "tau " << tau;
        } else {
          EXPECT_EQ(s.rank, 0) << "tau " << tau;
          EXPECT_EQ(s.head, sec * c.section) << "tau " << tau;
        }
      }
      prev = s;
    }
    for (int n : seen) EXPECT_EQ(n, 1);
  }
}

// Every tile dealt exactly once over the rounds; each round's G tiles are
// that round's, and a CTA's share alternates ends of its rounds.
TEST(TileOrderTest, SnakeDealsEveryTileOnceARound) {
  for (int ctas : {1, 2, 7, 132}) {
    const int tiles = 5 * ctas + 3;
    std::vector<int> seen(tiles, 0);
    for (int c = 0; c < ctas; ++c) {
      for (int r = 0;; ++r) {
        const int64_t tau = snake_tile(r, c, ctas);
        if (tau >= tiles) break;
        ASSERT_GE(tau, static_cast<int64_t>(r) * ctas);
        ASSERT_LT(tau, static_cast<int64_t>(r + 1) * ctas);
        ++seen[tau];
      }
    }
    for (int n : seen) EXPECT_EQ(n, 1) << "ctas " << ctas;
  }
  // CTA 0 takes the first tile of even rounds and the last of odd ones.
  EXPECT_EQ(snake_tile(0, 0, 4), 0);
  EXPECT_EQ(snake_tile(1, 0, 4), 7);
  EXPECT_EQ(snake_tile(2, 0, 4), 8);
  EXPECT_EQ(snake_tile(1, 3, 4), 4);
}

TEST(TileOrderTest, SectionsHoldHalfTheL2InWholeGroups) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  // 50 MiB of L2, 2 MiB a head: 12 heads fit in 25 MiB, 12 in groups of 4, 10 in groups of 5.
  EXPECT_EQ(section_heads(50 * kMiB, 2 * kMiB, 32, 1), 12);
  EXPECT_EQ(section_heads(50 * kMiB, 2 * kMiB, 32, 4), 12);
  EXPECT_EQ(section_heads(50 * kMiB, 2 * kMiB, 32, 5), 10);
  // At least one group, even when one head alone exceeds the budget.
  EXPECT_EQ(section_heads(50 * kMiB, 64 * kMiB, 32, 4), 4);
  EXPECT_EQ(section_heads(0, 2 * kMiB, 32, 1), 1);
  // At most every head.
  EXPECT_EQ(section_heads(50 * kMiB, 1024, 96, 8), 96);
  EXPECT_EQ(section_heads(50 * kMiB, 0, 7, 7), 7);
}

}  // namespace
}  // namespace colossal::kernels::attention::internal
