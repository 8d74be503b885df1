#include "io/tokenizer/tokenizer.h"

#include <algorithm>
#include <array>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "io/common/absl_view.h"
#include "io/tokenizer/bpe_merge.h"
#include "io/tokenizer/nfc.h"
#include "io/tokenizer/pretokenizer.h"

namespace colossal::io {
namespace {

// Pieces up to this size are cached; longer ones are rare and would only bloat it.
constexpr size_t kMaxCachedPieceBytes = 64;

// piece -> ids for pieces that are not a single token. 16 shards, each behind
// its own mutex; a full shard is cleared (natural text keeps re-filling it
// with its frequent words, so a simple policy does well).
class PieceCache {
 public:
  explicit PieceCache(size_t entries) : per_shard_(std::max<size_t>(1, entries / kShards)) {}

  // Appends the cached ids of `piece` to *out and returns true, or returns false.
  bool Lookup(std::string_view piece, size_t hash, std::vector<int32_t>* out) {
    Shard& shard = shards_[hash % kShards];
    absl::MutexLock lock(&shard.mu);
    const auto it = shard.map.find(ToAbsl(piece));
    if (it == shard.map.end()) return false;
    out->insert(out->end(), it->second.ids, it->second.ids + it->second.count);
    return true;
  }

  void Insert(std::string_view piece, size_t hash, const int32_t* ids, size_t count) {
    if (count > kMaxIds) return;
    Ids value;
    value.count = static_cast<uint32_t>(count);
    std::copy(ids, ids + count, value.ids);
    Shard& shard = shards_[hash % kShards];
    absl::MutexLock lock(&shard.mu);
    if (shard.map.size() >= per_shard_) shard.map.clear();
    shard.map.emplace(std::string(piece), value);
  }

