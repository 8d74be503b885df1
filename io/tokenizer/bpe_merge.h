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
//
// Hugging Face's BPE (tokenizer.json) ranks pairs instead: its merge list
// says which two tokens merge and in which order, and a pair that is not in
// the list never merges, even when its concatenation is a token.
// BytePairEncodeMerges runs the same two algorithms with that rule; it equals
// the `tokenizers` library's BPE::merge_word (no dropout).
//
//   colossal::io::BpeMerges merges;   // tokens: bytes -> id; pairs: (left id, right id) -> rank
//   colossal::io::BytePairEncodeMerges("hello", merges, &ids);
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

// A merge list: which adjacent tokens merge, lowest rank first.
struct BpeMerges {
  // Token bytes -> id, every token of the vocabulary.
  BpeRankMap tokens;
  // PairKey(left id, right id) -> rank of that merge; the merged bytes are a
  // token (the loader checks).
  absl::flat_hash_map<uint64_t, int32_t> pairs;

  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
};

// Appends the tokens of `piece` (non-empty) to *out, merging by `merges`.
// Requires every single byte of `piece` to be a token.
void BytePairEncodeMerges(std::string_view piece, const BpeMerges& merges, std::vector<int32_t>* out);

namespace bpe_internal {
// The two algorithms, callable directly so tests can compare them.
void EncodeByScan(std::string_view piece, const BpeRankMap& ranks, std::vector<int32_t>* out);
void EncodeByHeap(std::string_view piece, const BpeRankMap& ranks, std::vector<int32_t>* out);
void EncodeMergesByScan(std::string_view piece, const BpeMerges& merges, std::vector<int32_t>* out);
void EncodeMergesByHeap(std::string_view piece, const BpeMerges& merges, std::vector<int32_t>* out);
}  // namespace bpe_internal

}  // namespace colossal::io

#endif  // COLOSSAL_IO_TOKENIZER_BPE_MERGE_H_
