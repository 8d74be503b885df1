// colossal::io — reading safetensors files: memory-mapped and validated.
//
// The format (Hugging Face's safetensors): an 8-byte little-endian header
// length N, N bytes of UTF-8 JSON, then the tensor data:
//
//   {"__metadata__": {"format": "pt"},                       <- optional, str -> str
//    "wte.weight": {"dtype": "F32", "shape": [50257, 768],
//                   "data_offsets": [0, 154389504]}, ...}
//
// data_offsets are [begin, end) byte offsets from the start of the data (byte
// 8 + N of the file); the tensors must cover the data exactly, with no gaps
// and no overlap. Elements are little-endian, row-major (C order).
//
//   absl::StatusOr<colossal::io::SafetensorsFile> file =
//       colossal::io::SafetensorsFile::Open("gpt2/model.safetensors");
//   if (!file.ok()) return file.status();  // names the file (and tensor) and what is wrong
//   absl::StatusOr<const colossal::io::SafetensorsTensor*> wte = file->Get("wte.weight");
//   if (!wte.ok()) return wte.status();
//   // (*wte)->dtype == "F32", (*wte)->shape == {50257, 768}, (*wte)->data: the bytes
//   for (const colossal::io::SafetensorsTensor& t : file->tensors()) { ... }  // in data order
//
// Contracts:
//  * Open maps the file read-only and validates everything before returning;
//    a file that opens is safe to read through tensors(). Errors name the
//    file, and the tensor where there is one:
//      DataLoss         file shorter than 8 bytes; header length past the end
//                       of the file; a tensor's data_offsets past the end of
//                       the data; bytes after the last tensor
//      InvalidArgument  header over 100 MB (the library's limit), not starting
//                       with '{', not valid JSON / UTF-8, nested over 64 levels,
//                       a duplicate key;
//                       __metadata__ not str -> str; an entry without dtype,
//                       shape or data_offsets, of the wrong type, or with an
//                       unknown dtype; a byte size that disagrees with dtype
//                       and shape; overlapping tensors; data bytes that no
//                       tensor covers
//      NotFound, PermissionDenied, ...  from the file system (ErrnoStatus)
//  * Tensor data is not copied: each SafetensorsTensor::data points into the
//    mapping and stays valid while the SafetensorsFile (or what it was moved
//    into) lives. The mapping is page-aligned, so a tensor's data is aligned
//    to its element size when the writer laid the file out that way
//    (Python's sorts tensors to do so; ours keeps the caller's order, and
//    writer.h says when that aligns); readers that need alignment check. The file must not be truncated while mapped
//    (the kernel would deliver SIGBUS): checkpoints are written to a
//    temporary name and renamed, so a finished file never changes.
#ifndef COLOSSAL_IO_SAFETENSORS_READER_H_
#define COLOSSAL_IO_SAFETENSORS_READER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace colossal::io {

// The header's "__metadata__": free-form str -> str (e.g. {"format": "pt"}).
using SafetensorsMetadata = std::map<std::string, std::string>;

// The header's most a reader accepts (safetensors' own MAX_HEADER_SIZE).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// One tensor of an open file.
struct SafetensorsTensor {
  std::string name;
  std::string_view dtype;      // "F32", ... (a name from dtypes.h, static storage)
  int dtype_bits = 0;          // bits per element
  std::vector<int64_t> shape;  // [] for a scalar
  uint64_t begin = 0;          // data_offsets: [begin, end) within the data section
  uint64_t end = 0;
  std::span<const std::byte> data;  // end - begin bytes, in the mapping

  int64_t num_elements() const;
};

// A read-only, memory-mapped, validated safetensors file. Move-only.
class SafetensorsFile {
 public:
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  // Every tensor, in data order (by data_offsets).
  std::span<const SafetensorsTensor> tensors() const { return tensors_; }
  // The tensor called `name`, or nullptr.
  const SafetensorsTensor* Find(std::string_view name) const;
  // The tensor called `name`, or NotFound naming the file and the tensor
  // (with a near name when one differs only by a leading "prefix.").
  absl::StatusOr<const SafetensorsTensor*> Get(std::string_view name) const;

  const SafetensorsMetadata& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }
  // N: the JSON header's length in bytes, padding included.
  uint64_t header_bytes() const { return header_bytes_; }
  // Where the data section starts in the file: 8 + N.
  uint64_t data_start() const { return 8 + header_bytes_; }
  uint64_t file_bytes() const { return mapping_bytes_; }
  // The whole file as mapped (page-aligned): tensor t's data starts at byte
  // data_start() + t.begin of it.
  std::span<const std::byte> mapping() const {
    return {static_cast<const std::byte*>(mapping_), mapping_bytes_};
  }

 private:
  SafetensorsFile() = default;
  void Unmap();

  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  uint64_t header_bytes_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
  SafetensorsMetadata metadata_;
};

// A NotFound for tensor `name` missing from `where` ("safetensors file 'x'"),
// with a hint when one of `names` differs from it only by a leading "prefix.".
absl::Status MissingTensorError(std::string_view where, std::string_view name,
                                std::span<const std::string_view> names);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_SAFETENSORS_READER_H_
