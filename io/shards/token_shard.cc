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

absl::Status WriteAll(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "cannot write", path);
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

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
  std::string temp = TemporaryPathFor(path);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "cannot create a temporary file for token shard", path);
  TokenShardWriter writer(path, std::move(temp), fd);
  // A zero header for now; Finish() writes the real one.
  const int32_t zeros[kTokenShardHeaderInts] = {};
  absl::Status status = WriteAll(fd, zeros, sizeof(zeros), writer.temp_path_);
  if (!status.ok()) return status;  // the writer's destructor removes the file
  return writer;
}

TokenShardWriter::TokenShardWriter(std::string path, std::string temp_path, int fd)
    : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {
  buffer_.reserve(kWriterBufferTokens);
}

TokenShardWriter::TokenShardWriter(TokenShardWriter&& other) noexcept
    : path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(std::exchange(other.fd_, -1)),
      num_tokens_(other.num_tokens_),
      buffer_(std::move(other.buffer_)),
      error_(std::move(other.error_)),
      finished_(std::exchange(other.finished_, true)) {}

TokenShardWriter& TokenShardWriter::operator=(TokenShardWriter&& other) noexcept {
  if (this != &other) {
    Abandon();
    path_ = std::move(other.path_);
    temp_path_ = std::move(other.temp_path_);
    fd_ = std::exchange(other.fd_, -1);
    num_tokens_ = other.num_tokens_;
    buffer_ = std::move(other.buffer_);
    error_ = std::move(other.error_);
    finished_ = std::exchange(other.finished_, true);
  }
  return *this;
}

TokenShardWriter::~TokenShardWriter() { Abandon(); }

void TokenShardWriter::Abandon() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!finished_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
  finished_ = true;
}

absl::Status TokenShardWriter::CheckWritable(size_t more) {
  if (!error_.ok()) return error_;
  if (finished_) {
    return absl::FailedPreconditionError(absl::StrCat("token shard writer for '", path_, "' is already finished"));
  }
  if (num_tokens_ + static_cast<int64_t>(more) > kTokenShardMaxTokens) {
    return absl::OutOfRangeError(absl::StrCat("token shard '", path_, "' would exceed ", kTokenShardMaxTokens,
                                              " tokens, the most its int32 header can count"));
  }
  return absl::OkStatus();
}

absl::Status TokenShardWriter::Flush() {
  if (buffer_.empty()) return absl::OkStatus();
  absl::Status status = WriteAll(fd_, buffer_.data(), buffer_.size() * sizeof(uint16_t), temp_path_);
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
      return absl::InvalidArgumentError(absl::StrCat("token shard '", path_, "': id ", ids[i], " at index ", i,
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
  absl::Status status = Flush();
  if (status.ok()) {
    int32_t header[kTokenShardHeaderInts] = {};
    header[0] = kTokenShardMagic;
    header[1] = kTokenShardVersion;
    header[2] = static_cast<int32_t>(num_tokens_);
    if (::pwrite(fd_, header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
      status = ErrnoStatus(errno, "cannot write the header of", temp_path_);
    }
  }
  if (status.ok() && ::fsync(fd_) != 0) status = ErrnoStatus(errno, "cannot fsync", temp_path_);
  if (status.ok()) {
    const int rc = ::close(std::exchange(fd_, -1));
    if (rc != 0) status = ErrnoStatus(errno, "cannot close", temp_path_);
  }
  if (status.ok() && ::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    status = ErrnoStatus(errno, absl::StrCat("cannot rename '", temp_path_, "' to"), path_);
  }
  if (!status.ok()) {
    error_ = status;
    Abandon();  // removes the temporary file
    return status;
  }
  finished_ = true;
  return SyncParentDirectory(path_);
}

absl::Status WriteTokenShard(const std::string& path, std::span<const uint16_t> tokens) {
  absl::StatusOr<TokenShardWriter> writer = TokenShardWriter::Create(path);
  if (!writer.ok()) return writer.status();
  if (absl::Status s = writer->Append(tokens); !s.ok()) return s;
  return writer->Finish();
}

}  // namespace colossal::io
