// colossal::io — byte-level BPE tokenizers: GPT-2's (byte-exact with tiktoken)
// and Hugging Face tokenizer.json ones such as Llama 3's (hf_tokenizer_json.h).
//
// A Tokenizer turns text into token ids and back the way tiktoken's "gpt2"
// (r50k_base) encoding does: pre-tokenisation with GPT-2's pattern
// (pretokenizer.h), then byte-level BPE on each piece (bpe_merge.h), with the
// special token <|endoftext|> = 50256. Ranks come from a tiktoken ranks file or
// from encoder.json + vocab.bpe (vocab_files.h).
//
//   // tools/data/fetch_gpt2_ranks.sh installs the file (~/.cache/colossal/data).
//   absl::StatusOr<colossal::io::Tokenizer> tok =
//       colossal::io::Tokenizer::FromTiktokenFile("/data/gpt2.tiktoken");
//   if (!tok.ok()) return tok.status();
//   std::vector<int32_t> ids = tok->EncodeOrdinary("Hello world");  // {15496, 995}
//   absl::StatusOr<std::vector<int32_t>> with_eot =
//       tok->Encode("a<|endoftext|>", colossal::io::SpecialTokens::kAllow);  // {64, 50256}
//   absl::StatusOr<std::string> text = tok->Decode(ids);           // "Hello world"
//
// The same engine runs a Hugging Face tokenizer.json (FromMerges): pieces by
// GPT-2's, Llama 3's or Qwen2's pattern (Pretokenizer), merges by the file's
// pair list (bpe_merge.h), special tokens from its added_tokens, and the text
// between special tokens in NFC first when the file asks (Normalizer, Qwen2).
//
// Contracts:
//  * Encoding takes any bytes. For valid UTF-8 the ids equal tiktoken's
//    (io/tokenizer/testdata/gpt2_vectors.json, checked by gpt2_vectors_test);
//    invalid UTF-8 bytes are symbols like U+FFFD would be (pretokenizer.h).
//  * Decode(Encode(x)) == x byte for byte, for every byte string x (with
//    Normalizer::kNfc: == x's NFC form, nfc.h); Decode
//    concatenates token bytes, so it may return invalid UTF-8 for a slice of
//    ids that cuts a character (as tiktoken's decode_bytes does).
//  * Special tokens are never produced from text unless asked (kAllow).
//  * A Tokenizer is immutable after creation and thread-safe: Encode and
//    Decode may be called from many threads at once. It keeps a bounded cache
//    of piece -> ids (sharded, one mutex per shard), which never changes
//    results, only speed. Moving a Tokenizer is cheap; copying is not offered.
#ifndef COLOSSAL_IO_TOKENIZER_TOKENIZER_H_
#define COLOSSAL_IO_TOKENIZER_TOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/tokenizer/bpe_merge.h"
#include "io/tokenizer/vocab_files.h"

