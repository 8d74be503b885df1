// colossal::io — a regular file mapped read-only, for readers that use their
// data in place (token shards, loss masks).
//
//   absl::StatusOr<colossal::io::MappedFile> f = colossal::io::MappedFile::Open("a.bin", "token shard");
//   if (!f.ok()) return f.status();  // "cannot open token shard 'a.bin': No such file or directory"
//   const char* bytes = f->data();   // f->size() bytes, valid while f (or what it moves into) lives
//
// Contracts: Open fails, naming `what` and the path, for a file that cannot
// be opened, stat'ed or mapped (the errno's Status, file_util.h) and for one
// that is not a regular file (FailedPrecondition). An empty file maps to
// data() == nullptr, size() == 0. The file must not be truncated while mapped
// (access past its new end raises SIGBUS); colossal's shards are written once
// and renamed into place, so a finished one never changes. Move-only.
#ifndef COLOSSAL_IO_COMMON_MAPPED_FILE_H_
#define COLOSSAL_IO_COMMON_MAPPED_FILE_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace colossal::io {

class MappedFile {
 public:
  static absl::StatusOr<MappedFile> Open(const std::string& path, std::string_view what);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const char* data() const { return static_cast<const char*>(mapping_); }
  size_t size() const { return bytes_; }

 private:
  MappedFile(void* mapping, size_t bytes) : mapping_(mapping), bytes_(bytes) {}
  void Unmap();

  void* mapping_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace colossal::io

#endif  // COLOSSAL_IO_COMMON_MAPPED_FILE_H_
