#include "io/tokenizer/bpe_merge.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace colossal::io {
namespace {

// All 256 bytes at ranks 1000..1255, plus `merges` (result bytes) at ranks
// 0, 1, 2, ... in order: the lower rank wins.
BpeRankMap MakeRanks(const std::vector<std::string>& merges) {
  BpeRankMap ranks;
  for (int b = 0; b < 256; ++b) ranks[std::string(1, static_cast<char>(b))] = 1000 + b;
  for (size_t i = 0; i < merges.size(); ++i) ranks[merges[i]] = static_cast<int32_t>(i);
  return ranks;
}

std::vector<int32_t> Encode(std::string_view piece, const BpeRankMap& ranks) {
  std::vector<int32_t> out;
  BytePairEncode(piece, ranks, &out);
  return out;
}

int32_t Byte(char c) { return 1000 + static_cast<unsigned char>(c); }

TEST(BpeMergeTest, SingleBytesWithoutMerges) {
  const BpeRankMap ranks = MakeRanks({});
  EXPECT_EQ(Encode("x", ranks), (std::vector<int32_t>{Byte('x')}));
  EXPECT_EQ(Encode("ab\xff", ranks), (std::vector<int32_t>{Byte('a'), Byte('b'), Byte('\xff')}));
}

TEST(BpeMergeTest, LowestRankMergesFirstNotLeftmost) {
  const BpeRankMap ranks = MakeRanks({"bc", "ab"});  // "bc" = 0, "ab" = 1
  EXPECT_EQ(Encode("abc", ranks), (std::vector<int32_t>{Byte('a'), 0}));
  const BpeRankMap other = MakeRanks({"ab", "bc"});
  EXPECT_EQ(Encode("abc", other), (std::vector<int32_t>{0, Byte('c')}));
}

TEST(BpeMergeTest, LeftmostPairWinsATie) {
  const BpeRankMap ranks = MakeRanks({"aa"});
  EXPECT_EQ(Encode("aaa", ranks), (std::vector<int32_t>{0, Byte('a')}));
  EXPECT_EQ(Encode("aaaa", ranks), (std::vector<int32_t>{0, 0}));
}

TEST(BpeMergeTest, MergesBuildOnMerges) {
  const BpeRankMap ranks = MakeRanks({"he", "ll", "hell", "hello", "lo"});
  EXPECT_EQ(Encode("hello", ranks), (std::vector<int32_t>{3}));
  EXPECT_EQ(Encode("helloo", ranks), (std::vector<int32_t>{3, Byte('o')}));
  // "ll" (rank 1) beats "lo" (rank 4).
  EXPECT_EQ(Encode("llo", ranks), (std::vector<int32_t>{1, Byte('o')}));
}

TEST(BpeMergeTest, ScanAndHeapAgreeOnRandomPieces) {
  std::mt19937 rng(1234);
  // A vocabulary over a 3-letter alphabet with many overlapping merges.
  std::vector<std::string> merges;
  std::vector<std::string> tokens = {"a", "b", "c"};
  while (merges.size() < 60) {
    const std::string t = tokens[rng() % tokens.size()] + tokens[rng() % tokens.size()];
    if (t.size() > 6 || std::find(merges.begin(), merges.end(), t) != merges.end()) continue;
    merges.push_back(t);
    tokens.push_back(t);
  }
  const BpeRankMap ranks = MakeRanks(merges);
  for (int round = 0; round < 3000; ++round) {
    const size_t n = 1 + rng() % (round < 2500 ? 40 : 400);
    std::string piece;
    for (size_t i = 0; i < n; ++i) piece += static_cast<char>('a' + rng() % 3);
    std::vector<int32_t> scan, heap;
    bpe_internal::EncodeByScan(piece, ranks, &scan);
    bpe_internal::EncodeByHeap(piece, ranks, &heap);
    ASSERT_EQ(scan, heap) << piece;
    // The tokens spell the piece.
    std::string spelled;
    for (int32_t id : scan) {
      for (const auto& [bytes, rank] : ranks) {
        if (rank == id) spelled += bytes;
      }
    }
    ASSERT_EQ(spelled, piece);
  }
}

TEST(BpeMergeTest, LongPieceUsesHeapAndStaysFast) {
  const BpeRankMap ranks = MakeRanks({"aa", "aaaa", "aaaaaaaa"});
  const std::string piece(1 << 20, 'a');  // a megabyte with no spaces
  const std::vector<int32_t> ids = Encode(piece, ranks);
  EXPECT_EQ(ids.size(), piece.size() / 8);
  for (int32_t id : ids) ASSERT_EQ(id, 2);
}

TEST(BpeMergeTest, AppendsToExistingOutput) {
  const BpeRankMap ranks = MakeRanks({"ab"});
  std::vector<int32_t> out = {-7};
  BytePairEncode("ab", ranks, &out);
  EXPECT_EQ(out, (std::vector<int32_t>{-7, 0}));
}

// --- Hugging Face's pair merges ----------------------------------------------

// All 256 bytes at ids 1000..1255; each merge (left, right) gets rank i and
// its result the id i.
BpeMerges MakeMerges(const std::vector<std::pair<std::string, std::string>>& pairs) {
  BpeMerges m;
  m.tokens = MakeRanks({});
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto& [left, right] = pairs[i];
    m.tokens.emplace(left + right, static_cast<int32_t>(i));
    m.pairs.emplace(BpeMerges::PairKey(m.tokens.at(left), m.tokens.at(right)), static_cast<int32_t>(i));
  }
  return m;
}

