// colossal::io — loss masks beside token shards: which targets the loss counts.
//
// A chat dataset trains on the assistant's replies only: the tokens of the
// system and user turns and of the template's headers are context, not
// targets. `data prepare --format chat` writes, beside each token shard
// <name>_<split>_NNNNNN.bin, a mask file <name>_<split>_NNNNNN.mask with one
// byte of flags per token of that shard: bit 0 (kCounted) when the token is a
// target the loss counts (the model learns to predict it from the tokens
// before it), bit 1 (kDocumentStart) when a document (a conversation) starts
// at it. The data loader (io/loader/data_loader.h) turns an uncounted target
// into the loss's ignore_index, and can cut rows at document starts. llm.c's shard format stays untouched, so the .bin files are
// still llm.c's and other tools read them as they did.
//
// The file: a header of 256 little-endian int32 (1024 bytes, as a token
// shard's) with [0] magic 20261201, [1] version 1, [2] the number of tokens
// N, [3..255] 0, then the N bytes, each a combination of the two flags (0..3).
//
//   absl::StatusOr<colossal::io::LossMaskWriter> w =
//       colossal::io::LossMaskWriter::Create(colossal::io::LossMaskPathFor("out/data_train_000000.bin"));
//   absl::Status s = w->Append(flags);         // uint8 0..3, any number of calls
//   if (s.ok()) s = w->Finish();               // only now does out/data_train_000000.mask appear
//   absl::StatusOr<colossal::io::LossMask> m = colossal::io::LossMask::Open("out/data_train_000000.mask");
//   bool counted = m->counted(i);
//
// Contracts: Open maps the file read-only and checks all of it before
// returning: InvalidArgument for another magic or version or a negative
// count, DataLoss for a size that disagrees with the header or a byte other
// with other bits set (naming its index); every message names the file. Writing is
// atomic as for token shards (temporary file, fsync, rename, fsync the
// folder); a writer destroyed before Finish() leaves the destination as it was.
#ifndef COLOSSAL_IO_SHARDS_LOSS_MASK_H_
#define COLOSSAL_IO_SHARDS_LOSS_MASK_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/common/atomic_file.h"
#include "io/common/mapped_file.h"

namespace colossal::io {

inline constexpr int32_t kLossMaskMagic = 20261201;
inline constexpr int32_t kLossMaskVersion = 1;
// A token's flags.
inline constexpr uint8_t kCounted = 1;        // the loss counts it as a target
inline constexpr uint8_t kDocumentStart = 2;  // a document starts at it
inline constexpr uint8_t kLossMaskFlags = kCounted | kDocumentStart;

// The mask file of a token shard: "x.bin" -> "x.mask" (any other name gets
// ".mask" appended).
std::string LossMaskPathFor(std::string_view shard_path);

// A read-only, memory-mapped loss mask. Move-only.
class LossMask {
 public:
  static absl::StatusOr<LossMask> Open(const std::string& path);

  // A moved-from mask is empty (no tokens).
  LossMask(LossMask&& other) noexcept;
  LossMask& operator=(LossMask&& other) noexcept;

  int64_t num_tokens() const { return num_tokens_; }
  // Whether token i (0 <= i < num_tokens()) is a target the loss counts.
  bool counted(int64_t i) const { return (values_[i] & kCounted) != 0; }
  // Whether a document starts at token i.
  bool starts_document(int64_t i) const { return (values_[i] & kDocumentStart) != 0; }
  std::span<const uint8_t> values() const { return {values_, static_cast<size_t>(num_tokens_)}; }
  const std::string& path() const { return path_; }

 private:
  LossMask(std::string path, MappedFile file, int64_t num_tokens);

  std::string path_;
  MappedFile file_;
  const uint8_t* values_ = nullptr;  // inside file_'s mapping, which a move keeps in place
  int64_t num_tokens_ = 0;
};

// Writes one mask, streaming. Move-only; after an I/O error every later call
// returns that error.
class LossMaskWriter {
 public:
  static absl::StatusOr<LossMaskWriter> Create(const std::string& path);

  LossMaskWriter(LossMaskWriter&&) noexcept = default;
  LossMaskWriter& operator=(LossMaskWriter&&) noexcept = default;

  // InvalidArgument (naming the index, appending nothing) for a value with
  // bits other than the two flags.
  absl::Status Append(std::span<const uint8_t> values);
  // Writes the header, fsyncs, renames into place. Finished afterwards, whatever the result.
  absl::Status Finish();

  int64_t num_tokens() const { return num_tokens_; }
  const std::string& path() const { return file_.path(); }

 private:
  explicit LossMaskWriter(AtomicFileWriter file) : file_(std::move(file)) {}
  absl::Status Flush();

  AtomicFileWriter file_;
  int64_t num_tokens_ = 0;
  std::vector<uint8_t> buffer_;
  absl::Status error_;
  bool finished_ = false;
};

}  // namespace colossal::io

#endif  // COLOSSAL_IO_SHARDS_LOSS_MASK_H_
