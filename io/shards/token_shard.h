// colossal::io — llm.c token shards (.bin): memory-mapped reads, atomic writes.
//
// The format users already have from llm.c (dev/data/*.py, e.g. fineweb.py):
// a header of 256 little-endian int32 (1024 bytes) with
//   [0] magic 20240520   [1] version 1   [2] number of tokens N   [3..255] 0
// followed by N little-endian uint16 token ids (GPT-2's 50257-token
// vocabulary fits); the file is exactly 1024 + 2·N bytes.
//
//   absl::StatusOr<colossal::io::TokenShard> shard =
//       colossal::io::TokenShard::Open("fineweb_train_000001.bin");
//   if (!shard.ok()) return shard.status();  // names the file and what is wrong
//   std::span<const uint16_t> tokens = shard->tokens();
//
//   absl::StatusOr<colossal::io::TokenShardWriter> writer =
//       colossal::io::TokenShardWriter::Create("out/train_000000.bin");
//   if (!writer.ok()) return writer.status();
//   absl::Status s = writer->Append(ids);    // uint16 or int32 ids, any number of calls
//   if (s.ok()) s = writer->Finish();        // only now does out/train_000000.bin appear
//
// Contracts:
//  * Reading maps the file read-only and validates it before returning:
//    InvalidArgument for a file that is not a version-1 shard (magic, version,
//    negative count), DataLoss for one whose size disagrees with its header
//    (truncated, or bytes after the tokens), NotFound/PermissionDenied/... for
//    files that cannot be opened. Every message names the file.
//  * The tokens() view stays valid while the TokenShard (or what it was moved
//    into) lives. The file must not be truncated while mapped (the kernel
//    would then deliver SIGBUS on access); shards are written once and renamed
//    into place, so a finished shard never changes.
//  * Writing never leaves a partial file under the final name: tokens go to a
//    temporary file beside it, which Finish() fsyncs and renames over the
//    destination (then fsyncs the folder). A writer destroyed before Finish()
//    removes its temporary file and leaves the destination as it was.
#ifndef COLOSSAL_IO_SHARDS_TOKEN_SHARD_H_
#define COLOSSAL_IO_SHARDS_TOKEN_SHARD_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/common/atomic_file.h"

namespace colossal::io {

inline constexpr int32_t kTokenShardMagic = 20240520;
inline constexpr int32_t kTokenShardVersion = 1;
inline constexpr size_t kTokenShardHeaderInts = 256;
inline constexpr size_t kTokenShardHeaderBytes = kTokenShardHeaderInts * sizeof(int32_t);
// The header stores the count as int32.
inline constexpr int64_t kTokenShardMaxTokens = INT32_MAX;

// A read-only, memory-mapped token shard. Move-only.
class TokenShard {
 public:
  static absl::StatusOr<TokenShard> Open(const std::string& path);

  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  ~TokenShard();

  std::span<const uint16_t> tokens() const { return {tokens_, static_cast<size_t>(num_tokens_)}; }
  int64_t num_tokens() const { return num_tokens_; }
  const std::string& path() const { return path_; }

 private:
  TokenShard(std::string path, void* mapping, size_t mapping_bytes, int64_t num_tokens);
  void Unmap();

  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  int64_t num_tokens_ = 0;
};

// Writes one shard, streaming: tokens are buffered and appended to a
// temporary file; Finish() completes the header and renames it into place.
// Move-only. After an I/O error every later call returns that error.
class TokenShardWriter {
 public:
  // Creates the temporary file beside `path` (whose folder must exist).
  static absl::StatusOr<TokenShardWriter> Create(const std::string& path);

  // Movable, not copyable; a writer destroyed before a successful Finish()
  // removes its temporary file (io/common/atomic_file.h).
  TokenShardWriter(TokenShardWriter&&) noexcept = default;
  TokenShardWriter& operator=(TokenShardWriter&&) noexcept = default;

  absl::Status Append(std::span<const uint16_t> tokens);
  // Ids from a tokenizer. InvalidArgument (naming the first offending index
  // and value, and appending nothing) unless every id is in [0, 65535].
  absl::Status Append(std::span<const int32_t> ids);
  // Writes the header, fsyncs, renames over the destination, fsyncs the
  // folder. The writer is finished afterwards, whatever the result.
  absl::Status Finish();

  int64_t num_tokens() const { return num_tokens_; }
  const std::string& path() const { return file_.path(); }

 private:
  explicit TokenShardWriter(AtomicFileWriter file);
  absl::Status Flush();
  absl::Status CheckWritable(size_t more);

  AtomicFileWriter file_;  // the temporary file, committed by Finish()
  int64_t num_tokens_ = 0;
  std::vector<uint16_t> buffer_;
  absl::Status error_;  // the first failure; every later call returns it
  bool finished_ = false;
};

// Writes `tokens` as one shard at `path`, atomically (TokenShardWriter).
absl::Status WriteTokenShard(const std::string& path, std::span<const uint16_t> tokens);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_SHARDS_TOKEN_SHARD_H_
