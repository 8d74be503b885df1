// colossal::parallel — how ZeRO cuts a flat buffer among the ranks of a
// data-parallel group: rank r owns the contiguous slice [r*S, min((r+1)*S, N))
// of the N elements, S = ceil(N / W) (the buffer is padded to W*S). Slices
// need not fall on parameter boundaries; a slice's pieces are its parts that
// lie in one parameter (each with that parameter's optimizer group).
#ifndef COLOSSAL_PARALLEL_ZERO_ZERO_SHARD_H_
#define COLOSSAL_PARALLEL_ZERO_ZERO_SHARD_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "nn/module/parameter.h"
#include "nn/optim/optimizer.h"

namespace colossal::parallel {

// Rank `rank`'s slice of a flat buffer of `numel` elements over `world` ranks.
struct ZeroShard {
  int64_t padded = 0;  // numel rounded up to a multiple of world
  int64_t size = 0;    // padded / world
  int64_t begin = 0;   // rank * size
  int64_t end = 0;     // min(begin + size, numel): elements past numel are padding
};
ZeroShard zero_shard(int64_t numel, int world, int rank);

// A piece of a slice lying in one parameter: flat offset, length, and the
// optimizer group that parameter belongs to.
struct ShardPiece {
  int64_t offset = 0;
  int64_t count = 0;
  int group = 0;
};
// The pieces of [shard.begin, shard.end) covered by `optimizer`'s parameters
// (table entries of `table`), ordered by offset. Errors: an optimizer
// parameter not in the table (InvalidArgument).
absl::StatusOr<std::vector<ShardPiece>> shard_pieces(const nn::ParameterTable& table,
                                                     const nn::Optimizer& optimizer,
                                                     const ZeroShard& shard);

}  // namespace colossal::parallel

#endif  // COLOSSAL_PARALLEL_ZERO_ZERO_SHARD_H_
