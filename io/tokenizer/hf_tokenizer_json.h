// colossal::io — Hugging Face tokenizer.json files of byte-level BPE models
// (Llama 3, Qwen2, GPT-2) on the BPE engine of tokenizer.h.
//
//   absl::StatusOr<colossal::io::HfTokenizerJson> hf =
//       colossal::io::ReadHfTokenizerJson("Meta-Llama-3-8B/tokenizer.json");
//   if (!hf.ok()) return hf.status();   // "<file>: <key>: what is wrong"
//   absl::StatusOr<std::vector<int32_t>> ids =
//       hf->tokenizer.Encode("Hello", colossal::io::SpecialTokens::kAllow);   // {9906}
//   // hf->prefix_ids == {128000}: the post-processor's <|begin_of_text|>
//
// What is read, and what the ids then equal:
//  * model: type "BPE" with vocab (token -> id, tokens in GPT-2's byte
//    encoding) and merges, each "left right" or ["left", "right"], in
//    priority order; ignore_merges (Llama 3: true). Merging follows the pair
//    list exactly (bpe_merge.h), as the `tokenizers` library does.
//  * pre_tokenizer: ByteLevel with use_regex (GPT-2's pattern), or Llama 3's
//    Sequence of Split (its pattern, behavior Isolated) and ByteLevel without
//    regex (GPT-2's or Qwen2's pattern in the Split works too).
//  * normalizer: none, or NFC (Qwen2), alone or as the only member of a
//    Sequence: the text between special tokens is put in NFC (nfc.h) before
//    it is cut, so Decode(Encode(x)) is x's NFC form.
//  * added_tokens: every one is recognized in input text by Encode(kAllow),
//    as transformers does by default (split_special_tokens=False): the
//    earliest match wins, the longest on a tie; EncodeOrdinary leaves them
//    text. Their ids may lie beyond the vocabulary (Llama 3: 128000..128255)
//    or repeat a vocabulary token with the same text (GPT-2's <|endoftext|>).
//  * post_processor: TemplateProcessing's "single" template gives the
//    special tokens put before ($A) and after the text: prefix_ids and
//    suffix_ids (Llama 3: <|begin_of_text|> before); ByteLevel (offsets only)
//    adds nothing; a Sequence of these. transformers' Llama 3 tokenizer class
//    follows this template and ignores tokenizer_config.json's add_bos_token.
//  * decoder: ByteLevel or none: Decode returns the tokens' bytes (tokens'
//    bytes concatenated; tokenizers would replace invalid UTF-8 of a slice
//    that cuts a character by U+FFFD, we keep the bytes).
//  * truncation and padding are ignored (transformers sets its own per call).
// Anything else is an InvalidArgument error naming the file and the JSON key:
// another model type, BPE dropout, byte_fallback, a subword prefix or
// suffix, another normalizer, another pre-tokenizer or pattern, add_prefix_space,
// added tokens with lstrip/rstrip/single_word, another post-processor or
// decoder. Unicode classes are those of unicode_class.h (Unicode 16.0.0);
// the `tokenizers` library's engine may know an older version, which only
// matters for code points assigned since.
#ifndef COLOSSAL_IO_TOKENIZER_HF_TOKENIZER_JSON_H_
#define COLOSSAL_IO_TOKENIZER_HF_TOKENIZER_JSON_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "io/tokenizer/tokenizer.h"

namespace colossal::io {

struct HfTokenizerJson {
  Tokenizer tokenizer;
  // Special token ids the post-processor adds before and after one text.
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;
  // The pre-tokenizer found.
  Pretokenizer pretokenizer = Pretokenizer::kGpt2;
};

// `source` names the text in errors (its path). `cache_entries` as in TokenizerOptions.
absl::StatusOr<HfTokenizerJson> ParseHfTokenizerJson(std::string_view contents, std::string_view source,
                                                     size_t cache_entries = TokenizerOptions().cache_entries);
absl::StatusOr<HfTokenizerJson> ReadHfTokenizerJson(const std::string& path);

// The patterns recognized in a Split pre-tokenizer, as tokenizer.json spells them.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace colossal::io

#endif  // COLOSSAL_IO_TOKENIZER_HF_TOKENIZER_JSON_H_
