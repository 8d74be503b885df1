// colossal::io — SentencePiece models (Llama 2's tokenizer.model) through
// Debian's libsentencepiece (third_party/sentencepiece), behind TextTokenizer.
//
//   absl::StatusOr<std::unique_ptr<colossal::io::TextTokenizer>> tok =
//       colossal::io::LoadSentencePiece("Llama-2-7b-hf/tokenizer.model", {});
//   (*tok)->Encode("Hello", true);   // {1, 15043}: <s> then the library's ids
//
// The ids are the library's (SentencePieceProcessor::Encode); BOS/EOS are
// added as `config` says (add_bos_token defaults to true, add_eos_token to
// false, LlamaTokenizer's defaults). vocab_size is the model's piece count;
// bos/eos are the model's own <s>/</s> ids unless tokenizer_config.json names
// other pieces. Errors (InvalidArgument/NotFound) name the file.
#ifndef COLOSSAL_IO_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
#define COLOSSAL_IO_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "io/tokenizer/text_tokenizer.h"

namespace colossal::io {

absl::StatusOr<std::unique_ptr<TextTokenizer>> LoadSentencePiece(const std::string& path,
                                                                 const TokenizerConfig& config);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