namespace colossal::io {

// GPT-2's end-of-text token.
inline constexpr std::string_view kEndOfText = "<|endoftext|>";
inline constexpr int32_t kGpt2EndOfTextId = 50256;

// How Encode treats the text of a special token (e.g. "<|endoftext|>").
enum class SpecialTokens {
  kAsText,  // ordinary text, split and merged like any other (tiktoken's encode_ordinary)
  kAllow,   // the special token's id (tiktoken's allowed_special="all")
  kReject,  // InvalidArgument naming the token and its offset (tiktoken's default)
};

// Which pattern cuts text into pieces (pretokenizer.h).
enum class Pretokenizer {
  kGpt2,    // GPT-2 / r50k_base
  kLlama3,  // Llama 3 / cl100k_base-like, \p{N}{1,3}
  kQwen2,   // Qwen2 / Qwen2.5: Llama 3's with \p{N} (one number a piece)
};

// What happens to text before it is cut into pieces.
enum class Normalizer {
  kNone,
  kNfc,  // Unicode NFC (nfc.h): Qwen2's tokenizer.json
};

struct TokenizerOptions {
  // Special token text -> id. An id must not be a token of the vocabulary,
  // unless that token has the same bytes (GPT-2's tokenizer.json lists
  // <|endoftext|> in both).
  std::vector<std::pair<std::string, int32_t>> special_tokens = {{std::string(kEndOfText), kGpt2EndOfTextId}};
  Pretokenizer pretokenizer = Pretokenizer::kGpt2;
  // Applied to ordinary text only: special tokens are matched in the text as
  // given (Hugging Face's added tokens with normalized = false).
  Normalizer normalizer = Normalizer::kNone;
  // A piece that is itself a token becomes that token without merging
  // (tiktoken does; Hugging Face's BPE when its ignore_merges is true). With
  // merges (FromMerges) and false, every piece goes through the merge list.
  bool whole_piece_lookup = true;
  // Entries of the piece -> ids cache, 0 for none. About 80 bytes each.
  size_t cache_entries = 1 << 16;
};

class Tokenizer {
 public:
  // From a tiktoken ranks file (gpt2.tiktoken).
  static absl::StatusOr<Tokenizer> FromTiktokenFile(const std::string& path, TokenizerOptions options = {});
  // From OpenAI's encoder.json and vocab.bpe.
  static absl::StatusOr<Tokenizer> FromDataGymFiles(const std::string& encoder_json_path,
                                                    const std::string& vocab_bpe_path,
                                                    TokenizerOptions options = {});
  // From ranks already in memory. `source` names them in error messages.
  // Fails (InvalidArgument) on an empty or duplicate token, a duplicate or
  // out-of-range rank, a byte value with no single-byte token, or a special
  // token that is empty, repeated or collides with a rank.
  static absl::StatusOr<Tokenizer> FromRanks(const BpeRanks& ranks, std::string_view source,
                                             TokenizerOptions options = {});
  // From a vocabulary (token bytes -> id) and a pair merge list, Hugging
  // Face's BPE rule (bpe_merge.h). Same checks as FromRanks.
  static absl::StatusOr<Tokenizer> FromMerges(BpeMerges merges, std::string_view source,
                                              TokenizerOptions options = {});

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Encodes `text` with special tokens as ordinary text.
  std::vector<int32_t> EncodeOrdinary(std::string_view text) const;
  // Appends the ordinary encoding of `text` to *out.
  void EncodeOrdinaryTo(std::string_view text, std::vector<int32_t>* out) const;
  // Encodes `text`; special token text is handled as `mode` says. Fails only
  // for kReject when the text contains a special token.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, SpecialTokens mode) const;

  // The bytes of `ids` concatenated. InvalidArgument for an id with no token.
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids) const;
  // Token shards store uint16 ids (io/shards/token_shard.h).
  absl::StatusOr<std::string> Decode(std::span<const uint16_t> ids) const;
  // The bytes of one token (a special token's text), or nullopt.
  std::optional<std::string_view> TokenBytes(int32_t id) const;

  // One more than the largest id, special tokens included (50257 for GPT-2).
  int32_t vocab_size() const;
  // Number of BPE ranks (mergeable tokens): 50256 for GPT-2.
  int32_t num_ranks() const;
  // The id of a special token, or nullopt.
  std::optional<int32_t> special_token_id(std::string_view text) const;
  // The special tokens (text, id), in the order given.
  const std::vector<std::pair<std::string, int32_t>>& special_tokens() const;

 private:
  struct State;
  explicit Tokenizer(std::unique_ptr<State> state);
  static absl::StatusOr<Tokenizer> Build(BpeMerges merges, bool use_pairs, std::string_view source,
                                         TokenizerOptions options);
  template <typename Splitter>
  void EncodePieces(std::string_view text, std::vector<int32_t>* out) const;
  template <typename Id>
  absl::StatusOr<std::string> DecodeIds(std::span<const Id> ids) const;

  std::unique_ptr<State> state_;
};

}  // namespace colossal::io

#endif  // COLOSSAL_IO_TOKENIZER_TOKENIZER_H_
