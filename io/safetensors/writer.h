// colossal::io — writing safetensors files, atomically.
//
//   std::vector<float> wte = ...;                                // 50257 x 768
//   std::vector<colossal::io::SafetensorsEntry> tensors = {
//       {"wte.weight", "F32", {50257, 768}, wte.data(), wte.size() * sizeof(float)},
//   };
//   absl::Status s = colossal::io::WriteSafetensors("out/model.safetensors", tensors,
//                                                   {{"format", "pt"}});
//
// Layout (readable by Hugging Face's safetensors and by reader.h):
//   * 8-byte little-endian header length N, then the JSON header: compact,
//     "__metadata__" first (left out when empty), then the tensors in the
//     order given, then spaces up to the data start.
//   * The data start (byte 8 + N) is a multiple of options.alignment (64 by
//     default; at least 8, as the format asks).
//   * Tensor data follows in the order given, back to back (the format
//     allows no gaps), so tensor i starts at data start + the bytes of the
//     tensors before it. Every tensor is therefore aligned to its element
//     size when each tensor's byte size is a multiple of the next one's
//     element size — always true for tensors of one dtype (a flat parameter
//     buffer carved into views), and for mixed dtypes given largest element
//     first (Python's safetensors sorts that way; we keep the caller's order).
//
// Contracts:
//  * Validation first, nothing written on error: InvalidArgument (naming the
//    tensor) for an empty name, the reserved name "__metadata__",
//    a duplicate name, an unknown dtype, a negative dimension, `bytes` that
//    disagree with dtype and shape, null data with bytes > 0, or a name or
//    metadata string that is not valid UTF-8.
//  * The file is written to a temporary name beside `path`, fsynced, renamed
//    over `path` and the folder fsynced (io/common/atomic_file.h): readers
//    see the old file or the new one, never half of one.
//  * Tensor data is written straight from the given pointers (host memory),
//    without copies.
#ifndef COLOSSAL_IO_SAFETENSORS_WRITER_H_
#define COLOSSAL_IO_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/safetensors/reader.h"

namespace colossal::io {

// One tensor to write: its bytes are `bytes` bytes at `data` (host memory,
// little-endian, row-major), which must stay valid during the call.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;           // "F32", "BF16", ... (dtypes.h)
  std::vector<int64_t> shape;  // {} for a scalar
  const void* data = nullptr;
  uint64_t bytes = 0;
};

struct SafetensorsWriteOptions {
  // The data section starts at a multiple of this many bytes from the start
  // of the file. A power of two, at least 8.
  uint64_t alignment = 64;
};

// Writes `tensors` and `metadata` to `path`, atomically.
absl::Status WriteSafetensors(const std::string& path, std::span<const SafetensorsEntry> tensors,
                              const SafetensorsMetadata& metadata = {}, const SafetensorsWriteOptions& options = {});

// The first 8 + N bytes of the file WriteSafetensors would write: the length
// prefix and the padded JSON header. Validates as WriteSafetensors does, but
// for the data pointers, which it does not read (a layout may come before its
// data: sharded.h's ShardedSafetensorsWriter); `where` prefixes messages
// (e.g. "safetensors file 'out/model.safetensors'").
absl::StatusOr<std::string> EncodeSafetensorsHeader(std::span<const SafetensorsEntry> tensors,
                                                    const SafetensorsMetadata& metadata,
                                                    const SafetensorsWriteOptions& options, std::string_view where);

// InvalidArgument (prefixed by `where`) for a tensor of bytes > 0 whose data
// is null: the check the writers add to the header's.
absl::Status CheckSafetensorsData(std::span<const SafetensorsEntry> tensors, std::string_view where);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_SAFETENSORS_WRITER_H_
