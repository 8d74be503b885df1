// colossal::io — SHA-256 (FIPS 180-4), for manifests that pin the files they
// were made from (a tokenizer's ranks, a corpus).
//
//   std::string hex = colossal::io::Sha256Hex("abc");
//   // "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
//
//   colossal::io::Sha256 h;                // incremental, for streamed data
//   h.Update(part1);
//   h.Update(part2);
//   std::string hex = h.HexDigest();
//
//   absl::StatusOr<std::string> hex = colossal::io::Sha256OfFile("gpt2.tiktoken");
//
// The same digests as `sha256sum` and Python's hashlib.sha256.
#ifndef COLOSSAL_IO_COMMON_SHA256_H_
#define COLOSSAL_IO_COMMON_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace colossal::io {

class Sha256 {
 public:
  Sha256();
  // Adds `bytes` bytes to the message.
  void Update(const void* data, size_t bytes);
  void Update(std::string_view data) { Update(data.data(), data.size()); }
  // The digest of everything added so far; the object is then reset.
  std::array<uint8_t, 32> Digest();
  // Digest() as 64 lower-case hex digits.
  std::string HexDigest();

 private:
  void Reset();
  void Block(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes added
};

// The hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);

// The hex SHA-256 of the file at `path`, read in blocks. Errors name the file.
absl::StatusOr<std::string> Sha256OfFile(const std::string& path);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_COMMON_SHA256_H_
