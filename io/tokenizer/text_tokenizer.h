// colossal::io — one interface over every tokenizer colossal reads: GPT-2's
// tiktoken ranks, Hugging Face tokenizer.json (Llama 3, GPT-2) and
// SentencePiece tokenizer.model (Llama 2). LoadTokenizer (load_tokenizer.h)
// picks one for a model folder.
//
//   absl::StatusOr<std::unique_ptr<colossal::io::TextTokenizer>> tok =
//       colossal::io::LoadTokenizer("models/Meta-Llama-3-8B");   // a folder or a file
//   if (!tok.ok()) return tok.status();                         // names the file (and key)
//   absl::StatusOr<std::vector<int32_t>> ids = (*tok)->Encode("Hello", /*add_special_tokens=*/true);
//   // {128000, 9906}: BOS, then the text, as transformers' tokenizer("Hello")
//   std::vector<int32_t> doc;
//   (*tok)->EncodeOrdinaryTo("a document", &doc);               // text only: training data
//   absl::StatusOr<std::string> text = (*tok)->Decode(*ids);
//
// Contracts (every implementation):
//  * Encode(text, add_special_tokens) gives transformers' ids for
//    tokenizer(text, add_special_tokens=...): special token text in `text`
//    is recognized for tiktoken and tokenizer.json files; a SentencePiece
//    model encodes it as text (the library's behaviour; transformers'
//    LlamaTokenizer would match "<s>" and "</s>").
//  * EncodeOrdinaryTo appends the ids of the text alone: no BOS or EOS, and
//    special token text stays text (llm.c's data scripts: split_special_tokens).
//  * Decode(ids) is the text (tokenizer.json, tiktoken: the tokens' bytes,
//    special tokens as their text; SentencePiece: the library's decode, which
//    drops control tokens such as <s>). InvalidArgument for an unknown id.
//  * Thread-safe after loading: Encode and Decode may run on many threads.
#ifndef COLOSSAL_IO_TOKENIZER_TEXT_TOKENIZER_H_
#define COLOSSAL_IO_TOKENIZER_TEXT_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "io/tokenizer/hf_tokenizer_json.h"
#include "io/tokenizer/tokenizer.h"

namespace colossal::io {

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;

  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens) const = 0;
  virtual void EncodeOrdinaryTo(std::string_view text, std::vector<int32_t>* out) const = 0;
  std::vector<int32_t> EncodeOrdinary(std::string_view text) const;
  virtual absl::StatusOr<std::string> Decode(std::span<const int32_t> ids) const = 0;

  // One more than the largest id (128256 for Llama 3, 32000 for Llama 2, 50257 for GPT-2).
  virtual int32_t vocab_size() const = 0;
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  // Whether Encode(text, true) starts with the BOS.
  bool adds_bos() const { return adds_bos_; }
  // The token that starts each document in training data: the BOS when the
  // tokenizer adds one (Llama 2 and 3, as llm.c's Llama 3 shards), else the
  // EOS (GPT-2's <|endoftext|>, as llm.c's GPT-2 shards); nullopt if neither.
  std::optional<int32_t> document_delimiter() const { return adds_bos_ && bos_id_ ? bos_id_ : eos_id_; }
  // The id of the special token whose text is `text` ("<|eot_id|>"), or
  // nullopt: not one of its special tokens. A SentencePiece model has none
  // (its control tokens are never matched in text).
  virtual std::optional<int32_t> special_token_id(std::string_view text) const { return std::nullopt; }
  // "tiktoken", "encoder.json", "tokenizer.json" or "sentencepiece".
  virtual std::string_view kind() const = 0;
  // The file it was read from.
  const std::string& path() const { return path_; }

 protected:
  TextTokenizer(std::string path, std::optional<int32_t> bos, std::optional<int32_t> eos, bool adds_bos)
      : path_(std::move(path)), bos_id_(bos), eos_id_(eos), adds_bos_(adds_bos) {}

 private:
  std::string path_;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
  bool adds_bos_;
};

// Byte-level BPE (tokenizer.h) behind the interface: GPT-2's tiktoken ranks
// or a tokenizer.json.
class BpeTextTokenizer final : public TextTokenizer {
 public:
  // GPT-2: <|endoftext|> is the EOS; nothing is added. Its kind() is
  // "tiktoken", or "encoder.json" when read from OpenAI's encoder.json + vocab.bpe.
  static std::unique_ptr<BpeTextTokenizer> FromGpt2(Tokenizer tokenizer, std::string path,
                                                    bool from_encoder_json = false);
  // A tokenizer.json; `bos_token`/`eos_token` (tokenizer_config.json's, may
  // be empty) name those tokens. Without them the BOS is the post-processor's
  // first added token and the EOS the first of <|end_of_text|>,
  // <|endoftext|>, </s> that is a special token. InvalidArgument when a named
  // token is not a special token.
  static absl::StatusOr<std::unique_ptr<BpeTextTokenizer>> FromHfJson(HfTokenizerJson hf, std::string path,
                                                                      std::string_view bos_token,
                                                                      std::string_view eos_token);

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens) const override;
  void EncodeOrdinaryTo(std::string_view text, std::vector<int32_t>* out) const override;
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override { return tokenizer_.vocab_size(); }
  std::optional<int32_t> special_token_id(std::string_view text) const override {
    return tokenizer_.special_token_id(text);
  }
  std::string_view kind() const override { return kind_; }
  const Tokenizer& bpe() const { return tokenizer_; }

 private:
  BpeTextTokenizer(Tokenizer tokenizer, std::string path, std::string_view kind, std::vector<int32_t> prefix,
                   std::vector<int32_t> suffix, std::optional<int32_t> bos, std::optional<int32_t> eos);

  Tokenizer tokenizer_;
  std::string_view kind_;
  std::vector<int32_t> prefix_;
  std::vector<int32_t> suffix_;
};

// What tokenizer_config.json says (each empty/nullopt when absent); a
// missing file is all absent. InvalidArgument names the file and key.
struct TokenizerConfig {
  std::string bos_token;
  std::string eos_token;
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  // The Jinja chat template: a string, or the entry named "default" of a
  // list of {"name", "template"}; empty when absent.
  std::string chat_template;
};
absl::StatusOr<TokenizerConfig> ReadTokenizerConfig(const std::string& path);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_TOKENIZER_TEXT_TOKENIZER_H_