std::vector<int32_t> EncodeMerges(std::string_view piece, const BpeMerges& merges) {
  std::vector<int32_t> out;
  BytePairEncodeMerges(piece, merges, &out);
  return out;
}

// "abc" is a token made from "ab" + "c" only: after "bc" merges first, "a" +
// "bc" is not a listed pair, so it stays two tokens (tiktoken's rule would
// merge them into "abc").
TEST(BpeMergePairsTest, OnlyListedPairsMerge) {
  const BpeMerges merges = MakeMerges({{"b", "c"}, {"a", "b"}, {"ab", "c"}});
  EXPECT_EQ(EncodeMerges("abc", merges), (std::vector<int32_t>{Byte('a'), 0}));
  EXPECT_EQ(EncodeMerges("abd", merges), (std::vector<int32_t>{1, Byte('d')}));
  EXPECT_EQ(EncodeMerges("ab c", merges), (std::vector<int32_t>{1, Byte(' '), Byte('c')}));
  // The byte-rank rule on the same tokens gives one token.
  BpeRankMap ranks = MakeRanks({"bc", "ab", "abc"});
  EXPECT_EQ(Encode("abc", ranks), (std::vector<int32_t>{2}));
}

TEST(BpeMergePairsTest, LowestRankFirstLeftmostOnTies) {
  const BpeMerges pairs = MakeMerges({{"a", "a"}});
  EXPECT_EQ(EncodeMerges("aaa", pairs), (std::vector<int32_t>{0, Byte('a')}));  // the leftmost (a,a)
  const BpeMerges merges = MakeMerges({{"a", "a"}, {"aa", "a"}});
  EXPECT_EQ(EncodeMerges("aaa", merges), (std::vector<int32_t>{1}));  // (a,a), then (aa,a)
  // (a,a) twice before (aa,a); (aa,aa) is not listed.
  EXPECT_EQ(EncodeMerges("aaaa", merges), (std::vector<int32_t>{0, 0}));
  const BpeMerges later = MakeMerges({{"l", "o"}, {"l", "l"}, {"h", "e"}, {"he", "l"}, {"hel", "lo"}});
  EXPECT_EQ(EncodeMerges("hello", later), (std::vector<int32_t>{4}));
}

TEST(BpeMergePairsTest, ScanAndHeapAgreeOnRandomPieces) {
  std::mt19937 rng(99);
  std::vector<std::pair<std::string, std::string>> pairs;
  std::vector<std::string> tokens = {"a", "b", "c"};
  while (pairs.size() < 60) {
    const std::string left = tokens[rng() % tokens.size()], right = tokens[rng() % tokens.size()];
    if (left.size() + right.size() > 6) continue;
    if (std::find(tokens.begin(), tokens.end(), left + right) != tokens.end()) continue;
    pairs.emplace_back(left, right);
    tokens.push_back(left + right);
  }
  const BpeMerges merges = MakeMerges(pairs);
  for (int round = 0; round < 500; ++round) {
    std::string piece;
    const size_t n = 1 + rng() % 300;
    for (size_t i = 0; i < n; ++i) piece += "abc"[rng() % 3];
    std::vector<int32_t> scan, heap;
    bpe_internal::EncodeMergesByScan(piece, merges, &scan);
    bpe_internal::EncodeMergesByHeap(piece, merges, &heap);
    ASSERT_EQ(scan, heap) << piece;
  }
}

}  // namespace
}  // namespace colossal::io
