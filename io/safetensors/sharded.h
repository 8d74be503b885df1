// colossal::io — checkpoints split over several safetensors files, with a
// Hugging Face style index.
//
// A save of more than max_shard_bytes of tensor data is split, in the order
// given, into files of at most that much data (a larger tensor gets a file of
// its own), named as transformers names them, plus an index:
//
//   out/model-00001-of-00003.safetensors
//   out/model-00002-of-00003.safetensors
//   out/model-00003-of-00003.safetensors
//   out/model.safetensors.index.json
//       {"metadata": {"total_size": 497759232},
//        "weight_map": {"h.0.attn.bias": "model-00001-of-00003.safetensors", ...}}
//
// A save that fits in one file is out/model.safetensors, with no index (as
// transformers does). Reading takes either:
//
//   colossal::io::ShardedWriteOptions options;
//   options.max_shard_bytes = 2'000'000'000;
//   absl::StatusOr<colossal::io::ShardedWriteResult> saved =
//       colossal::io::WriteShardedSafetensors("out", tensors, {{"format", "pt"}}, options);
//   absl::StatusOr<colossal::io::ShardedSafetensors> ckpt =
//       colossal::io::ShardedSafetensors::Open("out");  // folder, index or .safetensors
//   if (!ckpt.ok()) return ckpt.status();
//   absl::StatusOr<const colossal::io::SafetensorsTensor*> wte = ckpt->Get("wte.weight");
//
// Contracts:
//  * Writing validates every tensor before writing anything (writer.h). Each
//    file is written atomically, the index last; then files of an earlier
//    save under the same prefix that this save does not use
//    (<prefix>-NNNNN-of-NNNNN.safetensors, <prefix>.safetensors, the index)
//    are removed, so the folder holds exactly one checkpoint. Nothing else
//    in the folder is touched. `metadata` goes into every file's header.
//  * Reading opens every file the index names (memory-mapped, validated:
//    reader.h) and checks the index against them: InvalidArgument naming the
//    index for bad JSON, a missing or malformed weight_map, a file name that
//    is absolute or climbs out with "..", a tensor the named file lacks, or a
//    tensor in a file that the index does not list.
#ifndef COLOSSAL_IO_SAFETENSORS_SHARDED_H_
#define COLOSSAL_IO_SAFETENSORS_SHARDED_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/common/atomic_file.h"
#include "io/safetensors/reader.h"
#include "io/safetensors/writer.h"

namespace colossal::io {

struct ShardedWriteOptions {
  // File names: <prefix>.safetensors, or <prefix>-00001-of-0000N.safetensors
  // and <prefix>.safetensors.index.json.
  std::string prefix = "model";
  // Most tensor-data bytes per file (headers not counted), like transformers'
  // max_shard_size; its default is 5 GB.
  uint64_t max_shard_bytes = 5'000'000'000;
  SafetensorsWriteOptions file_options;
};

struct ShardedWriteResult {
  std::vector<std::string> files;  // names within the folder, in order
  std::string index_file;          // the index's name, or "" for one file
  uint64_t total_size = 0;         // tensor-data bytes over all files
};

// The same files, laid out first and filled after, piece by piece and in any
// order: for a caller that gathers a model too large to hold at once.
//
//   absl::StatusOr<ShardedSafetensorsWriter> out =
//       ShardedSafetensorsWriter::Create("out", layout, {{"format", "pt"}}, options);
//   COLOSSAL_RETURN_IF_ERROR(out->Write(tensor, byte_offset, data, bytes));  // any order
//   absl::StatusOr<ShardedWriteResult> saved = out->Commit();
//
//  * Create validates `tensors` as WriteShardedSafetensors does (their data
//    pointers are not read), creates every file at its temporary name with
//    its header, and reserves its whole size on disk: a disk too small fails
//    here, before any data is gathered.
//  * Write copies `bytes` bytes at `data` to bytes [byte_offset,
//    byte_offset + bytes) of tensor `tensor`'s data. InvalidArgument naming
//    the tensor for a range past its end or one that overlaps bytes already
//    written (a caller's bug that would leave a gap elsewhere).
//  * Commit checks that every byte of every tensor was written
//    (FailedPrecondition naming the first tensor with a gap), then commits
//    the files and the index and removes stale files as
//    WriteShardedSafetensors does. Destroyed before a successful Commit, the
//    writer removes its temporary files and the folder is as it was.
//  * After an error every later call returns that error.
class ShardedSafetensorsWriter {
 public:
  static absl::StatusOr<ShardedSafetensorsWriter> Create(const std::string& dir,
                                                         std::span<const SafetensorsEntry> tensors,
                                                         const SafetensorsMetadata& metadata = {},
                                                         const ShardedWriteOptions& options = {});
  ShardedSafetensorsWriter(ShardedSafetensorsWriter&&) noexcept = default;
  ShardedSafetensorsWriter& operator=(ShardedSafetensorsWriter&&) noexcept = default;

