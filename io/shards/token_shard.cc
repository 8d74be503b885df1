#include "io/shards/token_shard.h"


#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace colossal::io {

// Shards are little-endian; tokens are used in place from the mapping.
static_assert(std::endian::native == std::endian::little, "token shards need a little-endian host");

namespace {

// Tokens buffered by a writer before a write(2): 1 MiB of ids.
constexpr size_t kWriterBufferBytes = 1 << 20;

size_t Bytes(TokenWidth width) { return static_cast<size_t>(width); }

struct Header {
  int64_t count;
  TokenWidth width;
};

// Checks a header against the file size; returns the token count and width.
absl::StatusOr<Header> ValidateHeader(const int32_t* header, uint64_t file_bytes, const std::string& path) {
  const int32_t magic = header[0], version = header[1];
  TokenWidth width;
  if (magic == kTokenShardMagic) {
    if (version != kTokenShardVersion) {
      return absl::InvalidArgumentError(absl::StrCat("token shard '", path, "': unsupported version ", version,
                                                     ", expected ", kTokenShardVersion, " for magic ", magic,
                                                     " (uint16 tokens; llm.c's uint32 shards have magic ",
                                                     kLlama3TokenShardMagic, " and version ",
                                                     kLlama3TokenShardVersion, ")"));
    }
    width = TokenWidth::kUint16;
  } else if (magic == kLlama3TokenShardMagic) {
    if (version != kLlama3TokenShardVersion) {
      return absl::InvalidArgumentError(absl::StrCat("token shard '", path, "': unsupported version ", version,
                                                     " for llm.c's Llama 3 magic ", magic, ", expected ",
                                                     kLlama3TokenShardVersion, " (uint32 tokens)"));
    }
    width = TokenWidth::kUint32;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("token shard '", path, "': bad magic ", magic, ", expected ",
                                                   kTokenShardMagic, " or ", kLlama3TokenShardMagic,
                                                   " (not an llm.c token shard)"));
  }
  const int64_t count = header[2];
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("token shard '", path, "': negative token count ", count, " in the header"));
  }
  const uint64_t size = Bytes(width);
  const uint64_t payload = file_bytes - kTokenShardHeaderBytes;
  const uint64_t expected = static_cast<uint64_t>(count) * size;
  if (payload < expected) {
    return absl::DataLossError(absl::StrCat("token shard '", path, "' is truncated: the header says ", count, " ",
                                            TokenWidthName(width), " tokens (", expected,
                                            " bytes after the header) but the file has ", payload));
  }
  if (payload > expected) {
    const uint64_t left = payload % size;
    return absl::DataLossError(absl::StrCat(
        "token shard '", path, "': token count mismatch: the header says ", count, " ", TokenWidthName(width),
        " tokens (", expected, " bytes after the header) but the file has ", payload, " (", payload / size,
        " tokens", left == 0 ? "" : (left == 1 ? " and an odd byte" : absl::StrCat(" and ", left, " bytes")), ")"));
  }
  return Header{count, width};
}

}  // namespace

TokenWidth TokenWidthForVocab(int64_t vocab_size) {
  return vocab_size <= int64_t{UINT16_MAX} + 1 ? TokenWidth::kUint16 : TokenWidth::kUint32;
}

const char* TokenWidthName(TokenWidth width) { return width == TokenWidth::kUint16 ? "uint16" : "uint32"; }

// ---------------------------------------------------------------------------
// TokenShard

absl::StatusOr<TokenShard> TokenShard::Open(const std::string& path) {
  absl::StatusOr<MappedFile> file = MappedFile::Open(path, "token shard");
  if (!file.ok()) return file.status();
  if (file->size() < kTokenShardHeaderBytes) {
    return absl::DataLossError(absl::StrCat("token shard '", path, "' has ", file->size(), " bytes, fewer than its ",
                                            kTokenShardHeaderBytes, "-byte header (truncated or not a shard)"));
  }
  absl::StatusOr<Header> header = ValidateHeader(reinterpret_cast<const int32_t*>(file->data()), file->size(), path);
  if (!header.ok()) return header.status();
  return TokenShard(path, *std::move(file), header->count, header->width);
}

TokenShard::TokenShard(std::string path, MappedFile file, int64_t num_tokens, TokenWidth width)
    : path_(std::move(path)),
      file_(std::move(file)),
      tokens_(file_.data() + kTokenShardHeaderBytes),
      num_tokens_(num_tokens),
      width_(width) {}

void TokenShard::CopyTokens(int64_t first, int64_t count, int32_t* out) const {
  if (width_ == TokenWidth::kUint16) {
    const uint16_t* in = static_cast<const uint16_t*>(tokens_) + first;
    std::copy(in, in + count, out);
  } else {
    const uint32_t* in = static_cast<const uint32_t*>(tokens_) + first;
    std::transform(in, in + count, out, [](uint32_t id) { return static_cast<int32_t>(id); });
  }
}

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      file_(std::move(other.file_)),
      tokens_(std::exchange(other.tokens_, nullptr)),
      num_tokens_(std::exchange(other.num_tokens_, 0)),
      width_(other.width_) {}

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    path_ = std::move(other.path_);
    file_ = std::move(other.file_);
    tokens_ = std::exchange(other.tokens_, nullptr);
    num_tokens_ = std::exchange(other.num_tokens_, 0);
    width_ = other.width_;
  }
  return *this;
}

