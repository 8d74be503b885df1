// The layout of embedding_backward_cuda's deterministic-mode scratch, shared by
// embedding_backward_scratch_bytes (host code, always built) and the CUDA
// launcher so the two never disagree. Internal to kernels/embedding.
#ifndef COLOSSAL_KERNELS_EMBEDDING_EMBEDDING_LAYOUT_H_
#define COLOSSAL_KERNELS_EMBEDDING_EMBEDDING_LAYOUT_H_

#include <cstddef>
#include <cstdint>

namespace colossal::kernels::embedding::internal {

// Sorted rows per dwte tile: a token whose rows stay inside one tile is summed
// and written there; longer runs leave one partial row per tile for the fix-up.
inline constexpr int64_t kTileRows = 32;

// Sections start at multiples of this many bytes.
inline constexpr size_t kSectionAlign = 256;

inline size_t align_up(size_t n) { return (n + kSectionAlign - 1) / kSectionAlign * kSectionAlign; }

inline int64_t next_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

//   [keys: padded uint64][head partials: tiles x channels float][tail partials: same]
struct DeterministicLayout {
  int64_t positions = 0;  // batch * seq_len
  int64_t padded = 0;     // keys sorted: next power of two >= positions
  int64_t tiles = 0;      // ceil(positions / kTileRows)
  size_t head_offset = 0;
  size_t tail_offset = 0;
  size_t total = 0;
};

inline DeterministicLayout deterministic_layout(int64_t positions, int64_t channels) {
  DeterministicLayout l;
  if (positions <= 0 || channels <= 0) return l;
  l.positions = positions;
  l.padded = next_pow2(positions);
  l.tiles = (positions + kTileRows - 1) / kTileRows;
  const size_t partial = align_up(static_cast<size_t>(l.tiles) * static_cast<size_t>(channels) * sizeof(float));
  l.head_offset = align_up(static_cast<size_t>(l.padded) * sizeof(uint64_t));
  l.tail_offset = l.head_offset + partial;
  l.total = l.tail_offset + partial;
  return l;
}

}  // namespace colossal::kernels::embedding::internal

#endif  // COLOSSAL_KERNELS_EMBEDDING_EMBEDDING_LAYOUT_H_
