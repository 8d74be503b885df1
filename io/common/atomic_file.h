// colossal::io — files that appear whole or not at all.
//
// An AtomicFileWriter writes to a temporary name beside the destination
// (TemporaryPathFor), and Commit() fsyncs it, renames it over the destination
// and fsyncs the folder, so a reader (or a crash) never sees half a file and
// an existing file is replaced in one step:
//
//   absl::StatusOr<colossal::io::AtomicFileWriter> out =
//       colossal::io::AtomicFileWriter::Create("ckpt/model.safetensors");
//   if (!out.ok()) return out.status();
//   absl::Status s = out->Write(header.data(), header.size());
//   if (s.ok()) s = out->Write(weights, weight_bytes);  // no copy, any size
//   if (s.ok()) s = out->Commit();                      // only now does the file appear
//
//   absl::Status s = colossal::io::WriteFileAtomically("out/manifest.json", text);
//
// Contracts:
//  * Errors name the file (the destination, or the temporary file where the
//    failing call touched it) and carry the system's reason (ErrnoStatus).
//  * A writer destroyed before a successful Commit() removes its temporary
//    file and leaves the destination as it was. After any error every later
//    call returns that error.
#ifndef COLOSSAL_IO_COMMON_ATOMIC_FILE_H_
#define COLOSSAL_IO_COMMON_ATOMIC_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace colossal::io {

// Writes all `bytes` at `data` to `fd` (retrying short writes and EINTR);
// errors name `path`.
absl::Status WriteAllToFd(int fd, const void* data, size_t bytes, const std::string& path);

class AtomicFileWriter {
 public:
  // Creates the temporary file beside `path` (whose folder must exist), mode 0644.
  static absl::StatusOr<AtomicFileWriter> Create(const std::string& path);

  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  // Removes the temporary file unless Commit() succeeded.
  ~AtomicFileWriter();

  // Appends `bytes` bytes (unbuffered: one or more write(2) calls).
  absl::Status Write(const void* data, size_t bytes);
  absl::Status Write(std::string_view text) { return Write(text.data(), text.size()); }
  // Overwrites bytes already written, at `offset` (a header whose values are
  // known only at the end). InvalidArgument past bytes_written().
  absl::Status WriteAt(uint64_t offset, const void* data, size_t bytes);
  // Makes the file `bytes` long (if it is shorter), with the disk space
  // reserved (posix_fallocate), so that WriteAt may then fill any part of it
  // in any order: a file laid out before its contents arrive. A full disk
  // is reported here (ResourceExhausted), not halfway through the writes.
  absl::Status Allocate(uint64_t bytes);
  // fsync, close, rename over the destination, fsync the folder. The writer is
  // finished afterwards, whatever the result.
  absl::Status Commit();

  // Bytes written so far.
  uint64_t bytes_written() const { return bytes_written_; }
  const std::string& path() const { return path_; }

 private:
  AtomicFileWriter(std::string path, std::string temp_path, int fd);
  void Abandon();

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  uint64_t bytes_written_ = 0;
  absl::Status error_;
  bool finished_ = false;
};

// Replaces (or creates) `path` with `contents`, atomically.
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_COMMON_ATOMIC_FILE_H_
