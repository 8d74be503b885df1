#include "io/prepare/documents.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "io/common/file_util.h"

namespace colossal::io {
namespace {

// Finds paragraphs in text fed in pieces: a separator is a run of two or more
// '\n'; empty paragraphs are dropped.
class ParagraphScanner {
 public:
  explicit ParagraphScanner(std::vector<std::pair<uint64_t, uint64_t>>* out) : out_(out) {}

  void Feed(std::string_view chunk) {
    for (size_t i = 0; i < chunk.size(); ++i, ++pos_) {
      if (chunk[i] == '\n') {
        if (run_ == 0) run_start_ = pos_;
        ++run_;
        continue;
      }
      if (run_ >= 2) {
        Emit(start_, run_start_);
        start_ = pos_;
      }
      run_ = 0;
    }
  }

  void Finish() { Emit(start_, run_ >= 2 ? run_start_ : pos_); }

 private:
  void Emit(uint64_t begin, uint64_t end) {
    if (end > begin) out_->emplace_back(begin, end);
  }

  std::vector<std::pair<uint64_t, uint64_t>>* out_;
  uint64_t pos_ = 0;        // offset of the next byte
  uint64_t start_ = 0;      // where the current paragraph starts
  uint64_t run_ = 0;        // length of the current run of '\n'
  uint64_t run_start_ = 0;  // where it starts
};

// Finds lines in text fed in pieces: a line ends at '\n' (a '\r' before it
// is left out); empty lines are dropped, but counted in the line numbers.
class LineScanner {
 public:
  explicit LineScanner(std::vector<std::pair<uint64_t, uint64_t>>* out, std::vector<uint64_t>* numbers)
      : out_(out), numbers_(numbers) {}

  void Feed(std::string_view chunk) {
    for (size_t i = 0; i < chunk.size(); ++i, ++pos_) {
      if (chunk[i] == '\n') {
        Emit();
        start_ = pos_ + 1;
        ++line_;
      }
      last_ = chunk[i];
    }
  }

  void Finish() { Emit(); }

 private:
  void Emit() {
    uint64_t end = pos_;
    if (end > start_ && last_ == '\r') --end;
    if (end > start_) {
      out_->emplace_back(start_, end);
      numbers_->push_back(line_);
    }
  }

  std::vector<std::pair<uint64_t, uint64_t>>* out_;
  std::vector<uint64_t>* numbers_;
  uint64_t pos_ = 0;
  uint64_t start_ = 0;
  uint64_t line_ = 1;
  char last_ = 0;  // the byte before pos_
};

template <typename Scanner>
absl::Status ScanFile(const InputFile& file, Scanner& scanner) {
  const int fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot read input", file.path);
  std::vector<char> buffer(1 << 20);
  while (true) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "cannot read input", file.path);
    }
    if (n == 0) break;
    scanner.Feed(std::string_view(buffer.data(), static_cast<size_t>(n)));
  }
  ::close(fd);
  scanner.Finish();
  return absl::OkStatus();
}

}  // namespace

std::vector<std::pair<uint64_t, uint64_t>> ParagraphRanges(std::string_view text) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  ParagraphScanner scanner(&ranges);
  scanner.Feed(text);
  scanner.Finish();
  return ranges;
}

uint64_t DocumentHash(std::string_view name, uint64_t paragraph) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  h ^= paragraph + 0x9e3779b97f4a7c15ULL;  // SplitMix64 finaliser
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

const char* DocumentSplitName(DocumentSplit split) {
  switch (split) {
    case DocumentSplit::kFile: return "file";
    case DocumentSplit::kParagraph: return "paragraph";
    case DocumentSplit::kLine: return "line";
  }
  return "?";
}

std::optional<DocumentSplit> DocumentSplitFromName(std::string_view name) {
  if (name == "file") return DocumentSplit::kFile;
  if (name == "paragraph") return DocumentSplit::kParagraph;
  if (name == "line") return DocumentSplit::kLine;
  return std::nullopt;
}

absl::StatusOr<std::vector<Document>> SplitDocuments(std::span<const InputFile> files, DocumentSplit split) {
  std::vector<Document> documents;
  for (uint32_t f = 0; f < files.size(); ++f) {
    if (split == DocumentSplit::kFile) {
      if (files[f].bytes > 0) documents.push_back({f, 0, files[f].bytes, DocumentHash(files[f].name, 0), false});
      continue;
    }
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    if (split == DocumentSplit::kLine) {
      std::vector<uint64_t> numbers;
      LineScanner scanner(&ranges, &numbers);
      if (absl::Status s = ScanFile(files[f], scanner); !s.ok()) return s;
      for (size_t l = 0; l < ranges.size(); ++l) {
        documents.push_back(
            {f, ranges[l].first, ranges[l].second, DocumentHash(files[f].name, numbers[l]), false, numbers[l]});
      }
      continue;
    }
    ParagraphScanner scanner(&ranges);
    if (absl::Status s = ScanFile(files[f], scanner); !s.ok()) return s;
    for (uint64_t p = 0; p < ranges.size(); ++p) {
      documents.push_back({f, ranges[p].first, ranges[p].second, DocumentHash(files[f].name, p), false});
    }
  }
  return documents;
}

size_t AssignValidation(double val_fraction, std::vector<Document>* documents) {
  for (Document& d : *documents) d.val = false;
  const size_t n = documents->size();
  if (val_fraction <= 0 || n < 2) return 0;
  uint64_t total = 0;
  for (const Document& d : *documents) total += d.bytes();
  const double target = val_fraction * static_cast<double>(total);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::make_pair((*documents)[a].hash, a) < std::make_pair((*documents)[b].hash, b);
  });
  size_t val = 0;
  double val_bytes = 0;
  for (size_t i : order) {
    if (val + 1 == n) break;  // train keeps at least one document
    Document& d = (*documents)[i];
    // Take it if that brings val nearer the target than leaving it out.
    if (val_bytes + static_cast<double>(d.bytes()) / 2 <= target) {
      d.val = true;
      val_bytes += static_cast<double>(d.bytes());
      ++val;
    }
  }
  if (val == 0) {  // every document is bigger than twice the target: take the first
    (*documents)[order[0]].val = true;
    val = 1;
  }
  return val;
}

}  // namespace colossal::io
