#include "io/tokenizer/text_tokenizer.h"

#include <sys/stat.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "io/common/absl_view.h"
#include "io/common/file_util.h"
#include "nlohmann/json.hpp"

namespace colossal::io {

std::vector<int32_t> TextTokenizer::EncodeOrdinary(std::string_view text) const {
  std::vector<int32_t> out;
  EncodeOrdinaryTo(text, &out);
  return out;
}

BpeTextTokenizer::BpeTextTokenizer(Tokenizer tokenizer, std::string path, std::string_view kind,
                                   std::vector<int32_t> prefix, std::vector<int32_t> suffix,
                                   std::optional<int32_t> bos, std::optional<int32_t> eos)
    : TextTokenizer(std::move(path), bos, eos, !prefix.empty() && bos && prefix.front() == *bos),
      tokenizer_(std::move(tokenizer)),
      kind_(kind),
      prefix_(std::move(prefix)),
      suffix_(std::move(suffix)) {}

std::unique_ptr<BpeTextTokenizer> BpeTextTokenizer::FromGpt2(Tokenizer tokenizer, std::string path,
                                                            bool from_encoder_json) {
  const std::optional<int32_t> eot = tokenizer.special_token_id(kEndOfText);
  return std::unique_ptr<BpeTextTokenizer>(
      new BpeTextTokenizer(std::move(tokenizer), std::move(path),
                           from_encoder_json ? "encoder.json" : "tiktoken", {}, {}, std::nullopt, eot));
}

absl::StatusOr<std::unique_ptr<BpeTextTokenizer>> BpeTextTokenizer::FromHfJson(HfTokenizerJson hf, std::string path,
                                                                                std::string_view bos_token,
                                                                                std::string_view eos_token) {
  const Tokenizer& tok = hf.tokenizer;
  auto named = [&](std::string_view token, const char* key) -> absl::StatusOr<std::optional<int32_t>> {
    if (token.empty()) return std::optional<int32_t>();
    if (std::optional<int32_t> id = tok.special_token_id(token)) return id;
    return absl::InvalidArgumentError(absl::StrCat(path, ": tokenizer_config.json's ", key, " \"", ToAbsl(token),
                                                   "\" is not among the added tokens of the tokenizer.json"));
  };
  absl::StatusOr<std::optional<int32_t>> bos = named(bos_token, "bos_token");
  if (!bos.ok()) return bos.status();
  absl::StatusOr<std::optional<int32_t>> eos = named(eos_token, "eos_token");
  if (!eos.ok()) return eos.status();
  if (!*bos && !hf.prefix_ids.empty()) *bos = hf.prefix_ids.front();
  for (const std::string_view name : {"<|end_of_text|>", "<|endoftext|>", "</s>"}) {
    if (!*eos) *eos = tok.special_token_id(name);
  }
  return std::unique_ptr<BpeTextTokenizer>(new BpeTextTokenizer(
      std::move(hf.tokenizer), std::move(path), "tokenizer.json", std::move(hf.prefix_ids), std::move(hf.suffix_ids),
      *bos, *eos));
}

absl::StatusOr<std::vector<int32_t>> BpeTextTokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  absl::StatusOr<std::vector<int32_t>> body = tokenizer_.Encode(text, SpecialTokens::kAllow);
  if (!body.ok() || !add_special_tokens || (prefix_.empty() && suffix_.empty())) return body;
  std::vector<int32_t> out = prefix_;
  out.insert(out.end(), body->begin(), body->end());
  out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

void BpeTextTokenizer::EncodeOrdinaryTo(std::string_view text, std::vector<int32_t>* out) const {
  tokenizer_.EncodeOrdinaryTo(text, out);
}

absl::StatusOr<std::string> BpeTextTokenizer::Decode(std::span<const int32_t> ids) const {
  return tokenizer_.Decode(ids);
}

absl::StatusOr<TokenizerConfig> ReadTokenizerConfig(const std::string& path) {
  TokenizerConfig config;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return config;
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object (a tokenizer_config.json)"));
  }
  // A token is a string or an AddedToken object {"content": ...}; null is absent.
  for (auto [key, out] : {std::pair<const char*, std::string*>{"bos_token", &config.bos_token},
                          std::pair<const char*, std::string*>{"eos_token", &config.eos_token}}) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (it->is_string()) {
      *out = it->get<std::string>();
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      *out = (*it)["content"].get<std::string>();
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", key, ": expected a string or {\"content\": string}"));
    }
  }
  for (auto [key, out] : {std::pair<const char*, std::optional<bool>*>{"add_bos_token", &config.add_bos_token},
                          std::pair<const char*, std::optional<bool>*>{"add_eos_token", &config.add_eos_token}}) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_boolean()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, ": expected true or false"));
    *out = it->get<bool>();
  }
  if (const auto it = j.find("chat_template"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      config.chat_template = it->get<std::string>();
    } else if (it->is_array()) {
      for (const nlohmann::json& entry : *it) {
        if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
            entry["template"].is_string()) {
          config.chat_template = entry["template"].get<std::string>();
        }
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": chat_template: expected a string or a list of {\"name\", \"template\"}"));
    }
  }
  return config;
}

}  // namespace colossal::io