 private:
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxIds = 7;
  struct Ids {
    uint32_t count;
    int32_t ids[kMaxIds];
  };
  struct Shard {
    absl::Mutex mu;
    absl::flat_hash_map<std::string, Ids> map ABSL_GUARDED_BY(mu);
  };
  const size_t per_shard_;
  std::array<Shard, kShards> shards_;
};

std::string Printable(std::string_view bytes) { return absl::CHexEscape(ToAbsl(bytes)); }

}  // namespace

struct Tokenizer::State {
  BpeMerges merges;  // merges.tokens: token bytes -> id; pairs used only if use_pairs
  bool use_pairs = false;
  Pretokenizer pretokenizer = Pretokenizer::kGpt2;
  Normalizer normalizer = Normalizer::kNone;
  bool whole_piece_lookup = true;
  std::vector<std::string> id_bytes;  // id -> token bytes; empty: no such id
  std::vector<std::pair<std::string, int32_t>> specials;
  int32_t num_ranks = 0;
  std::unique_ptr<PieceCache> cache;  // null when disabled
};

Tokenizer::Tokenizer(std::unique_ptr<State> state) : state_(std::move(state)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

absl::StatusOr<Tokenizer> Tokenizer::FromTiktokenFile(const std::string& path, TokenizerOptions options) {
  absl::StatusOr<BpeRanks> ranks = ReadTiktokenRanks(path);
  if (!ranks.ok()) return ranks.status();
  return FromRanks(*ranks, path, std::move(options));
}

absl::StatusOr<Tokenizer> Tokenizer::FromDataGymFiles(const std::string& encoder_json_path,
                                                      const std::string& vocab_bpe_path, TokenizerOptions options) {
  absl::StatusOr<BpeRanks> ranks = ReadDataGymRanks(encoder_json_path, vocab_bpe_path);
  if (!ranks.ok()) return ranks.status();
  return FromRanks(*ranks, vocab_bpe_path, std::move(options));
}

absl::StatusOr<Tokenizer> Tokenizer::FromRanks(const BpeRanks& ranks, std::string_view source,
                                               TokenizerOptions options) {
  auto error = [&](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(ToAbsl(source), ": ", parts...)); };
  BpeMerges merges;
  merges.tokens.reserve(ranks.size());
  for (const auto& [bytes, rank] : ranks) {
    if (bytes.empty()) return error("empty token with rank ", rank);
    const auto [it, inserted] = merges.tokens.emplace(bytes, rank);
    if (!inserted) return error("token \"", Printable(bytes), "\" has two ranks, ", it->second, " and ", rank);
  }
  return Build(std::move(merges), /*use_pairs=*/false, source, std::move(options));
}

absl::StatusOr<Tokenizer> Tokenizer::FromMerges(BpeMerges merges, std::string_view source, TokenizerOptions options) {
  return Build(std::move(merges), /*use_pairs=*/true, source, std::move(options));
}

absl::StatusOr<Tokenizer> Tokenizer::Build(BpeMerges merges, bool use_pairs, std::string_view source,
                                           TokenizerOptions options) {
  auto error = [&](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(ToAbsl(source), ": ", parts...)); };
  auto state = std::make_unique<State>();
  state->merges = std::move(merges);
  state->use_pairs = use_pairs;
  state->pretokenizer = options.pretokenizer;
  state->normalizer = options.normalizer;
  state->whole_piece_lookup = options.whole_piece_lookup;
  const BpeRankMap& tokens = state->merges.tokens;
  // In id order, so that errors name the same token on every run.
  std::vector<std::pair<int32_t, const std::string*>> by_id;
  by_id.reserve(tokens.size());
  int32_t max_id = -1;
  for (const auto& [bytes, rank] : tokens) {
    if (bytes.empty()) return error("empty token with rank ", rank);
    if (rank < 0 || rank > kMaxBpeRank) return error("rank ", rank, " is outside [0, ", kMaxBpeRank, "]");
    by_id.emplace_back(rank, &bytes);
    max_id = std::max(max_id, rank);
  }
  std::sort(by_id.begin(), by_id.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first < b.first : *a.second < *b.second; });
  for (int b = 0; b < 256; ++b) {
    if (!tokens.contains(std::string(1, static_cast<char>(b)))) {
      return error("no token for the single byte 0x", absl::Hex(b, absl::kZeroPad2),
                   "; byte-level BPE needs all 256");
    }
  }
  for (const auto& [text, id] : options.special_tokens) {
    if (text.empty()) return error("empty special token text for id ", id);
    if (id < 0 || id > kMaxBpeRank) return error("special token id ", id, " is outside [0, ", kMaxBpeRank, "]");
    max_id = std::max(max_id, id);
  }
  state->num_ranks = static_cast<int32_t>(tokens.size());
  state->id_bytes.resize(static_cast<size_t>(max_id) + 1);
  for (const auto& [rank, bytes] : by_id) {
    if (!state->id_bytes[rank].empty()) {
      return error("rank ", rank, " is given to two tokens, \"", Printable(state->id_bytes[rank]), "\" and \"",
                   Printable(*bytes), "\"");
    }
    state->id_bytes[rank] = *bytes;
  }
  for (const auto& [text, id] : options.special_tokens) {
    if (!state->id_bytes[id].empty() && state->id_bytes[id] != text) {
      return error("special token \"", Printable(text), "\" has id ", id, ", already the id of \"",
                   Printable(state->id_bytes[id]), "\"");
    }
    for (const auto& [other, other_id] : state->specials) {
      if (other == text) return error("special token \"", Printable(text), "\" is listed twice");
    }
    state->id_bytes[id] = text;
    state->specials.emplace_back(text, id);
  }
  if (options.cache_entries > 0) state->cache = std::make_unique<PieceCache>(options.cache_entries);
  return Tokenizer(std::move(state));
}

template <typename Splitter>
void Tokenizer::EncodePieces(std::string_view text, std::vector<int32_t>* out) const {
  const State& st = *state_;
  const BpeRankMap& ranks = st.merges.tokens;
  PieceCache* cache = st.cache.get();
  Splitter split(text);
  std::string_view piece;
  while (split.Next(&piece)) {
    // Most pieces of natural text are whole tokens (" the", " and").
    if (st.whole_piece_lookup) {
      if (const auto it = ranks.find(ToAbsl(piece)); it != ranks.end()) {
        out->push_back(it->second);
        continue;
      }
    }
    const bool cacheable = cache != nullptr && piece.size() <= kMaxCachedPieceBytes;
    const size_t hash = cacheable ? absl::Hash<absl::string_view>{}(ToAbsl(piece)) : 0;
    if (cacheable && cache->Lookup(piece, hash, out)) continue;
    const size_t before = out->size();
    if (st.use_pairs) {
      BytePairEncodeMerges(piece, st.merges, out);
    } else {
      BytePairEncode(piece, ranks, out);
    }
    if (cacheable) cache->Insert(piece, hash, out->data() + before, out->size() - before);
  }
}

