#include "io/shards/token_shard.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "io/common/file_util.h"

namespace colossal::io {

// Shards are little-endian; tokens are used in place from the mapping.
static_assert(std::endian::native == std::endian::little, "token shards need a little-endian host");

namespace {

// llm.c's Llama 3 shards: uint32 tokens, a different magic.
constexpr int32_t kLlama3ShardMagic = 20240801;

// Tokens buffered by a writer before a write(2): 1 MiB.
constexpr size_t kWriterBufferTokens = 1 << 19;

// Checks a header against the file size; returns the token count.
absl::StatusOr<int64_t> ValidateHeader(const int32_t* header, uint64_t file_bytes, const std::string& path) {
  if (header[0] != kTokenShardMagic) {
    std::string hint = header[0] == kLlama3ShardMagic
                           ? " (that is llm.c's Llama 3 format with uint32 tokens, which is not supported)"
                           : " (not an llm.c token shard)";
    return absl::InvalidArgumentError(absl::StrCat("token shard '", path, "': bad magic ", header[0],
                                                   ", expected ", kTokenShardMagic, hint));
  }
  if (header[1] != kTokenShardVersion) {
    return absl::InvalidArgumentError(absl::StrCat("token shard '", path, "': unsupported version ", header[1],
                                                   ", expected ", kTokenShardVersion));
  }
  const int64_t count = header[2];
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("token shard '", path, "': negative token count ", count, " in the header"));
  }
  const uint64_t payload = file_bytes - kTokenShardHeaderBytes;
  const uint64_t expected = static_cast<uint64_t>(count) * sizeof(uint16_t);
  if (payload < expected) {
    return absl::DataLossError(absl::StrCat("token shard '", path, "' is truncated: the header says ", count,
                                            " tokens (", expected, " bytes after the header) but the file has ",
                                            payload));
  }
  if (payload > expected) {
    return absl::DataLossError(absl::StrCat("token shard '", path, "': token count mismatch: the header says ",
                                            count, " tokens (", expected, " bytes after the header) but the file has ",
                                            payload, " (", payload / sizeof(uint16_t), " tokens",
                                            payload % 2 ? " and an odd byte" : "", ")"));
  }
  return count;
}

}  // namespace

// ---------------------------------------------------------------------------
// TokenShard

absl::StatusOr<TokenShard> TokenShard::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open token shard", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "cannot stat token shard", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat("token shard '", path, "' is not a regular file"));
  }
  const uint64_t bytes = static_cast<uint64_t>(st.st_size);
  if (bytes < kTokenShardHeaderBytes) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat("token shard '", path, "' has ", bytes, " bytes, fewer than its ",
                                            kTokenShardHeaderBytes, "-byte header (truncated or not a shard)"));
  }
  void* mapping = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (mapping == MAP_FAILED) return ErrnoStatus(err, "cannot mmap token shard", path);
  absl::StatusOr<int64_t> count = ValidateHeader(static_cast<const int32_t*>(mapping), bytes, path);
  if (!count.ok()) {
    ::munmap(mapping, bytes);
    return count.status();
  }
  return TokenShard(path, mapping, bytes, *count);
}

TokenShard::TokenShard(std::string path, void* mapping, size_t mapping_bytes, int64_t num_tokens)
    : path_(std::move(path)),
      mapping_(mapping),
      mapping_bytes_(mapping_bytes),
      tokens_(reinterpret_cast<const uint16_t*>(static_cast<const char*>(mapping) + kTokenShardHeaderBytes)),
      num_tokens_(num_tokens) {}

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_bytes_(std::exchange(other.mapping_bytes_, 0)),
      tokens_(std::exchange(other.tokens_, nullptr)),
      num_tokens_(std::exchange(other.num_tokens_, 0)) {}

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    Unmap();
    path_ = std::move(other.path_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    num_tokens_ = std::exchange(other.num_tokens_, 0);
  }
  return *this;
}

TokenShard::~TokenShard() { Unmap(); }

void TokenShard::Unmap() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
  mapping_ = nullptr;
  tokens_ = nullptr;
}

// ---------------------------------------------------------------------------
// TokenShardWriter

absl::StatusOr<TokenShardWriter> TokenShardWriter::Create(const std::string& path) {
  absl::StatusOr<AtomicFileWriter> file = AtomicFileWriter::Create(path);
  if (!file.ok()) {
    return absl::Status(file.status().code(), absl::StrCat("token shard: ", file.status().message()));
  }
  TokenShardWriter writer(*std::move(file));
  // A zero header for now; Finish() writes the real one.
  const int32_t zeros[kTokenShardHeaderInts] = {};
  if (absl::Status s = writer.file_.Write(zeros, sizeof(zeros)); !s.ok()) return s;
  return writer;  // on error above, the writer's destructor removed the file
}

TokenShardWriter::TokenShardWriter(AtomicFileWriter file) : file_(std::move(file)) {
  buffer_.reserve(kWriterBufferTokens);
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
  absl::Status status = file_.Write(buffer_.data(), buffer_.size() * sizeof(uint16_t));
  buffer_.clear();
  if (!status.ok()) error_ = status;
  return status;
}

absl::Status TokenShardWriter::Append(std::span<const uint16_t> tokens) {
  if (absl::Status s = CheckWritable(tokens.size()); !s.ok()) return s;
  while (!tokens.empty()) {
    const size_t n = std::min(tokens.size(), kWriterBufferTokens - buffer_.size());
    buffer_.insert(buffer_.end(), tokens.begin(), tokens.begin() + n);
    num_tokens_ += static_cast<int64_t>(n);
    tokens = tokens.subspan(n);
    if (buffer_.size() == kWriterBufferTokens) {
      if (absl::Status s = Flush(); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status TokenShardWriter::Append(std::span<const int32_t> ids) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] > UINT16_MAX) {
      return absl::InvalidArgumentError(absl::StrCat("token shard '", path(), "': id ", ids[i], " at index ", i,
                                                     " does not fit in uint16 (the shard format stores ids below ",
                                                     UINT16_MAX + 1, ")"));
    }
  }
  if (absl::Status s = CheckWritable(ids.size()); !s.ok()) return s;
  uint16_t chunk[4096];
  while (!ids.empty()) {
    const size_t n = std::min(ids.size(), std::size(chunk));
    std::copy(ids.begin(), ids.begin() + n, chunk);
    if (absl::Status s = Append(std::span<const uint16_t>(chunk, n)); !s.ok()) return s;
    ids = ids.subspan(n);
  }
  return absl::OkStatus();
}

absl::Status TokenShardWriter::Finish() {
  if (absl::Status s = CheckWritable(0); !s.ok()) return s;
  finished_ = true;
  absl::Status status = Flush();
  if (status.ok()) {
    int32_t header[kTokenShardHeaderInts] = {};
    header[0] = kTokenShardMagic;
    header[1] = kTokenShardVersion;
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

}  // namespace colossal::io
