// colossal::io — documents of a dataset and their train/val split.
//
// A document is a byte range of an input file; prepare.h tokenizes each one
// with <|endoftext|> in front, as llm.c's data scripts do. Either a whole file
// is one document (DocumentSplit::kFile), or each paragraph is
// (kParagraph): paragraphs are separated by blank lines, i.e. runs of two or
// more '\n' (llm.c's tinyshakespeare.py splits on "\n\n" alike), separators
// left out; empty documents are dropped. "\r\n\r\n" is not a separator. Or
// each line is (kLine: JSON Lines, one conversation a line): a line ends at
// '\n', a '\r' before it is left out, empty lines are dropped.
//
//   absl::StatusOr<std::vector<colossal::io::Document>> docs =
//       colossal::io::SplitDocuments(files, colossal::io::DocumentSplit::kParagraph);
//   colossal::io::AssignValidation(0.05, &*docs);  // ~5% of the text to val
//
// Validation documents are picked by hash, not by position: each document
// gets a 64-bit hash of its file's name (InputFile::name, independent of
// where the data lives) and its paragraph (or line) number; documents are taken in
// hash order while that brings the val bytes nearer to val_fraction of all
// bytes. So the split is deterministic, does not depend on input order or
// thread count, spreads val over the corpus, and a document stays on its side
// when others are added (unless the val budget moves past it).
#ifndef COLOSSAL_IO_PREPARE_DOCUMENTS_H_
#define COLOSSAL_IO_PREPARE_DOCUMENTS_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "io/prepare/inputs.h"

namespace colossal::io {

enum class DocumentSplit {
  kFile,       // one file = one document
  kParagraph,  // one paragraph (blank-line separated) = one document
  kLine,       // one non-empty line = one document
};

// "file" / "paragraph" / "line": the names the manifest, `data prepare --split` and
// recipes' data.split use. nullopt for any other name.
const char* DocumentSplitName(DocumentSplit split);
std::optional<DocumentSplit> DocumentSplitFromName(std::string_view name);

struct Document {
  uint32_t file = 0;   // index into the InputFile list
  uint64_t begin = 0;  // [begin, end): bytes of the file
  uint64_t end = 0;
  uint64_t hash = 0;   // DocumentHash(file name, paragraph number)
  bool val = false;
  uint64_t line = 0;   // kLine: the line's number in its file (1-based); else 0

  uint64_t bytes() const { return end - begin; }
};

// The documents of `files`, in order (file, then position). kParagraph reads
// the files (errors name them); kFile only uses their sizes.
absl::StatusOr<std::vector<Document>> SplitDocuments(std::span<const InputFile> files, DocumentSplit split);

// Paragraph ranges of `text` as [begin, end) pairs (the kParagraph rule).
std::vector<std::pair<uint64_t, uint64_t>> ParagraphRanges(std::string_view text);

// A stable 64-bit hash of (file name, paragraph number): FNV-1a, then a
// SplitMix64 finaliser. The same on every machine and run.
uint64_t DocumentHash(std::string_view name, uint64_t paragraph);

// Marks documents val as described above. With val_fraction > 0 and at
// least two documents, at least one is val and at least one is train; with
// val_fraction == 0 none is val. Returns the number of val documents.
size_t AssignValidation(double val_fraction, std::vector<Document>* documents);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_PREPARE_DOCUMENTS_H_
