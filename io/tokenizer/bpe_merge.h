// colossal::io — the byte-pair merge loop of byte-level BPE (tiktoken's rule).
//
// Given one pre-tokenised piece and the rank of every token (bytes -> rank,
// where a lower rank merges first), BytePairEncode starts from single bytes
// and repeatedly merges the adjacent pair whose concatenation has the lowest
// rank, the leftmost such pair on ties, until no adjacent pair is a token;
// it then appends the rank of each part. This is tiktoken's
// `_byte_pair_merge`, which is byte-exact with GPT-2's original merge list.
//
//   colossal::io::BpeRankMap ranks = ...;  // every single byte must be present
//   std::vector<int32_t> ids;
//   colossal::io::BytePairEncode("hello", ranks, &ids);
//
// Short pieces use tiktoken's O(n^2) scan over a small array (fastest for
// words); pieces of kBpeHeapThreshold bytes or more use a heap and a linked
// list (O(n log n)), so a megabyte without spaces does not take minutes.
// Both give identical results; bpe_merge_test checks that on random input.
#ifndef COLOSSAL_IO_TOKENIZER_BPE_MERGE_H_
#define COLOSSAL_IO_TOKENIZER_BPE_MERGE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace colossal::io {

// Token bytes -> rank. absl's string hashing is transparent, so lookups take
// a std::string_view without copying.
using BpeRankMap = absl::flat_hash_map<std::string, int32_t>;

inline constexpr size_t kBpeHeapThreshold = 128;

// Appends the tokens of `piece` (non-empty) to *out. Requires every single
// byte that occurs in `piece` to be in `ranks` (Tokenizer checks all 256).
void BytePairEncode(std::string_view piece, const BpeRankMap& ranks, std::vector<int32_t>* out);

namespace bpe_internal {
// The two algorithms, callable directly so tests can compare them.
void EncodeByScan(std::string_view piece, const BpeRankMap& ranks, std::vector<int32_t>* out);
void EncodeByHeap(std::string_view piece, const BpeRankMap& ranks, std::vector<int32_t>* out);
}  // namespace bpe_internal

}  // namespace colossal::io

#endif  // COLOSSAL_IO_TOKENIZER_BPE_MERGE_H_
