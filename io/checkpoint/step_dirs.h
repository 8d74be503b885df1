// colossal::io — step directories of a checkpoint root: names, listing,
// atomic publication, the `latest` pointer, cleanup and keep-last-K.
//
// The mechanics under SaveCheckpoint (checkpoint.h), usable for any set of
// files that must appear together:
//
//   absl::StatusOr<std::string> tmp = colossal::io::BeginStepDir("ckpt", 100);
//   // ... write files into *tmp (each one atomically) ...
//   absl::StatusOr<std::string> dir = colossal::io::PublishStepDir("ckpt", 100, *tmp);
//   // ckpt/step_000100 exists, ckpt/latest says "step_000100"
//   absl::Status s = colossal::io::PruneStepDirs("ckpt", /*keep_last=*/3);
//
// BeginStepDir removes leftover `step_*.tmp-<pid>` directories and
// `latest.tmp.<pid>.*` files of processes that no longer run (crashed saves),
// then creates `step_NNNNNN.tmp-<pid>`. A killed child that has not been
// reaped (a zombie) still counts as running: reap children before saving.
// PublishStepDir fsyncs it, renames it to `step_NNNNNN` (exchanging with an
// existing one, which is then removed), fsyncs the root and replaces
// `latest` atomically, last. PruneStepDirs removes all but the newest
// keep_last step directories, never the one `latest` names.
#ifndef COLOSSAL_IO_CHECKPOINT_STEP_DIRS_H_
#define COLOSSAL_IO_CHECKPOINT_STEP_DIRS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace colossal::io {

// "step_000100" (at least six digits).
std::string StepDirName(int64_t step);

// The step directories under `root` (full paths), oldest step first; .tmp
// leftovers and other entries excluded.
absl::StatusOr<std::vector<std::string>> ListStepDirs(const std::string& root);

// Creates `root` if missing, removes dead leftovers, creates and returns the
// temporary directory for `step`.
absl::StatusOr<std::string> BeginStepDir(const std::string& root, int64_t step);

// Publishes `tmp_dir` (from BeginStepDir) as the directory of `step` and
// points `latest` at it. Returns the step directory's path.
absl::StatusOr<std::string> PublishStepDir(const std::string& root, int64_t step, const std::string& tmp_dir);

// Keeps the newest `keep_last` step directories (0: all) and the one `latest` names.
absl::Status PruneStepDirs(const std::string& root, int keep_last);

// The step directory `root`/latest names (its full path). NotFound when
// there is no `latest`; FailedPrecondition when it names a missing directory.
absl::StatusOr<std::string> LatestStepDir(const std::string& root);

// Removes `path` and everything under it (symlinks are not followed).
absl::Status RemoveTree(const std::string& path);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_CHECKPOINT_STEP_DIRS_H_