void Tokenizer::EncodeOrdinaryTo(std::string_view text, std::vector<int32_t>* out) const {
  std::string normalized;
  if (state_->normalizer == Normalizer::kNfc) text = ToNfc(text, &normalized);
  switch (state_->pretokenizer) {
    case Pretokenizer::kGpt2:
      EncodePieces<Gpt2Splitter>(text, out);
      return;
    case Pretokenizer::kLlama3:
      EncodePieces<Llama3Splitter>(text, out);
      return;
    case Pretokenizer::kQwen2:
      EncodePieces<Qwen2Splitter>(text, out);
      return;
  }
}

std::vector<int32_t> Tokenizer::EncodeOrdinary(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 4 + 1);
  EncodeOrdinaryTo(text, &out);
  return out;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text, SpecialTokens mode) const {
  if (mode == SpecialTokens::kAsText || state_->specials.empty()) return EncodeOrdinary(text);
  // The earliest special token at or after `from` (the longest one on a tie).
  auto next_special = [&](size_t from) {
    size_t best_pos = std::string_view::npos;
    const std::pair<std::string, int32_t>* best = nullptr;
    for (const auto& special : state_->specials) {
      const size_t pos = text.find(special.first, from);
      if (pos < best_pos || (pos == best_pos && pos != std::string_view::npos &&
                             special.first.size() > best->first.size())) {
        best_pos = pos;
        best = &special;
      }
    }
    return std::make_pair(best_pos, best);
  };
  if (mode == SpecialTokens::kReject) {
    const auto [pos, special] = next_special(0);
    if (special != nullptr && pos != std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "text contains the special token \"", special->first, "\" at byte ", pos,
          "; encode with SpecialTokens::kAllow to get its id (", special->second,
          ") or SpecialTokens::kAsText to encode it as ordinary text"));
    }
    return EncodeOrdinary(text);
  }
  // kAllow: ordinary segments between special tokens, each split on its own.
  std::vector<int32_t> out;
  out.reserve(text.size() / 4 + 1);
  size_t start = 0;
  while (true) {
    const auto [pos, special] = next_special(start);
    if (pos == std::string_view::npos) {
      EncodeOrdinaryTo(text.substr(start), &out);
      break;
    }
    EncodeOrdinaryTo(text.substr(start, pos - start), &out);
    out.push_back(special->second);
    start = pos + special->first.size();
  }
  return out;
}

template <typename Id>
absl::StatusOr<std::string> Tokenizer::DecodeIds(std::span<const Id> ids) const {
  const std::vector<std::string>& table = state_->id_bytes;
  size_t bytes = 0;
  for (const Id id : ids) {
    if (static_cast<int64_t>(id) < 0 || static_cast<uint64_t>(id) >= table.size() || table[id].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot decode token id ", static_cast<int64_t>(id),
                                                     ": no such token (vocabulary size ", table.size(), ")"));
    }
    bytes += table[id].size();
  }
  std::string out;
  out.reserve(bytes);
  for (const Id id : ids) out += table[id];
  return out;
}

absl::StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids) const { return DecodeIds(ids); }
absl::StatusOr<std::string> Tokenizer::Decode(std::span<const uint16_t> ids) const { return DecodeIds(ids); }

std::optional<std::string_view> Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= state_->id_bytes.size() || state_->id_bytes[id].empty()) {
    return std::nullopt;
  }
  return state_->id_bytes[id];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(state_->id_bytes.size()); }

int32_t Tokenizer::num_ranks() const { return state_->num_ranks; }

const std::vector<std::pair<std::string, int32_t>>& Tokenizer::special_tokens() const { return state_->specials; }

std::optional<int32_t> Tokenizer::special_token_id(std::string_view text) const {
  for (const auto& [special, id] : state_->specials) {
    if (special == text) return id;
  }
  return std::nullopt;
}

}  // namespace colossal::io