  absl::Status Write(size_t tensor, uint64_t byte_offset, const void* data, size_t bytes);
  absl::StatusOr<ShardedWriteResult> Commit();

 private:
  // Where tensor i's data goes, and which of its bytes have come.
  struct Place {
    std::string name;
    size_t file = 0;
    uint64_t offset = 0;  // of the tensor's first byte in the file
    uint64_t bytes = 0;
    std::map<uint64_t, uint64_t> written;  // begin -> end, disjoint, merged when adjacent
  };
  ShardedSafetensorsWriter() = default;

  std::string dir_;
  std::string where_;
  std::string prefix_;
  std::vector<AtomicFileWriter> files_;
  std::vector<std::string> file_names_;
  std::vector<Place> places_;
  std::string index_text_;  // "" for one file
  uint64_t total_size_ = 0;
  absl::Status error_;
};

// Writes `tensors` into the folder `dir` (which must exist) as described above.
absl::StatusOr<ShardedWriteResult> WriteShardedSafetensors(const std::string& dir,
                                                           std::span<const SafetensorsEntry> tensors,
                                                           const SafetensorsMetadata& metadata = {},
                                                           const ShardedWriteOptions& options = {});

// The split WriteShardedSafetensors makes: indices into `tensors` per file.
// Greedy in order: a file is closed when the next tensor would take it past
// `max_shard_bytes`. No tensors: one empty file.
std::vector<std::vector<size_t>> PlanSafetensorsShards(std::span<const SafetensorsEntry> tensors,
                                                       uint64_t max_shard_bytes);

// "model-00002-of-00003.safetensors"
std::string SafetensorsShardName(std::string_view prefix, size_t index, size_t count);

// A checkpoint of one or more safetensors files. Move-only.
class ShardedSafetensors {
 public:
  // `path`: a *.index.json, a .safetensors file, or a folder holding
  // model.safetensors.index.json or (else) model.safetensors.
  static absl::StatusOr<ShardedSafetensors> Open(const std::string& path);

  ShardedSafetensors(ShardedSafetensors&&) noexcept = default;
  ShardedSafetensors& operator=(ShardedSafetensors&&) noexcept = default;

  // The tensor called `name`, or nullptr.
  const SafetensorsTensor* Find(std::string_view name) const;
  // The path of the file holding tensor `name`, or "" when there is none.
  std::string FileOf(std::string_view name) const;
  // The tensor called `name`, or NotFound naming the checkpoint and the tensor.
  absl::StatusOr<const SafetensorsTensor*> Get(std::string_view name) const;
  // Every tensor name, sorted.
  std::vector<std::string> names() const;
  size_t size() const { return by_name_.size(); }

  // The open files, in the order of their names.
  std::span<const SafetensorsFile> files() const { return files_; }
  // The index read, or "" when the checkpoint is one file.
  const std::string& index_path() const { return index_path_; }
  // The index's metadata.total_size, or the sum of tensor bytes without an index.
  uint64_t total_size() const { return total_size_; }

 private:
  ShardedSafetensors() = default;
  static absl::StatusOr<ShardedSafetensors> OpenIndex(const std::string& index_path);
  std::string Where() const;

  std::string index_path_;
  std::vector<SafetensorsFile> files_;
  // name -> (file, tensor within the file)
  std::map<std::string, std::pair<size_t, size_t>, std::less<>> by_name_;
  uint64_t total_size_ = 0;
};

}  // namespace colossal::io

#endif  // COLOSSAL_IO_SAFETENSORS_SHARDED_H_
