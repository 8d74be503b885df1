// colossal::io — which text files a dataset is made from.
//
// Inputs are given as a user types them: files, folders (searched
// recursively for *.txt) and glob patterns:
//
//   absl::StatusOr<std::vector<colossal::io::InputFile>> files =
//       colossal::io::ResolveInputs({"~/books", "notes.md", "logs/2024-*.txt"});
//   // books/a.txt, books/sub/b.txt, notes.md, logs/2024-01.txt, ... in that order
//
// Contracts:
//  * Order is deterministic: inputs in the order given; within a folder,
//    files sorted by their path relative to it (bytewise); glob matches
//    sorted. A file reached twice (same file system object) is kept once, at
//    its first place.
//  * A folder contributes its regular files named *.txt, found recursively,
//    skipping names that start with '.' (.git, editor backups). A file named
//    directly or by a pattern is taken whatever its name. A pattern matching
//    a folder contributes that folder's *.txt files.
//  * Each file is opened once here, so an unreadable file fails now, not
//    halfway through tokenizing. Errors name the path:
//      InvalidArgument    no inputs; a folder with no *.txt files; a
//                         pattern that matches nothing
//      NotFound, PermissionDenied, ...  a path that cannot be read (a
//                         missing file, a dangling *.txt symlink)
//      FailedPrecondition an input that is neither a file nor a folder
//  * A leading "~/" is the home folder ($HOME).
#ifndef COLOSSAL_IO_PREPARE_INPUTS_H_
#define COLOSSAL_IO_PREPARE_INPUTS_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace colossal::io {

struct InputFile {
  std::string path;  // to open: the input joined with the path found under it
  // A name independent of where the data lives: the path relative to the
  // folder it was found in, or the base name of a file named directly or by
  // a pattern. Used to place documents in train or val (documents.h).
  std::string name;
  uint64_t bytes = 0;
};

// `extension`: the files a folder contributes (".jsonl" for chat data);
// what is said above of *.txt holds for it.
absl::StatusOr<std::vector<InputFile>> ResolveInputs(std::span<const std::string> inputs,
                                                      std::string_view extension = ".txt");

// `path` with a leading "~" or "~/" replaced by $HOME (when set).
std::string ExpandHome(const std::string& path);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_PREPARE_INPUTS_H_
