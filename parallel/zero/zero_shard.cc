#include "parallel/zero/zero_shard.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace colossal::parallel {

ZeroShard zero_shard(int64_t numel, int world, int rank) {
  ZeroShard s;
  s.padded = (numel + world - 1) / world * world;
  s.size = s.padded / world;
  s.begin = std::min<int64_t>(static_cast<int64_t>(rank) * s.size, numel);
  s.end = std::min<int64_t>(static_cast<int64_t>(rank) * s.size + s.size, numel);
  return s;
}

absl::StatusOr<std::vector<ShardPiece>> shard_pieces(const nn::ParameterTable& table,
                                                     const nn::Optimizer& optimizer,
                                                     const ZeroShard& shard) {
  std::vector<ShardPiece> out;
  for (int g = 0; g < optimizer.num_groups(); ++g) {
    for (const nn::ParamRef& p : optimizer.group_params(g)) {
      const nn::ParameterEntry* e = table.find(p.name);
      if (e == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "low_level_zero: optimizer parameter \"", p.name, "\" is not in the model's table"));
      }
      const int64_t lo = std::max(e->offset, shard.begin);
      const int64_t hi = std::min(e->offset + e->numel(), shard.end);
      if (lo < hi) out.push_back(ShardPiece{lo, hi - lo, g});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ShardPiece& a, const ShardPiece& b) { return a.offset < b.offset; });
  return out;
}

}  // namespace colossal::parallel
