// Private to kernels/attention: the order in which the Hopper kernels visit
// their tiles, host-and-device so a CPU test checks it.
//
// Tiles are (head, block) pairs: `heads` heads (the kernel's: query heads, or
// kv heads for dK/dV; sequence-major), `blocks` blocks each, ranked 0 =
// heaviest. tile_slot(tau) numbers them so that
//   - consecutive tiles are consecutive heads at one rank (a kv head's query
//     heads, adjacent, share its K and V in L2 while they run together),
//   - ranks go heaviest first (a causal grid's long tiles start early and the
//     short ones fill the end), and
//   - heads are taken in sections of `section` heads (section_heads()):
//     every tile of a section before the next section's, so the CTAs running
//     at once reuse one section's operands (K/V, or Q/dO for dK/dV), which
//     fit in L2, rather than every head's (at short sequences the first wave
//     of a grid covers every head, and their K/V together exceed L2). The
//     kernels use sections under the full mask, where every tile reads its
//     head's whole K/V; causal grids measured faster in one section, except
//     dK/dV's where one kv head's query side alone exceeds the L2.
#ifndef COLOSSAL_KERNELS_ATTENTION_TILE_ORDER_H_
#define COLOSSAL_KERNELS_ATTENTION_TILE_ORDER_H_

#include <cstdint>

#include "kernels/common/host_device.h"

namespace colossal::kernels::attention::internal {

struct TileSlot {
  int head;
  int rank;
};

// Tile tau (0 <= tau < heads * blocks; 1 <= section <= heads): a bijection
// onto every (head, rank) pair.
COLOSSAL_HOST_DEVICE TileSlot tile_slot(int tau, int heads, int blocks, int section) {
  const int per_section = section * blocks;
  const int sec = tau / per_section;
  const int r = tau - sec * per_section;
  const int head0 = sec * section;
  const int width = heads - head0 < section ? heads - head0 : section;
  return {head0 + r % width, r / width};
}

// The persistent kernels' dealing: G CTAs take the tiles in rounds of G,
// CTA c tile r G + c in even rounds r and r G + G - 1 - c in odd ones (a
// snake), so with tiles ordered heaviest first the CTAs' total work differs
// by about a tile. Returns the tile of CTA c (0 <= c < G) in round r.
COLOSSAL_HOST_DEVICE int64_t snake_tile(int round, int cta, int ctas) {
  return static_cast<int64_t>(round) * ctas + ((round & 1) ? ctas - 1 - cta : cta);
}

// Heads per section: as many as keep `bytes_per_head` (a head's share of the
// reused operand) within half of `l2_bytes`, a multiple of `group` (query
// heads sharing a kv head), at least one group, at most `heads` (>= 1).
inline int section_heads(int64_t l2_bytes, int64_t bytes_per_head, int64_t heads,
                         int64_t group) {
  const int64_t fit = bytes_per_head > 0 ? (l2_bytes / 2) / bytes_per_head : heads;
  int64_t section = fit / group * group;
  if (section < group) section = group;
  if (section > heads) section = heads;
  return static_cast<int>(section);
}

}  // namespace colossal::kernels::attention::internal

#endif  // COLOSSAL_KERNELS_ATTENTION_TILE_ORDER_H_
