#include "io/checkpoint/step_dirs.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "io/common/atomic_file.h"
#include "io/common/file_util.h"

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

namespace colossal::io {
namespace {

constexpr char kLatest[] = "latest";
constexpr absl::string_view kTmpMarker = ".tmp-";

// The step of "step_<digits>", or -1.
int64_t ParseStepName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "step_") || name.empty()) return -1;
  for (char c : name) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return -1;
  }
  int64_t step;
  return absl::SimpleAtoi(name, &step) ? step : -1;
}

absl::StatusOr<std::vector<std::string>> ListNames(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, "cannot list checkpoint folder", dir);
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open folder", dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus(err, "cannot fsync folder", dir);
  return absl::OkStatus();
}

int RemoveEntry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path) == 0 ? 0 : errno; }

}  // namespace

std::string StepDirName(int64_t step) { return absl::StrFormat("step_%06d", step); }

absl::Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT ? absl::OkStatus() : ErrnoStatus(errno, "cannot stat", path);
  const int rc = ::nftw(path.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS);
  if (rc != 0) return ErrnoStatus(rc > 0 ? rc : errno, "cannot remove", path);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ListStepDirs(const std::string& root) {
  absl::StatusOr<std::vector<std::string>> names = ListNames(root);
  if (!names.ok()) return names.status();
  std::vector<std::pair<int64_t, std::string>> steps;
  for (const std::string& name : *names) {
    const int64_t step = ParseStepName(name);
    const std::string path = root + "/" + name;
    struct stat st;
    if (step >= 0 && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) steps.emplace_back(step, path);
  }
  std::sort(steps.begin(), steps.end());
  std::vector<std::string> out;
  for (auto& s : steps) out.push_back(std::move(s.second));
  return out;
}

absl::StatusOr<std::string> BeginStepDir(const std::string& root, int64_t step) {
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("checkpoint step must be >= 0, got ", step));
  if (::mkdir(root.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, "cannot create checkpoint folder", root);
  }
  absl::StatusOr<std::vector<std::string>> names = ListNames(root);
  if (!names.ok()) return names.status();
  const pid_t me = ::getpid();
  for (const std::string& name : *names) {
    // A save killed while replacing `latest` leaves `latest.tmp.<pid>.<n>`
    // (io/common's temporary name); remove those of processes that are gone.
    const std::string latest_tmp = absl::StrCat(kLatest, ".tmp.");
    if (absl::StartsWith(name, latest_tmp)) {
      const absl::string_view rest = absl::string_view(name).substr(latest_tmp.size());
      int64_t pid;
      if (absl::SimpleAtoi(rest.substr(0, rest.find('.')), &pid) &&
          (pid == me || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH))) {
        const std::string path = root + "/" + name;
        if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
          return ErrnoStatus(errno, "cannot remove a leftover temporary file", path);
        }
      }
      continue;
    }
    const size_t at = name.find(std::string(kTmpMarker));
    if (at == std::string::npos || ParseStepName(absl::string_view(name).substr(0, at)) < 0) continue;
    int64_t pid;
    if (!absl::SimpleAtoi(absl::string_view(name).substr(at + kTmpMarker.size()), &pid)) continue;
    // A save of another live process is left alone; ours (an earlier failed
    // save) and those of processes that are gone are removed.
    const bool dead = pid == me || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH);
    if (dead) {
      absl::Status s = RemoveTree(root + "/" + name);
      if (!s.ok()) return s;
    }
  }
  const std::string tmp = absl::StrCat(root, "/", StepDirName(step), kTmpMarker, me);
  if (::mkdir(tmp.c_str(), 0755) != 0) return ErrnoStatus(errno, "cannot create checkpoint folder", tmp);
  return tmp;
}

absl::StatusOr<std::string> PublishStepDir(const std::string& root, int64_t step, const std::string& tmp_dir) {
  absl::Status s = SyncDir(tmp_dir);
  if (!s.ok()) return s;
  const std::string name = StepDirName(step);
  const std::string dir = root + "/" + name;
  if (::rename(tmp_dir.c_str(), dir.c_str()) != 0) {
    if (errno != ENOTEMPTY && errno != EEXIST) return ErrnoStatus(errno, "cannot rename checkpoint folder to", dir);
    // The step was saved before: swap atomically, then drop the old copy.
    if (::syscall(SYS_renameat2, AT_FDCWD, tmp_dir.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
      return ErrnoStatus(errno, "cannot replace existing checkpoint folder", dir);
    }
    s = SyncDir(root);
    if (s.ok()) s = RemoveTree(tmp_dir);
    if (!s.ok()) return s;
  }
  s = SyncDir(root);
  if (!s.ok()) return s;
  s = WriteFileAtomically(root + "/" + kLatest, name + "\n");
  if (!s.ok()) return s;
  return dir;
}

absl::StatusOr<std::string> LatestStepDir(const std::string& root) {
  const std::string latest = root + "/" + kLatest;
  absl::StatusOr<std::string> text = ReadFileToString(latest);
  if (!text.ok()) {
    if (text.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(absl::StrCat("no checkpoint in '", root, "': neither a step folder (config.json) nor a '",
                                              kLatest, "' file"));
    }
    return text.status();
  }
  const std::string name(absl::StripAsciiWhitespace(*text));
  if (ParseStepName(name) < 0) {
    return absl::FailedPreconditionError(absl::StrCat("'", latest, "' should name a step folder like 'step_000100', got '", name, "'"));
  }
  const std::string dir = root + "/" + name;
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("'", latest, "' names '", name, "', which is not a folder in '", root, "'"));
  }
  return dir;
}

absl::Status PruneStepDirs(const std::string& root, int keep_last) {
  if (keep_last <= 0) return absl::OkStatus();
  absl::StatusOr<std::vector<std::string>> dirs = ListStepDirs(root);
  if (!dirs.ok()) return dirs.status();
  absl::StatusOr<std::string> latest = LatestStepDir(root);
  const size_t n = dirs->size();
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < n; ++i) {
    if (latest.ok() && (*dirs)[i] == *latest) continue;
    absl::Status s = RemoveTree((*dirs)[i]);
    if (!s.ok()) return s;
  }
  return SyncDir(root);
}

}  // namespace colossal::io
