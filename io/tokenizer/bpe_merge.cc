#include "io/tokenizer/bpe_merge.h"

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <limits>
#include <queue>

#include "io/common/absl_view.h"

namespace colossal::io {
namespace {

constexpr int32_t kNoRank = std::numeric_limits<int32_t>::max();

inline int32_t RankOf(const BpeRankMap& ranks, std::string_view bytes) {
  const auto it = ranks.find(ToAbsl(bytes));
  return it == ranks.end() ? kNoRank : it->second;
}

// A part that must be a token (a single byte or a merged pair); a missing one
// means the caller broke BytePairEncode's contract.
inline int32_t RequiredRank(const BpeRankMap& ranks, std::string_view bytes) {
  const int32_t rank = RankOf(ranks, bytes);
  if (rank == kNoRank) {
    std::fprintf(stderr, "%s:%d: BPE part of %zu bytes has no rank (byte 0x%02x missing?)\n",
                 __FILE__, __LINE__, bytes.size(), static_cast<unsigned char>(bytes[0]));
    std::abort();
  }
  return rank;
}

// tiktoken's rule: parts [a, b) and [b, c) of the piece merge with the rank
// of their concatenation.
struct ConcatRanker {
  const BpeRankMap& ranks;
  const BpeRankMap& tokens() const { return ranks; }
  int32_t operator()(std::string_view piece, size_t a, size_t /*b*/, size_t c) const {
    return RankOf(ranks, piece.substr(a, c - a));
  }
};

// Hugging Face's rule: they merge only if (left, right) is in the merge list.
struct PairRanker {
  const BpeMerges& merges;
  const BpeRankMap& tokens() const { return merges.tokens; }
  int32_t operator()(std::string_view piece, size_t a, size_t b, size_t c) const {
    const int32_t left = RankOf(merges.tokens, piece.substr(a, b - a));
    const int32_t right = RankOf(merges.tokens, piece.substr(b, c - b));
    if (left == kNoRank || right == kNoRank) return kNoRank;
    const auto it = merges.pairs.find(BpeMerges::PairKey(left, right));
    return it == merges.pairs.end() ? kNoRank : it->second;
  }
};

// tiktoken's O(n^2) scan over a small array.
template <typename Ranker>
void ScanMerge(std::string_view piece, const Ranker& rank_of, std::vector<int32_t>* out) {
  const BpeRankMap& ranks = rank_of.tokens();
  struct Part {
    uint32_t start;
    int32_t rank;  // rank of this part merged with the next one
  };
  const size_t n = piece.size();
  if (n == 1) {
    out->push_back(RequiredRank(ranks, piece));
    return;
  }
  // parts[0..count) plus a sentinel start at n.
  Part stack_parts[kBpeHeapThreshold + 1];
  std::vector<Part> heap_parts;
  Part* parts = stack_parts;
  if (n + 1 > std::size(stack_parts)) {
    heap_parts.resize(n + 1);
    parts = heap_parts.data();
  }
  for (size_t i = 0; i < n; ++i) {
    parts[i] = {static_cast<uint32_t>(i), i + 1 < n ? rank_of(piece, i, i + 1, i + 2) : kNoRank};
  }
  parts[n] = {static_cast<uint32_t>(n), kNoRank};
  size_t count = n;  // real parts; parts[count] is the sentinel

  // Rank of parts[i] merged with parts[i + 1], given the current layout.
  auto pair_rank = [&](size_t i) {
    if (i + 2 > count) return kNoRank;
    return rank_of(piece, parts[i].start, parts[i + 1].start, parts[i + 2].start);
  };
  while (count > 1) {
    int32_t best = kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < count; ++i) {
      if (parts[i].rank < best) {
        best = parts[i].rank;
        at = i;
      }
    }
    if (best == kNoRank) break;
    // Merge parts[at] and parts[at + 1]: drop parts[at + 1], shift the rest.
    std::copy(parts + at + 2, parts + count + 1, parts + at + 1);
    --count;
    parts[at].rank = pair_rank(at);
    if (at > 0) parts[at - 1].rank = pair_rank(at - 1);
  }
  for (size_t i = 0; i < count; ++i) {
    out->push_back(RequiredRank(ranks, piece.substr(parts[i].start, parts[i + 1].start - parts[i].start)));
  }
}

// A heap of candidate merges and a linked list of parts: O(n log n).
template <typename Ranker>
void HeapMerge(std::string_view piece, const Ranker& rank_of, std::vector<int32_t>* out) {
  const BpeRankMap& ranks = rank_of.tokens();
  const uint32_t n = static_cast<uint32_t>(piece.size());
  constexpr uint32_t kEnd = std::numeric_limits<uint32_t>::max();
  // Node i is the part starting at byte i; merged-away nodes are unlinked.
  std::vector<uint32_t> next(n), prev(n);
  std::vector<int32_t> rank(n);  // current rank of (node, next node); kNoRank if none
  std::vector<bool> alive(n, true);
  for (uint32_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : kEnd;
    prev[i] = i > 0 ? i - 1 : kEnd;
  }
  auto end_of = [&](uint32_t node) { return next[node] == kEnd ? n : next[node]; };
  auto pair_rank = [&](uint32_t node) {
    if (next[node] == kEnd) return kNoRank;
    return rank_of(piece, node, next[node], end_of(next[node]));
  };
  // Min-heap on (rank, start): the lowest rank, leftmost on ties, like the scan.
  using Entry = std::pair<int32_t, uint32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (uint32_t i = 0; i < n; ++i) {
    rank[i] = pair_rank(i);
    if (rank[i] != kNoRank) heap.push({rank[i], i});
  }
  while (!heap.empty()) {
    const auto [r, node] = heap.top();
    heap.pop();
    // Stale entry: the node was merged away or its pair changed rank.
    if (!alive[node] || rank[node] != r) continue;
    const uint32_t gone = next[node];
    alive[gone] = false;
    next[node] = next[gone];
    if (next[gone] != kEnd) prev[next[gone]] = node;
    rank[node] = pair_rank(node);
    if (rank[node] != kNoRank) heap.push({rank[node], node});
    if (prev[node] != kEnd) {
      const uint32_t p = prev[node];
      rank[p] = pair_rank(p);
      if (rank[p] != kNoRank) heap.push({rank[p], p});
    }
  }
  for (uint32_t node = 0; node != kEnd; node = next[node]) {
    out->push_back(RequiredRank(ranks, piece.substr(node, end_of(node) - node)));
  }
}

}  // namespace

