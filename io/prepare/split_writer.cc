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
                         TokenWidth width)
    : dir_(std::move(dir)),
      name_(std::move(name)),
      split_(std::move(split)),
      shard_tokens_(shard_tokens),
      width_(width) {}

absl::Status SplitWriter::Append(std::span<const int32_t> ids) {
  while (!ids.empty()) {
    if (!writer_) {
      const std::string file = ShardFileName(name_, split_, static_cast<int64_t>(shards_.size()));
      absl::StatusOr<TokenShardWriter> writer = TokenShardWriter::Create(absl::StrCat(dir_, "/", file), width_);
      if (!writer.ok()) return writer.status();
      writer_.emplace(*std::move(writer));
    }
    const size_t room = static_cast<size_t>(shard_tokens_ - writer_->num_tokens());
    const size_t n = std::min(room, ids.size());
    if (absl::Status s = writer_->Append(ids.first(n)); !s.ok()) return s;
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
  absl::Status s = writer_->Finish();
  writer_.reset();
  if (!s.ok()) return s;
  shards_.push_back({path.substr(path.rfind('/') + 1), split_, tokens});
  return absl::OkStatus();
}

absl::Status SplitWriter::Finish() {
  if (!writer_) return absl::OkStatus();
  return FinishShard();
}

}  // namespace colossal::io
