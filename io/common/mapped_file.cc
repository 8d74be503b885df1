#include "io/common/mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "io/common/absl_view.h"
#include "io/common/file_util.h"

namespace colossal::io {

absl::StatusOr<MappedFile> MappedFile::Open(const std::string& path, std::string_view what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open ", ToAbsl(what)), path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, absl::StrCat("cannot stat ", ToAbsl(what)), path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(ToAbsl(what), " '", path, "' is not a regular file"));
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes == 0) {
    ::close(fd);
    return MappedFile(nullptr, 0);
  }
  void* mapping = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (mapping == MAP_FAILED) return ErrnoStatus(err, absl::StrCat("cannot mmap ", ToAbsl(what)), path);
  return MappedFile(mapping, bytes);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : mapping_(std::exchange(other.mapping_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Unmap();
    mapping_ = std::exchange(other.mapping_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { Unmap(); }

void MappedFile::Unmap() {
  if (mapping_ != nullptr) ::munmap(mapping_, bytes_);
  mapping_ = nullptr;
  bytes_ = 0;
}

}  // namespace colossal::io
