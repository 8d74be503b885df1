#include "io/prepare/split_writer.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "io/common/absl_view.h"

namespace colossal::io {

std::string ShardFileName(std::string_view name, std::string_view split, int64_t index) {
  char number[32];
  std::snprintf(number, sizeof(number), "%06lld", static_cast<long long>(index));
  return absl::StrCat(ToAbsl(name), "_", ToAbsl(split), "_", number, ".bin");
}

SplitWriter::SplitWriter(std::string dir, std::string name, std::string split, int64_t shard_tokens,
                         TokenWidth width, bool loss_masks)
    : dir_(std::move(dir)),
      name_(std::move(name)),
      split_(std::move(split)),
      shard_tokens_(shard_tokens),
      width_(width),
      loss_masks_(loss_masks) {}

absl::Status SplitWriter::Append(std::span<const int32_t> ids, std::span<const uint8_t> counted) {
  if (counted.size() != (loss_masks_ ? ids.size() : 0)) {
    return absl::InvalidArgumentError(absl::StrCat("split writer: ", counted.size(), " mask values for ", ids.size(),
                                                   " ids", loss_masks_ ? "" : " (this split has no loss masks)"));
  }
  while (!ids.empty()) {
    if (!writer_) {
      const std::string path =
          absl::StrCat(dir_, "/", ShardFileName(name_, split_, static_cast<int64_t>(shards_.size())));
      absl::StatusOr<TokenShardWriter> writer = TokenShardWriter::Create(path, width_);
      if (!writer.ok()) return writer.status();
      writer_.emplace(*std::move(writer));
      if (loss_masks_) {
        absl::StatusOr<LossMaskWriter> mask = LossMaskWriter::Create(LossMaskPathFor(path));
        if (!mask.ok()) return mask.status();
        mask_writer_.emplace(*std::move(mask));
        shard_counted_ = 0;
      }
    }
    const size_t room = static_cast<size_t>(shard_tokens_ - writer_->num_tokens());
    const size_t n = std::min(room, ids.size());
    if (absl::Status s = writer_->Append(ids.first(n)); !s.ok()) return s;
    if (loss_masks_) {
      if (absl::Status s = mask_writer_->Append(counted.first(n)); !s.ok()) return s;
      const int64_t c = std::count_if(counted.begin(), counted.begin() + static_cast<ptrdiff_t>(n),
                                      [](uint8_t f) { return (f & kCounted) != 0; });
      shard_counted_ += c;
      counted_ += c;
      counted = counted.subspan(n);
    }
    tokens_ += static_cast<int64_t>(n);
    ids = ids.subspan(n);
    if (writer_->num_tokens() == shard_tokens_) {
      if (absl::Status s = FinishShard(); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status SplitWriter::FinishShard() {
  const std::string path = writer_->path();
  const int64_t tokens = writer_->num_tokens();
  // The mask first: a shard never appears without the mask it needs (a mask
  // without its shard is ignored, and removed by the next prepare).
  std::string mask_file;
  if (mask_writer_) {
    absl::Status s = mask_writer_->Finish();
    mask_file = mask_writer_->path().substr(mask_writer_->path().rfind('/') + 1);
    mask_writer_.reset();
    if (!s.ok()) {
      writer_.reset();
      return s;
    }
  }
  absl::Status s = writer_->Finish();
  writer_.reset();
  if (!s.ok()) return s;
  shards_.push_back({path.substr(path.rfind('/') + 1), split_, tokens, mask_file, mask_file.empty() ? 0 : shard_counted_});
  return absl::OkStatus();
}

absl::Status SplitWriter::Finish() {
  if (!writer_) return absl::OkStatus();
  return FinishShard();
}

}  // namespace colossal::io
