#include "io/shards/loss_mask.h"

#include <bit>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "io/common/absl_view.h"
#include "io/shards/token_shard.h"

namespace colossal::io {

static_assert(std::endian::native == std::endian::little, "loss masks need a little-endian host");

namespace {

constexpr size_t kWriterBufferBytes = 1 << 20;

}  // namespace

std::string LossMaskPathFor(std::string_view shard_path) {
  const absl::string_view p = ToAbsl(shard_path);
  if (absl::EndsWith(p, ".bin")) return absl::StrCat(p.substr(0, p.size() - 4), ".mask");
  return absl::StrCat(p, ".mask");
}

absl::StatusOr<LossMask> LossMask::Open(const std::string& path) {
  absl::StatusOr<MappedFile> file = MappedFile::Open(path, "loss mask");
  if (!file.ok()) return file.status();
  if (file->size() < kTokenShardHeaderBytes) {
    return absl::DataLossError(absl::StrCat("loss mask '", path, "' has ", file->size(), " bytes, fewer than its ",
                                            kTokenShardHeaderBytes, "-byte header (truncated or not a mask)"));
  }
  int32_t header[3];
  std::memcpy(header, file->data(), sizeof(header));
  if (header[0] != kLossMaskMagic || header[1] != kLossMaskVersion) {
    return absl::InvalidArgumentError(absl::StrCat("loss mask '", path, "': magic ", header[0], " version ", header[1],
                                                   ", expected ", kLossMaskMagic, " version ", kLossMaskVersion,
                                                   " (not a colossal loss mask)"));
  }
  const int64_t count = header[2];
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("loss mask '", path, "': negative token count ", count));
  }
  const uint64_t payload = file->size() - kTokenShardHeaderBytes;
  if (payload != static_cast<uint64_t>(count)) {
    return absl::DataLossError(absl::StrCat("loss mask '", path, "': the header says ", count,
                                            " tokens but the file has ", payload, " bytes after it",
                                            payload < static_cast<uint64_t>(count) ? " (truncated)" : ""));
  }
  const uint8_t* values = reinterpret_cast<const uint8_t*>(file->data() + kTokenShardHeaderBytes);
  for (int64_t i = 0; i < count; ++i) {
    if ((values[i] & ~kLossMaskFlags) != 0) {
      return absl::DataLossError(absl::StrCat("loss mask '", path, "': value ", static_cast<int>(values[i]), " at token ", i,
                                              " (flags: 1 counted, 2 document start)"));
    }
  }
  return LossMask(path, *std::move(file), count);
}

LossMask::LossMask(std::string path, MappedFile file, int64_t num_tokens)
    : path_(std::move(path)),
      file_(std::move(file)),
      values_(reinterpret_cast<const uint8_t*>(file_.data() + kTokenShardHeaderBytes)),
      num_tokens_(num_tokens) {}

LossMask::LossMask(LossMask&& other) noexcept
    : path_(std::move(other.path_)),
      file_(std::move(other.file_)),
      values_(std::exchange(other.values_, nullptr)),
      num_tokens_(std::exchange(other.num_tokens_, 0)) {}

LossMask& LossMask::operator=(LossMask&& other) noexcept {
  if (this != &other) {
    path_ = std::move(other.path_);
    file_ = std::move(other.file_);
    values_ = std::exchange(other.values_, nullptr);
    num_tokens_ = std::exchange(other.num_tokens_, 0);
  }
  return *this;
}

absl::StatusOr<LossMaskWriter> LossMaskWriter::Create(const std::string& path) {
  absl::StatusOr<AtomicFileWriter> file = AtomicFileWriter::Create(path);
  if (!file.ok()) return absl::Status(file.status().code(), absl::StrCat("loss mask: ", file.status().message()));
  LossMaskWriter writer(*std::move(file));
  const int32_t zeros[kTokenShardHeaderInts] = {};  // Finish() writes the real header
  if (absl::Status s = writer.file_.Write(zeros, sizeof(zeros)); !s.ok()) return s;
  writer.buffer_.reserve(kWriterBufferBytes);
  return writer;
}

absl::Status LossMaskWriter::Append(std::span<const uint8_t> values) {
  if (!error_.ok()) return error_;
  if (finished_) return absl::FailedPreconditionError(absl::StrCat("loss mask '", path(), "' is already finished"));
  for (size_t i = 0; i < values.size(); ++i) {
    if ((values[i] & ~kLossMaskFlags) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("loss mask '", path(), "': value ", static_cast<int>(values[i]), " at index ", i, " (flags: 1 counted, 2 document start)"));
    }
  }
  if (num_tokens_ + static_cast<int64_t>(values.size()) > kTokenShardMaxTokens) {
    return absl::OutOfRangeError(absl::StrCat("loss mask '", path(), "' would exceed ", kTokenShardMaxTokens,
                                              " tokens, the most its int32 header can count"));
  }
  buffer_.insert(buffer_.end(), values.begin(), values.end());
  num_tokens_ += static_cast<int64_t>(values.size());
  return buffer_.size() >= kWriterBufferBytes ? Flush() : absl::OkStatus();
}

absl::Status LossMaskWriter::Flush() {
  if (buffer_.empty()) return absl::OkStatus();
  absl::Status status = file_.Write(buffer_.data(), buffer_.size());
  buffer_.clear();
  if (!status.ok()) error_ = status;
  return status;
}

absl::Status LossMaskWriter::Finish() {
  if (!error_.ok()) return error_;
  if (finished_) return absl::FailedPreconditionError(absl::StrCat("loss mask '", path(), "' is already finished"));
  finished_ = true;
  absl::Status status = Flush();
  if (status.ok()) {
    int32_t header[kTokenShardHeaderInts] = {};
    header[0] = kLossMaskMagic;
    header[1] = kLossMaskVersion;
    header[2] = static_cast<int32_t>(num_tokens_);
    status = file_.WriteAt(0, header, sizeof(header));
  }
  if (status.ok()) status = file_.Commit();
  if (!status.ok()) error_ = status;
  return status;
}

}  // namespace colossal::io
