// colossal::parallel — how Gemini packs a model's parameters into chunks.
//
// Parameters are laid out in an order (table order, or the order a step
// first uses them) into chunks of one size, never split: a parameter that
// does not fit in the chunk being filled opens the next one. The size is the
// one, among the candidates, that wastes least (the unused tail of every
// chunk): candidates start at the largest parameter (or min_chunk_size_m
// MiElements, whichever is larger) and go up in steps of hidden_dim elements
// over search_range_m MiElements. Parameters far larger than the rest (more
// than mean + 3 standard deviations) get a chunk of their own, of their own
// size, so one embedding does not set the size of every chunk. A model
// smaller than min_chunk_size_m MiElements is one chunk, kept whole on every
// rank (Colossal-AI's search_chunk_configuration and its keep_gathered).
//
// Inside a chunk every parameter starts `align` elements aligned (16-byte
// vector loads) and every chunk size is a multiple of world * align, so each
// rank's shard (size / world elements) is aligned too.
//
//   ChunkSearchOptions o;  // Colossal-AI's defaults: 32 / 1024 / 32
//   o.world = 4;
//   ChunkLayout layout = *plan_chunks(table, table_order(table), o);
//   layout.chunks[c].params / offsets: where each parameter lies
#ifndef COLOSSAL_PARALLEL_GEMINI_CHUNK_LAYOUT_H_
#define COLOSSAL_PARALLEL_GEMINI_CHUNK_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "nn/module/parameter.h"

namespace colossal::parallel {

struct ChunkSearchOptions {
  // Candidate sizes scanned above the smallest, in MiElements (2^20).
  double search_range_m = 32.0;
  // Step between candidates, in elements (Colossal-AI: the model's hidden size, 1024 by default).
  int64_t hidden_dim = 1024;
  // Smallest chunk, in MiElements; a model smaller than this is one whole chunk.
  double min_chunk_size_m = 32.0;
  // Ranks a chunk is sharded over.
  int world = 1;
  // Element alignment of every parameter in its chunk (0: 16 bytes of the
  // table's largest dtype).
  int64_t align = 0;
};

struct ChunkSpec {
  int64_t numel = 0;              // capacity: a multiple of world * align
  int64_t used = 0;               // end of the last parameter
  std::vector<size_t> params;     // table indices, in layout order
  std::vector<int64_t> offsets;   // element offset of each in the chunk
  bool own = false;               // an outsized parameter's own chunk
  bool keep_whole = false;        // not sharded (a model below min_chunk_size_m)
};

struct ChunkLayout {
  int64_t chunk_size = 0;  // the common size (own chunks excepted)
  int64_t align = 1;
  std::vector<ChunkSpec> chunks;
  // Chunk and position of every parameter, by table index.
  std::vector<int> chunk_of;
  std::vector<int> slot_of;
  // Elements allocated and not used by any parameter.
  int64_t wasted() const;
  int64_t total() const;
};

// 0, 1, ..., table.size() - 1.
std::vector<size_t> table_order(const nn::ParameterTable& table);

// The layout of `order` (a permutation of the table's indices). Errors
// (InvalidArgument): `order` not a permutation, a table with several dtypes,
// options out of range (world < 1, negative sizes, hidden_dim < 1).
absl::StatusOr<ChunkLayout> plan_chunks(const nn::ParameterTable& table,
                                        const std::vector<size_t>& order,
                                        const ChunkSearchOptions& options);

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_GEMINI_CHUNK_LAYOUT_H_