namespace bpe_internal {

void EncodeByScan(std::string_view piece, const BpeRankMap& ranks, std::vector<int32_t>* out) {
  ScanMerge(piece, ConcatRanker{ranks}, out);
}
void EncodeByHeap(std::string_view piece, const BpeRankMap& ranks, std::vector<int32_t>* out) {
  HeapMerge(piece, ConcatRanker{ranks}, out);
}
void EncodeMergesByScan(std::string_view piece, const BpeMerges& merges, std::vector<int32_t>* out) {
  ScanMerge(piece, PairRanker{merges}, out);
}
void EncodeMergesByHeap(std::string_view piece, const BpeMerges& merges, std::vector<int32_t>* out) {
  HeapMerge(piece, PairRanker{merges}, out);
}

}  // namespace bpe_internal

void BytePairEncode(std::string_view piece, const BpeRankMap& ranks, std::vector<int32_t>* out) {
  if (piece.size() < kBpeHeapThreshold) {
    bpe_internal::EncodeByScan(piece, ranks, out);
  } else {
    bpe_internal::EncodeByHeap(piece, ranks, out);
  }
}

void BytePairEncodeMerges(std::string_view piece, const BpeMerges& merges, std::vector<int32_t>* out) {
  if (piece.size() < kBpeHeapThreshold) {
    bpe_internal::EncodeMergesByScan(piece, merges, out);
  } else {
    bpe_internal::EncodeMergesByHeap(piece, merges, out);
  }
}

}  // namespace colossal::io
