#include "io/prepare/inputs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "io/common/absl_view.h"
#include "io/common/file_util.h"

namespace colossal::io {
namespace {

struct FileId {
  dev_t dev;
  ino_t ino;
  bool operator<(const FileId& o) const { return std::tie(dev, ino) < std::tie(o.dev, o.ino); }
};

class Resolver {
 public:
  explicit Resolver(std::string_view extension) : extension_(extension) {}
  absl::Status Add(const std::string& input);
  std::vector<InputFile> Take() { return std::move(files_); }

 private:
  absl::Status AddFile(const std::string& path, std::string name, const struct stat& st);
  // Adds the files under `dir` named *<extension>; returns how many.
  absl::StatusOr<size_t> AddFolder(const std::string& dir);
  absl::Status Walk(const std::string& dir, const std::string& relative, std::set<FileId>* ancestors,
                    size_t* found);

  std::string extension_;  // ".txt", ".jsonl"
  std::vector<InputFile> files_;
  std::set<FileId> seen_;
};

std::string JoinPath(std::string_view dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  return absl::StrCat(ToAbsl(dir), dir.back() == '/' ? "" : "/", ToAbsl(name));
}

std::string Basename(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

bool IsPattern(std::string_view s) { return s.find_first_of("*?[") != std::string_view::npos; }

absl::Status Resolver::AddFile(const std::string& path, std::string name, const struct stat& st) {
  if (!seen_.insert(FileId{st.st_dev, st.st_ino}).second) return absl::OkStatus();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot read input", path);
  ::close(fd);
  files_.push_back({path, std::move(name), static_cast<uint64_t>(st.st_size)});
  return absl::OkStatus();
}

absl::Status Resolver::Walk(const std::string& dir, const std::string& relative, std::set<FileId>* ancestors,
                            size_t* found) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, "cannot list input folder", dir);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') names.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string path = JoinPath(dir, name);
    const std::string rel = relative.empty() ? name : absl::StrCat(relative, "/", name);
    const bool txt = absl::EndsWith(name, extension_);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      if (txt) return ErrnoStatus(errno, "cannot read input", path);
      continue;  // e.g. a dangling link that would not be read anyway
    }
    if (S_ISDIR(st.st_mode)) {
      const FileId id{st.st_dev, st.st_ino};
      if (!ancestors->insert(id).second) continue;  // a link back up: already being walked
      absl::Status s = Walk(path, rel, ancestors, found);
      ancestors->erase(id);
      if (!s.ok()) return s;
    } else if (S_ISREG(st.st_mode) && txt) {
      if (absl::Status s = AddFile(path, rel, st); !s.ok()) return s;
      ++*found;  // counted even when another input already added it
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> Resolver::AddFolder(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return ErrnoStatus(errno, "cannot read input folder", dir);
  std::set<FileId> ancestors = {FileId{st.st_dev, st.st_ino}};
  size_t found = 0;
  if (absl::Status s = Walk(dir, "", &ancestors, &found); !s.ok()) return s;
  return found;
}

absl::Status Resolver::Add(const std::string& given) {
  const std::string input = ExpandHome(given);
  if (IsPattern(input)) {
    glob_t g = {};
    const int rc = ::glob(input.c_str(), 0, nullptr, &g);
    std::vector<std::string> matches(g.gl_pathv, g.gl_pathv + g.gl_pathc);
    ::globfree(&g);
    if (rc == GLOB_NOMATCH || (rc == 0 && matches.empty())) {
      return absl::InvalidArgumentError(absl::StrCat("input pattern '", given, "' matches no files"));
    }
    if (rc != 0) return absl::InternalError(absl::StrCat("cannot expand input pattern '", given, "'"));
    for (const std::string& match : matches) {
      struct stat st;
      if (::stat(match.c_str(), &st) != 0) return ErrnoStatus(errno, "cannot read input", match);
      if (S_ISDIR(st.st_mode)) {
        absl::StatusOr<size_t> found = AddFolder(match);
        if (!found.ok()) return found.status();
      } else if (S_ISREG(st.st_mode)) {
        if (absl::Status s = AddFile(match, Basename(match), st); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  }
  struct stat st;
  if (::stat(input.c_str(), &st) != 0) return ErrnoStatus(errno, "cannot read input", input);
  if (S_ISDIR(st.st_mode)) {
    absl::StatusOr<size_t> found = AddFolder(input);
    if (!found.ok()) return found.status();
    if (*found == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("input folder '", input, "' has no ", extension_,
                       " files (searched recursively; name files directly, ",
                       "or with a pattern like '", JoinPath(input, "*.md"), "', to use other names)"));
    }
    return absl::OkStatus();
  }
  if (S_ISREG(st.st_mode)) return AddFile(input, Basename(input), st);
  return absl::FailedPreconditionError(absl::StrCat("input '", input, "' is neither a file nor a folder"));
}

}  // namespace

std::string ExpandHome(const std::string& path) {
  if (path == "~" || absl::StartsWith(path, "~/")) {
    const char* home = std::getenv("HOME");
    if (home != nullptr && *home != '\0') return absl::StrCat(home, path.substr(1));
  }
  return path;
}

absl::StatusOr<std::vector<InputFile>> ResolveInputs(std::span<const std::string> inputs,
                                                      std::string_view extension) {
  if (inputs.empty()) return absl::InvalidArgumentError("no inputs given: name text files, folders or patterns");
  Resolver resolver(extension);
  for (const std::string& input : inputs) {
    if (absl::Status s = resolver.Add(input); !s.ok()) return s;
  }
  return resolver.Take();
}

}  // namespace colossal::io
