#include "io/common/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "io/common/file_util.h"

namespace colossal::io {

absl::Status WriteAllToFd(int fd, const void* data, size_t bytes, const std::string& path) {
  // Linux writes at most 0x7ffff000 bytes per call; ask for 1 GiB at a time.
  constexpr size_t kMaxChunk = size_t{1} << 30;
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, std::min(bytes, kMaxChunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "cannot write", path);
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Create(const std::string& path) {
  std::string temp = TemporaryPathFor(path);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "cannot create a temporary file for", path);
  return AtomicFileWriter(path, std::move(temp), fd);
}

AtomicFileWriter::AtomicFileWriter(std::string path, std::string temp_path, int fd)
    : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(std::exchange(other.fd_, -1)),
      bytes_written_(other.bytes_written_),
      error_(std::move(other.error_)),
      finished_(std::exchange(other.finished_, true)) {}

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    Abandon();
    path_ = std::move(other.path_);
    temp_path_ = std::move(other.temp_path_);
    fd_ = std::exchange(other.fd_, -1);
    bytes_written_ = other.bytes_written_;
    error_ = std::move(other.error_);
    finished_ = std::exchange(other.finished_, true);
  }
  return *this;
}

AtomicFileWriter::~AtomicFileWriter() { Abandon(); }

void AtomicFileWriter::Abandon() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!finished_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
  finished_ = true;
}

absl::Status AtomicFileWriter::Write(const void* data, size_t bytes) {
  if (!error_.ok()) return error_;
  if (finished_) {
    return absl::FailedPreconditionError(absl::StrCat("writer for '", path_, "' is already finished"));
  }
  absl::Status status = WriteAllToFd(fd_, data, bytes, temp_path_);
  if (!status.ok()) {
    error_ = status;
    return status;
  }
  bytes_written_ += bytes;
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::WriteAt(uint64_t offset, const void* data, size_t bytes) {
  if (!error_.ok()) return error_;
  if (finished_) {
    return absl::FailedPreconditionError(absl::StrCat("writer for '", path_, "' is already finished"));
  }
  if (offset > bytes_written_ || bytes > bytes_written_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat("writer for '", path_, "': WriteAt(", offset, ", ", bytes,
                                                   ") past the ", bytes_written_, " bytes written"));
  }
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd_, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error_ = ErrnoStatus(errno, "cannot write", temp_path_);
      return error_;
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Allocate(uint64_t bytes) {
  if (!error_.ok()) return error_;
  if (finished_) {
    return absl::FailedPreconditionError(absl::StrCat("writer for '", path_, "' is already finished"));
  }
  if (bytes <= bytes_written_) return absl::OkStatus();
  // posix_fallocate returns the error instead of setting errno. Filesystems
  // without fallocate get glibc's emulation, which writes every block.
  int err;
  do {
    err = ::posix_fallocate(fd_, 0, static_cast<off_t>(bytes));
  } while (err == EINTR);
  if (err != 0) {
    error_ = ErrnoStatus(err, absl::StrCat("cannot reserve ", bytes, " bytes for"), temp_path_);
    return error_;
  }
  bytes_written_ = bytes;
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (!error_.ok()) return error_;
  if (finished_) {
    return absl::FailedPreconditionError(absl::StrCat("writer for '", path_, "' is already finished"));
  }
  absl::Status status;
  if (::fsync(fd_) != 0) status = ErrnoStatus(errno, "cannot fsync", temp_path_);
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

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Create(path);
  if (!writer.ok()) return writer.status();
  if (absl::Status s = writer->Write(contents); !s.ok()) return s;
  return writer->Commit();
}

}  // namespace colossal::io
