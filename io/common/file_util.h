// colossal::io — small POSIX file helpers shared by io/ readers and writers.
//
// Every error is an absl::Status whose message names the operation and the
// file, with the system's own reason:
//
//   absl::StatusOr<std::string> text = colossal::io::ReadFileToString("ranks.tiktoken");
//   // NotFound: "cannot open 'ranks.tiktoken': No such file or directory"
//
// Writers that must never leave a half-written file write to
// TemporaryPathFor(path), fsync, rename(2) over `path`, then
// SyncParentDirectory(path).
#ifndef COLOSSAL_IO_COMMON_FILE_UTIL_H_
#define COLOSSAL_IO_COMMON_FILE_UTIL_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace colossal::io {

// A Status for the errno value `err`: "<what> '<path>': <strerror(err)>".
// ENOENT is NotFound; EACCES/EPERM PermissionDenied; EEXIST AlreadyExists;
// ENOSPC/EDQUOT/EMFILE/ENFILE/ENOMEM ResourceExhausted; EISDIR/ENOTDIR/
// ENAMETOOLONG/EROFS/ELOOP FailedPrecondition; anything else Internal.
absl::Status ErrnoStatus(int err, std::string_view what, std::string_view path);

// True when `path` names nothing (stat(2) says ENOENT): front ends call that a
// mistake on the command line, apart from a path that is there but unusable.
bool NoSuchPath(const std::string& path);

// The whole contents of the regular file at `path`.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// A temporary name beside `path` (same folder, so rename(2) over `path` is
// atomic) that no other process or thread picks: "<path>.tmp.<pid>.<n>".
std::string TemporaryPathFor(const std::string& path);

// fsync(2)s the folder that holds `path`, so a rename into it is durable.
absl::Status SyncParentDirectory(const std::string& path);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_COMMON_FILE_UTIL_H_
