// colossal::io — one split's tokens (train or val) into a run of llm.c shards.
//
// Tokens appended in order fill <dir>/<name>_<split>_000000.bin,
// ..._000001.bin, ... of exactly `shard_tokens` tokens each; Finish() closes
// the last, partial one. A shard is created only when a token needs it, so a
// split with no tokens writes no file. Each shard is written atomically
// (io/shards/token_shard.h).
//
//   colossal::io::SplitWriter train("out", "data", "train", 10'000'000);
//   absl::Status s = train.Append(ids);  // any number of calls
//   if (s.ok()) s = train.Finish();
//   // train.shards(): {"data_train_000000.bin", "train", 10000000}, ...
#ifndef COLOSSAL_IO_PREPARE_SPLIT_WRITER_H_
#define COLOSSAL_IO_PREPARE_SPLIT_WRITER_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "io/shards/loss_mask.h"
#include "io/shards/token_shard.h"

namespace colossal::io {

struct PreparedShard {
  std::string file;   // name within the output folder
  std::string split;  // "train" or "val"
  int64_t tokens = 0;
  std::string mask_file;  // its loss mask's name, or empty
  int64_t counted = 0;    // tokens its mask counts (with a mask)
};

// "<name>_<split>_<index, 6 digits>.bin", llm.c's naming.
std::string ShardFileName(std::string_view name, std::string_view split, int64_t index);

class SplitWriter {
 public:
  // Shards store ids with `width` (token_shard.h: uint16 is llm.c's GPT-2
  // header, uint32 its Llama 3 one).
  SplitWriter(std::string dir, std::string name, std::string split, int64_t shard_tokens,
              TokenWidth width = TokenWidth::kUint16, bool loss_masks = false);

  // Ids must fit the width (TokenShardWriter checks). With loss masks,
  // `counted` holds each id's flags (loss_mask.h: kCounted, kDocumentStart;
  // InvalidArgument otherwise); without, it is empty.
  absl::Status Append(std::span<const int32_t> ids, std::span<const uint8_t> counted = {});
  // Finishes the open shard, if any.
  absl::Status Finish();

  // Shards finished so far, in order.
  const std::vector<PreparedShard>& shards() const { return shards_; }
  int64_t tokens() const { return tokens_; }
  int64_t counted() const { return counted_; }

 private:
  absl::Status FinishShard();

  std::string dir_;
  std::string name_;
  std::string split_;
  int64_t shard_tokens_;
  TokenWidth width_;
  bool loss_masks_;
  std::optional<TokenShardWriter> writer_;
  std::optional<LossMaskWriter> mask_writer_;
  int64_t shard_counted_ = 0;
  std::vector<PreparedShard> shards_;
  int64_t tokens_ = 0;
  int64_t counted_ = 0;
};

}  // namespace colossal::io

#endif  // COLOSSAL_IO_PREPARE_SPLIT_WRITER_H_
