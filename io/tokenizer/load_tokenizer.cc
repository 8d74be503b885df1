#include "io/tokenizer/load_tokenizer.h"

#include <sys/stat.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "io/common/file_util.h"
#include "io/tokenizer/hf_tokenizer_json.h"
#include "io/tokenizer/sentencepiece_tokenizer.h"

namespace colossal::io {
namespace {

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string FolderOf(const std::string& file) {
  const size_t slash = file.rfind('/');
  return slash == std::string::npos ? "." : file.substr(0, slash);
}

std::string BaseName(const std::string& file) {
  const size_t slash = file.rfind('/');
  return slash == std::string::npos ? file : file.substr(slash + 1);
}

absl::StatusOr<std::unique_ptr<TextTokenizer>> LoadFile(const std::string& file) {
  if (absl::EndsWith(file, ".tiktoken")) {
    absl::StatusOr<Tokenizer> tok = Tokenizer::FromTiktokenFile(file);
    if (!tok.ok()) return tok.status();
    return std::unique_ptr<TextTokenizer>(BpeTextTokenizer::FromGpt2(*std::move(tok), file));
  }
  if (BaseName(file) == "encoder.json") {  // OpenAI's GPT-2 release: vocab.bpe beside it
    absl::StatusOr<Tokenizer> tok = Tokenizer::FromDataGymFiles(file, FolderOf(file) + "/vocab.bpe");
    if (!tok.ok()) return tok.status();
    return std::unique_ptr<TextTokenizer>(
        BpeTextTokenizer::FromGpt2(*std::move(tok), file, /*from_encoder_json=*/true));
  }
  const bool json = absl::EndsWith(file, ".json");
  if (!json && !absl::EndsWith(file, ".model")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer '", file,
        "': expected a model folder, a tokenizer.json, a tokenizer.model, an encoder.json (with vocab.bpe "
        "beside it) or a .tiktoken file"));
  }
  absl::StatusOr<TokenizerConfig> config = ReadTokenizerConfig(FolderOf(file) + "/tokenizer_config.json");
  if (!config.ok()) return config.status();
  if (!json) return LoadSentencePiece(file, *config);
  absl::StatusOr<HfTokenizerJson> hf = ReadHfTokenizerJson(file);
  if (!hf.ok()) return hf.status();
  absl::StatusOr<std::unique_ptr<BpeTextTokenizer>> tok =
      BpeTextTokenizer::FromHfJson(*std::move(hf), file, config->bos_token, config->eos_token);
  if (!tok.ok()) return tok.status();
  return std::unique_ptr<TextTokenizer>(*std::move(tok));
}

}  // namespace

std::vector<std::string> TokenizerFilesIn(const std::string& folder) {
  std::vector<std::string> files;
  for (const char* name :
       {"tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
        "chat_template.jinja"}) {
    std::string file = absl::StrCat(folder, "/", name);
    if (IsFile(file)) files.push_back(std::move(file));
  }
  return files;
}

std::optional<std::string> TokenizerFileIn(const std::string& folder) {
  for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
    std::string file = absl::StrCat(folder, "/", name);
    if (IsFile(file)) return file;
  }
  std::string encoder = absl::StrCat(folder, "/encoder.json");
  if (IsFile(encoder) && IsFile(absl::StrCat(folder, "/vocab.bpe"))) return encoder;
  return std::nullopt;
}

absl::StatusOr<std::unique_ptr<TextTokenizer>> LoadTokenizer(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "cannot open tokenizer", path);
  if (!S_ISDIR(st.st_mode)) return LoadFile(path);
  const std::string json = absl::StrCat(path, "/tokenizer.json");
  const std::string model = absl::StrCat(path, "/tokenizer.model");
  if (IsFile(json) && IsFile(model)) {
    // Llama 2's and Mistral's folders hold their SentencePiece model and
    // transformers' conversion of it, whose normalizer and byte fallback
    // tokenizer.json support here lacks: the original then serves.
    absl::StatusOr<std::unique_ptr<TextTokenizer>> tok = LoadFile(json);
    if (tok.ok() || !absl::IsInvalidArgument(tok.status())) return tok;
    absl::StatusOr<std::unique_ptr<TextTokenizer>> original = LoadFile(model);
    if (original.ok()) return original;
    return absl::InvalidArgumentError(absl::StrCat(tok.status().message(), "; and ",
                                                   original.status().message()));
  }
  if (std::optional<std::string> file = TokenizerFileIn(path)) return LoadFile(*file);
  return absl::NotFoundError(
      absl::StrCat("tokenizer folder '", path,
                   "' has no tokenizer.json, tokenizer.model, or encoder.json with vocab.bpe"));
}

}  // namespace colossal::io
