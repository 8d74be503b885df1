// colossal::io — the tokenizer of a Hugging Face model folder (or one file),
// behind TextTokenizer (text_tokenizer.h).
//
//   absl::StatusOr<std::unique_ptr<colossal::io::TextTokenizer>> tok =
//       colossal::io::LoadTokenizer("models/Meta-Llama-3-8B");
//   if (!tok.ok()) return tok.status();
//   (*tok)->kind();   // "tokenizer.json"
//
// LoadTokenizer(path):
//  * a folder (a Hugging Face model folder): its tokenizer.json if there is
//    one (preferred, as transformers' fast tokenizers), else its
//    tokenizer.model, else OpenAI's GPT-2 files encoder.json + vocab.bpe;
//    with both of the first two, a tokenizer.json this reader refuses (a
//    SentencePiece model's conversion, as Llama 2 and Mistral ship beside
//    their tokenizer.model: a normalizer, byte fallback) gives way to the
//    tokenizer.model;
//    tokenizer_config.json beside them, when present, names
//    bos_token/eos_token and, for tokenizer.model only, add_bos_token
//    (default true) and add_eos_token (default false), as Llama 2's
//    LlamaTokenizer has them. For tokenizer.json the file's post-processor
//    decides what is added (hf_tokenizer_json.h), as transformers does for
//    Llama 3.
//  * a file: *.json is a tokenizer.json, *.model a SentencePiece model (each
//    with the tokenizer_config.json of its folder), *.tiktoken GPT-2's ranks
//    and encoder.json OpenAI's GPT-2 vocabulary with the vocab.bpe beside it
//    (tokenizer.h; for both, <|endoftext|> = 50256 is EOS, no BOS).
// Errors name the path: NotFound for a folder with none of these,
// InvalidArgument for a bad file (with its JSON key).
//
#ifndef COLOSSAL_IO_TOKENIZER_LOAD_TOKENIZER_H_
#define COLOSSAL_IO_TOKENIZER_LOAD_TOKENIZER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "io/tokenizer/text_tokenizer.h"

namespace colossal::io {

absl::StatusOr<std::unique_ptr<TextTokenizer>> LoadTokenizer(const std::string& path);

// The files of a model folder's tokenizer that are there, as paths:
// tokenizer.json, tokenizer.model, tokenizer_config.json,
// special_tokens_map.json, chat_template.jinja (what a checkpoint copies so that its step
// directory carries the tokenizer its model was trained with).
std::vector<std::string> TokenizerFilesIn(const std::string& folder);

// The file LoadTokenizer(folder) reads in a model folder: folder/tokenizer.json,
// else folder/tokenizer.model, else folder/encoder.json when vocab.bpe is
// beside it; nullopt when none is (or `folder` is not a folder). Callers use it to prefer a model folder's own tokenizer.
std::optional<std::string> TokenizerFileIn(const std::string& folder);

}  // namespace colossal::io

#endif  // COLOSSAL_IO_TOKENIZER_LOAD_TOKENIZER_H_
