// colossal::io — llm.c token shards (.bin): memory-mapped reads, atomic writes.
//
// The format users already have from llm.c (dev/data/*.py, e.g. fineweb.py):
// a header of 256 little-endian int32 (1024 bytes) with
//   [0] magic   [1] version   [2] number of tokens N   [3..255] 0
// followed by N little-endian token ids. llm.c has two headers
// (dev/data/data_common.py, HEADERS_INFO), both read and written here:
//   magic 20240520, version 1: uint16 ids, "gpt-2" (1024 + 2·N bytes)
//   magic 20240801, version 7: uint32 ids, "llama-3" (1024 + 4·N bytes)
// TokenWidth::kUint16 writes the first (byte-identical to llm.c's GPT-2
// shards, as before), TokenWidth::kUint32 the second, so llm.c's Llama 3
// trainer reads what we write and we read its files. A vocabulary of more
// than 65,536 ids needs kUint32 (TokenWidthForVocab). No llm.c file has
// version 2 under the GPT-2 magic; such a file is rejected like any other
// unknown version.
//
//   absl::StatusOr<colossal::io::TokenShard> shard =
//       colossal::io::TokenShard::Open("fineweb_train_000001.bin");
//   if (!shard.ok()) return shard.status();  // names the file and what is wrong
//   std::vector<int32_t> ids(shard->num_tokens());
//   shard->CopyTokens(0, shard->num_tokens(), ids.data());  // either width
//
//   absl::StatusOr<colossal::io::TokenShardWriter> writer =
//       colossal::io::TokenShardWriter::Create("out/train_000000.bin", colossal::io::TokenWidth::kUint32);
//   if (!writer.ok()) return writer.status();
//   absl::Status s = writer->Append(ids);    // uint16 or int32 ids, any number of calls
//   if (s.ok()) s = writer->Finish();        // only now does out/train_000000.bin appear
//
// Contracts:
//  * Reading maps the file read-only and validates it before returning:
//    InvalidArgument for a file with neither header (magic,
//    version, negative count), DataLoss for one whose size disagrees with its
//    header (truncated, or bytes after the tokens), NotFound/PermissionDenied/...
//    for files that cannot be opened. Every message names the file. Token
//    values are not checked at open (that would read the whole file); a uint32
//    id above INT32_MAX reads as a negative int32.
//  * The tokens16()/tokens32() views stay valid while the TokenShard (or what it was moved
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
#include "io/common/mapped_file.h"

namespace colossal::io {

inline constexpr int32_t kTokenShardMagic = 20240520;
inline constexpr int32_t kTokenShardVersion = 1;  // uint16 ids
inline constexpr int32_t kLlama3TokenShardMagic = 20240801;
inline constexpr int32_t kLlama3TokenShardVersion = 7;  // uint32 ids
inline constexpr size_t kTokenShardHeaderInts = 256;
inline constexpr size_t kTokenShardHeaderBytes = kTokenShardHeaderInts * sizeof(int32_t);
// The header stores the count as int32.
inline constexpr int64_t kTokenShardMaxTokens = INT32_MAX;

// Bytes per stored token id.
enum class TokenWidth : uint8_t { kUint16 = 2, kUint32 = 4 };

// kUint16 when every id of a vocabulary of `vocab_size` ids fits (<= 65,536), else kUint32.
TokenWidth TokenWidthForVocab(int64_t vocab_size);
// "uint16" or "uint32".
const char* TokenWidthName(TokenWidth width);

// A read-only, memory-mapped token shard. Move-only.
class TokenShard {
 public:
  static absl::StatusOr<TokenShard> Open(const std::string& path);

  // A moved-from shard is empty (no tokens).
  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  TokenWidth width() const { return width_; }
  // The ids in place; empty unless the shard has that width.
  std::span<const uint16_t> tokens16() const {
    return width_ == TokenWidth::kUint16 ? std::span<const uint16_t>(static_cast<const uint16_t*>(tokens_), Count())
                                         : std::span<const uint16_t>();
  }
  std::span<const uint32_t> tokens32() const {
    return width_ == TokenWidth::kUint32 ? std::span<const uint32_t>(static_cast<const uint32_t*>(tokens_), Count())
                                         : std::span<const uint32_t>();
  }
  // Id i (0 <= i < num_tokens()) as int32, whatever the width.
  int32_t token(int64_t i) const {
    return width_ == TokenWidth::kUint16 ? static_cast<const uint16_t*>(tokens_)[i]
                                         : static_cast<int32_t>(static_cast<const uint32_t*>(tokens_)[i]);
  }
  // Ids [first, first + count) as int32 into out[0, count); the range must be
  // inside the shard.
  void CopyTokens(int64_t first, int64_t count, int32_t* out) const;
  int64_t num_tokens() const { return num_tokens_; }
  const std::string& path() const { return path_; }

 private:
  TokenShard(std::string path, MappedFile file, int64_t num_tokens, TokenWidth width);
  size_t Count() const { return static_cast<size_t>(num_tokens_); }

  std::string path_;
  MappedFile file_;
  const void* tokens_ = nullptr;  // inside file_'s mapping, which a move keeps in place
  int64_t num_tokens_ = 0;
  TokenWidth width_ = TokenWidth::kUint16;
};

// Writes one shard, streaming: tokens are buffered and appended to a
// temporary file; Finish() completes the header and renames it into place.
// Move-only. After an I/O error every later call returns that error.
class TokenShardWriter {
 public:
  // Creates the temporary file beside `path` (whose folder must exist); ids
  // are stored with `width` (the header says which).
  static absl::StatusOr<TokenShardWriter> Create(const std::string& path, TokenWidth width = TokenWidth::kUint16);

  // Movable, not copyable; a writer destroyed before a successful Finish()
  // removes its temporary file (io/common/atomic_file.h).
  TokenShardWriter(TokenShardWriter&&) noexcept = default;
  TokenShardWriter& operator=(TokenShardWriter&&) noexcept = default;

  absl::Status Append(std::span<const uint16_t> tokens);
  // Ids from a tokenizer. InvalidArgument (naming the first offending id and
  // its index, and appending nothing) unless every id fits the width: [0, 65535]
  // for kUint16, non-negative for kUint32.
  absl::Status Append(std::span<const int32_t> ids);
  // Writes the header, fsyncs, renames over the destination, fsyncs the
  // folder. The writer is finished afterwards, whatever the result.
  absl::Status Finish();

  int64_t num_tokens() const { return num_tokens_; }
  TokenWidth width() const { return width_; }
  const std::string& path() const { return file_.path(); }

 private:
  TokenShardWriter(AtomicFileWriter file, TokenWidth width);
  template <typename T>
  absl::Status AppendAs(std::span<const T> ids);
  absl::Status Flush();
  absl::Status CheckWritable(size_t more);

  AtomicFileWriter file_;  // the temporary file, committed by Finish()
  int64_t num_tokens_ = 0;
  TokenWidth width_;
  std::vector<char> buffer_;  // ids in the file's width, not yet written
  absl::Status error_;  // the first failure; every later call returns it
  bool finished_ = false;
};

// Writes `tokens` as one shard at `path`, atomically (TokenShardWriter).
absl::Status WriteTokenShard(const std::string& path, std::span<const uint16_t> tokens);
absl::Status WriteTokenShard(const std::string& path, std::span<const int32_t> ids, TokenWidth width);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_SHARDS_TOKEN_SHARD_H_
