// colossal::io — reading GPT-2 BPE vocabularies from the files users have.
//
// Two formats give the same ranks (token bytes -> rank; in GPT-2 the rank is
// also the token id):
//
//  * tiktoken's ranks file (e.g. gpt2.tiktoken, installed by
//    tools/data/fetch_gpt2_ranks.sh): one "<base64 of the token bytes> <rank>"
//    per line.
//  * OpenAI's original "data gym" pair, encoder.json (token -> id, tokens
//    written in GPT-2's byte encoding, where each byte is one printable
//    character: ' ' is 'Ġ', '\n' is 'Ċ') and vocab.bpe (a "#version" line, then
//    one merge "left right" per line, in rank order). Ranks are built the way
//    tiktoken builds them (the 256 bytes in byte-encoder order, then one rank
//    per merge) and encoder.json must agree with them exactly.
//
//   absl::StatusOr<colossal::io::BpeRanks> ranks =
//       colossal::io::ReadTiktokenRanks("/data/gpt2.tiktoken");
//   if (!ranks.ok()) return ranks.status();  // "gpt2.tiktoken:17: rank 'x' is not ..."
//
// Errors are InvalidArgument with "<file>:<line>: <what>" for malformed
// content, NotFound etc. (io/common/file_util.h) for files that cannot be
// read. Duplicate tokens or ranks are reported by Tokenizer, which takes these.
#ifndef COLOSSAL_IO_TOKENIZER_VOCAB_FILES_H_
#define COLOSSAL_IO_TOKENIZER_VOCAB_FILES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace colossal::io {

// (token bytes, rank) pairs in file order.
using BpeRanks = std::vector<std::pair<std::string, int32_t>>;

// Ranks above this are rejected: decoding keeps a table indexed by rank.
inline constexpr int32_t kMaxBpeRank = (1 << 24) - 1;

// tiktoken format. `source` names the text in error messages (a path).
// Empty lines are skipped; "\r\n" line ends are accepted.
absl::StatusOr<BpeRanks> ParseTiktokenRanks(std::string_view contents, std::string_view source);
absl::StatusOr<BpeRanks> ReadTiktokenRanks(const std::string& path);

// encoder.json + vocab.bpe. "<|endoftext|>" and "<|startoftext|>" entries of
// encoder.json are special tokens, not ranks, and are skipped (as tiktoken does).
absl::StatusOr<BpeRanks> ParseDataGymRanks(std::string_view encoder_json,
                                           std::string_view encoder_json_source,
                                           std::string_view vocab_bpe, std::string_view vocab_bpe_source);
absl::StatusOr<BpeRanks> ReadDataGymRanks(const std::string& encoder_json_path,
                                          const std::string& vocab_bpe_path);

// GPT-2's byte encoder (bytes_to_unicode): the printable character that stands
// for byte `b` in encoder.json/vocab.bpe. Bytes '!'..'~', U+00A1..U+00AC and
// U+00AE..U+00FF stand for themselves; the other 68 map to U+0100.. in order.
char32_t Gpt2ByteToUnicode(uint8_t b);
// Its inverse; nullopt for a code point that stands for no byte.
std::optional<uint8_t> Gpt2UnicodeToByte(char32_t cp);
// Whole strings: bytes -> UTF-8 of their stand-ins, and back. Decoding fails
// (InvalidArgument) on invalid UTF-8 or a character that stands for no byte.
std::string Gpt2ByteEncode(std::string_view bytes);
absl::StatusOr<std::string> Gpt2ByteDecode(std::string_view text);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_TOKENIZER_VOCAB_FILES_H_