// ---------------------------------------------------------------------------
// TokenShardWriter

absl::StatusOr<TokenShardWriter> TokenShardWriter::Create(const std::string& path, TokenWidth width) {
  absl::StatusOr<AtomicFileWriter> file = AtomicFileWriter::Create(path);
  if (!file.ok()) {
    return absl::Status(file.status().code(), absl::StrCat("token shard: ", file.status().message()));
  }
  TokenShardWriter writer(*std::move(file), width);
  // A zero header for now; Finish() writes the real one.
  const int32_t zeros[kTokenShardHeaderInts] = {};
  if (absl::Status s = writer.file_.Write(zeros, sizeof(zeros)); !s.ok()) return s;
  return writer;  // on error above, the writer's destructor removed the file
}

TokenShardWriter::TokenShardWriter(AtomicFileWriter file, TokenWidth width) : file_(std::move(file)), width_(width) {
  buffer_.reserve(kWriterBufferBytes);
}

absl::Status TokenShardWriter::CheckWritable(size_t more) {
  if (!error_.ok()) return error_;
  if (finished_) {
    return absl::FailedPreconditionError(absl::StrCat("token shard writer for '", path(), "' is already finished"));
  }
  if (num_tokens_ + static_cast<int64_t>(more) > kTokenShardMaxTokens) {
    return absl::OutOfRangeError(absl::StrCat("token shard '", path(), "' would exceed ", kTokenShardMaxTokens,
                                              " tokens, the most its int32 header can count"));
  }
  return absl::OkStatus();
}

absl::Status TokenShardWriter::Flush() {
  if (buffer_.empty()) return absl::OkStatus();
  absl::Status status = file_.Write(buffer_.data(), buffer_.size());
  buffer_.clear();
  if (!status.ok()) error_ = status;
  return status;
}

// Appends ids already checked to fit the width, converting them in chunks.
template <typename T>
absl::Status TokenShardWriter::AppendAs(std::span<const T> ids) {
  if (absl::Status s = CheckWritable(ids.size()); !s.ok()) return s;
  const size_t size = Bytes(width_);
  while (!ids.empty()) {
    const size_t n = std::min(ids.size(), (kWriterBufferBytes - buffer_.size()) / size);
    const size_t at = buffer_.size();
    buffer_.resize(at + n * size);
    char* out = buffer_.data() + at;
    if (width_ == TokenWidth::kUint16) {
      for (size_t i = 0; i < n; ++i) {
        const uint16_t v = static_cast<uint16_t>(ids[i]);
        std::memcpy(out + 2 * i, &v, 2);
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        const uint32_t v = static_cast<uint32_t>(ids[i]);
        std::memcpy(out + 4 * i, &v, 4);
      }
    }
    num_tokens_ += static_cast<int64_t>(n);
    ids = ids.subspan(n);
    if (buffer_.size() + size > kWriterBufferBytes) {
      if (absl::Status s = Flush(); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status TokenShardWriter::Append(std::span<const uint16_t> tokens) { return AppendAs(tokens); }

absl::Status TokenShardWriter::Append(std::span<const int32_t> ids) {
  const int64_t max = width_ == TokenWidth::kUint16 ? int64_t{UINT16_MAX} : int64_t{INT32_MAX};
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] > max) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token shard '", path(), "': id ", ids[i], " at index ", i, " does not fit in ", TokenWidthName(width_),
          width_ == TokenWidth::kUint16
              ? " (this shard stores ids below 65536; a larger vocabulary needs 32-bit tokens, TokenWidth::kUint32)"
              : " (ids are non-negative)"));
    }
  }
  return AppendAs(ids);
}

absl::Status TokenShardWriter::Finish() {
  if (absl::Status s = CheckWritable(0); !s.ok()) return s;
  finished_ = true;
  absl::Status status = Flush();
  if (status.ok()) {
    int32_t header[kTokenShardHeaderInts] = {};
    const bool narrow = width_ == TokenWidth::kUint16;
    header[0] = narrow ? kTokenShardMagic : kLlama3TokenShardMagic;
    header[1] = narrow ? kTokenShardVersion : kLlama3TokenShardVersion;
    header[2] = static_cast<int32_t>(num_tokens_);
    status = file_.WriteAt(0, header, sizeof(header));
  }
  if (status.ok()) status = file_.Commit();  // fsync, rename, fsync the folder
  if (!status.ok()) error_ = status;
  return status;
}

absl::Status WriteTokenShard(const std::string& path, std::span<const uint16_t> tokens) {
  absl::StatusOr<TokenShardWriter> writer = TokenShardWriter::Create(path);
  if (!writer.ok()) return writer.status();
  if (absl::Status s = writer->Append(tokens); !s.ok()) return s;
  return writer->Finish();
}

absl::Status WriteTokenShard(const std::string& path, std::span<const int32_t> ids, TokenWidth width) {
  absl::StatusOr<TokenShardWriter> writer = TokenShardWriter::Create(path, width);
  if (!writer.ok()) return writer.status();
  if (absl::Status s = writer->Append(ids); !s.ok()) return s;
  return writer->Finish();
}

}  // namespace colossal::io
