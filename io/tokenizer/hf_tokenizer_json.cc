#include "io/tokenizer/hf_tokenizer_json.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "io/common/absl_view.h"
#include "io/common/file_util.h"
#include "io/tokenizer/vocab_files.h"
#include "nlohmann/json.hpp"

namespace colossal::io {
namespace {

using Json = nlohmann::json;

// Builds "<source>: <key>: <what>" errors.
class Errors {
 public:
  explicit Errors(std::string_view source) : source_(source) {}
  template <typename... Parts>
  absl::Status operator()(std::string_view key, const Parts&... parts) const {
    return absl::InvalidArgumentError(absl::StrCat(ToAbsl(source_), ": ", ToAbsl(key), ": ", parts...));
  }

 private:
  std::string_view source_;
};

// A short, printable form of a JSON value for messages.
std::string Show(const Json& j) {
  if (j.is_object()) return "an object";
  if (j.is_array()) return "an array";
  std::string text = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

// The "type" of a component object, or "" when it has none.
std::string TypeOf(const Json& j) {
  const auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

bool IsNullOr(const Json& j, const char* key, const Json& fine) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() || *it == fine;
}

// A boolean member, `fallback` when absent or null.
absl::StatusOr<bool> Bool(const Json& j, const char* key, bool fallback, std::string_view path, const Errors& err) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return err(absl::StrCat(ToAbsl(path), ".", key), "expected true or false, got ", Show(*it));
  return it->get<bool>();
}

// A ByteLevel pre-tokenizer: add_prefix_space must be false; returns use_regex.
absl::StatusOr<bool> ByteLevelUsesRegex(const Json& j, std::string_view path, const Errors& err) {
  absl::StatusOr<bool> prefix = Bool(j, "add_prefix_space", true, path, err);
  if (!prefix.ok()) return prefix.status();
  if (*prefix) {
    return err(absl::StrCat(ToAbsl(path), ".add_prefix_space"),
               "true is not supported (a space before the text changes the ids; GPT-2 and Llama 3 use false)");
  }
  return Bool(j, "use_regex", true, path, err);
}

absl::StatusOr<Pretokenizer> ReadPretokenizer(const Json& root, const Errors& err) {
  const auto it = root.find("pre_tokenizer");
  const char* kKnown = "; supported: ByteLevel (GPT-2's pattern), or a Sequence of Split (GPT-2's, Llama 3's or "
                       "Qwen2's pattern, behavior Isolated) and ByteLevel without regex";
  if (it == root.end() || it->is_null()) return err("pre_tokenizer", "missing", kKnown);
  const Json& pre = *it;
  const std::string type = TypeOf(pre);
  if (type == "ByteLevel") {
    absl::StatusOr<bool> regex = ByteLevelUsesRegex(pre, "pre_tokenizer", err);
    if (!regex.ok()) return regex.status();
    if (!*regex) return err("pre_tokenizer.use_regex", "false with no Split before it is not supported", kKnown);
    return Pretokenizer::kGpt2;
  }
  if (type != "Sequence") return err("pre_tokenizer.type", "\"", type, "\" is not supported", kKnown);
  const auto list = pre.find("pretokenizers");
  if (list == pre.end() || !list->is_array() || list->size() != 2) {
    return err("pre_tokenizer.pretokenizers", "expected [Split, ByteLevel]", kKnown);
  }
  const Json& split = (*list)[0];
  const Json& bytes = (*list)[1];
  if (TypeOf(split) != "Split") {
    return err("pre_tokenizer.pretokenizers[0].type", "\"", TypeOf(split), "\" is not supported", kKnown);
  }
  const auto pattern = split.find("pattern");
  if (pattern == split.end() || !pattern->is_object() || !pattern->contains("Regex") ||
      !(*pattern)["Regex"].is_string()) {
    return err("pre_tokenizer.pretokenizers[0].pattern", "expected {\"Regex\": \"...\"}", kKnown);
  }
  const std::string regex = (*pattern)["Regex"].get<std::string>();
  Pretokenizer result;
  if (regex == kLlama3Pattern) {
    result = Pretokenizer::kLlama3;
  } else if (regex == kQwen2Pattern) {
    result = Pretokenizer::kQwen2;
  } else if (regex == kGpt2Pattern) {
    result = Pretokenizer::kGpt2;
  } else {
    return err("pre_tokenizer.pretokenizers[0].pattern.Regex", "pattern \"", absl::CEscape(regex),
               "\" is not supported", kKnown);
  }
  if (!IsNullOr(split, "behavior", "Isolated")) {
    return err("pre_tokenizer.pretokenizers[0].behavior", Show(split["behavior"]), " is not supported (Isolated only)");
  }
  if (!IsNullOr(split, "invert", false)) return err("pre_tokenizer.pretokenizers[0].invert", "true is not supported");
  if (TypeOf(bytes) != "ByteLevel") {
    return err("pre_tokenizer.pretokenizers[1].type", "\"", TypeOf(bytes), "\" is not supported", kKnown);
  }
  absl::StatusOr<bool> regex_too = ByteLevelUsesRegex(bytes, "pre_tokenizer.pretokenizers[1]", err);
  if (!regex_too.ok()) return regex_too.status();
  if (*regex_too) {
    return err("pre_tokenizer.pretokenizers[1].use_regex", "true after a Split is not supported", kKnown);
  }
  return result;
}

// One processor of post_processor: adds its template's special tokens.
absl::Status ReadProcessor(const Json& p, std::string_view path, const Errors& err, HfTokenizerJson* out) {
  const std::string type = TypeOf(p);
  if (type == "ByteLevel") return absl::OkStatus();  // offsets only
  if (type != "TemplateProcessing") {
    return err(absl::StrCat(ToAbsl(path), ".type"), "\"", type,
               "\" is not supported (TemplateProcessing, ByteLevel or a Sequence of them)");
  }
  const auto single = p.find("single");
  if (single == p.end() || !single->is_array()) return err(absl::StrCat(ToAbsl(path), ".single"), "expected a list");
  bool seen_text = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const Json& item = (*single)[i];
    const std::string key = absl::StrCat(ToAbsl(path), ".single[", i, "]");
    if (item.contains("Sequence")) {
      if (seen_text) return err(key, "a second sequence in the single template");
      seen_text = true;
      continue;
    }
    const auto special = item.find("SpecialToken");
    if (special == item.end() || !special->contains("id") || !(*special)["id"].is_string()) {
      return err(key, "expected {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}");
    }
    const std::string name = (*special)["id"].get<std::string>();
    const Json* ids = nullptr;
    if (const auto specials = p.find("special_tokens"); specials != p.end() && specials->contains(name)) {
      if (const auto found = (*specials)[name].find("ids"); found != (*specials)[name].end()) ids = &*found;
    }
    if (ids == nullptr || !ids->is_array()) {
      return err(absl::StrCat(ToAbsl(path), ".special_tokens"), "no ids for \"", name, "\", which ", key, " uses");
    }
    for (const Json& id : *ids) {
      if (!id.is_number_integer()) {
        return err(absl::StrCat(ToAbsl(path), ".special_tokens.", name, ".ids"), "expected integers, got ", Show(id));
      }
      (seen_text ? out->suffix_ids : out->prefix_ids).push_back(id.get<int32_t>());
    }
  }
  if (!seen_text) return err(absl::StrCat(ToAbsl(path), ".single"), "has no sequence ($A)");
  return absl::OkStatus();
}

absl::Status ReadPostProcessor(const Json& root, const Errors& err, HfTokenizerJson* out) {
  const auto it = root.find("post_processor");
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  if (TypeOf(*it) != "Sequence") return ReadProcessor(*it, "post_processor", err, out);
  const auto list = it->find("processors");
  if (list == it->end() || !list->is_array()) return err("post_processor.processors", "expected a list");
  for (size_t i = 0; i < list->size(); ++i) {
    if (absl::Status s = ReadProcessor((*list)[i], absl::StrCat("post_processor.processors[", i, "]"), err, out);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// The normalizer: none, NFC, or a Sequence of at most one NFC.
absl::StatusOr<Normalizer> ReadNormalizer(const Json& root, const Errors& err) {
  const auto it = root.find("normalizer");
  if (it == root.end() || it->is_null()) return Normalizer::kNone;
  const Json* one = &*it;
  std::string key = "normalizer";
  if (TypeOf(*it) == "Sequence") {
    const auto list = it->find("normalizers");
    if (list == it->end() || !list->is_array() || list->size() > 1) {
      return err("normalizer.normalizers", "expected a list of at most one normalizer (NFC)");
    }
    if (list->empty()) return Normalizer::kNone;
    one = &(*list)[0];
    key = "normalizer.normalizers[0]";
  }
  if (TypeOf(*one) == "NFC") return Normalizer::kNfc;
  return err(key + ".type", "\"", TypeOf(*one),
             "\" is not supported (byte-level BPE tokenizers with no normalizer, or NFC as Qwen2's)");
}

absl::Status CheckDecoder(const Json& root, const Errors& err) {
  if (const auto it = root.find("decoder"); it != root.end() && !it->is_null() && TypeOf(*it) != "ByteLevel") {
    return err("decoder.type", "\"", TypeOf(*it), "\" is not supported (ByteLevel only)");
  }
  return absl::OkStatus();
}

// model.vocab and model.merges -> BpeMerges (token bytes, not GPT-2's byte encoding).
absl::Status ReadModel(const Json& root, const Errors& err, BpeMerges* merges, bool* ignore_merges) {
  const auto it = root.find("model");
  if (it == root.end() || !it->is_object()) return err("model", "missing or not an object");
  const Json& model = *it;
  const std::string type = TypeOf(model);
  if (type != "BPE" && !(type.empty() && model.contains("merges"))) {
    return err("model.type", "\"", type, "\" is not supported (BPE only; WordPiece, Unigram and WordLevel are not)");
  }
  if (!IsNullOr(model, "dropout", Json())) return err("model.dropout", Show(model["dropout"]), " is not supported");
  if (!IsNullOr(model, "byte_fallback", false)) {
    return err("model.byte_fallback", "true is not supported (byte-level BPE needs no fallback)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!IsNullOr(model, key, "")) return err(absl::StrCat("model.", key), Show(model[key]), " is not supported");
  }
  absl::StatusOr<bool> ignore = Bool(model, "ignore_merges", false, "model", err);
  if (!ignore.ok()) return ignore.status();
  *ignore_merges = *ignore;

  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) return err("model.vocab", "missing or not an object");
  merges->tokens.reserve(vocab->size());
  for (const auto& [text, id] : vocab->items()) {
    const std::string key = absl::StrCat("model.vocab[\"", absl::CEscape(text), "\"]");
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxBpeRank) {
      return err(key, "id ", Show(id), " is not an integer in [0, ", kMaxBpeRank, "]");
    }
    absl::StatusOr<std::string> bytes = Gpt2ByteDecode(text);
    if (!bytes.ok()) return err(key, "not a byte-level token: ", bytes.status().message());
    const auto [at, inserted] = merges->tokens.emplace(*std::move(bytes), id.get<int32_t>());
    if (!inserted) return err(key, "the same bytes as the token with id ", at->second);
  }

  const auto list = model.find("merges");
  if (list == model.end() || !list->is_array()) return err("model.merges", "missing or not a list");
  merges->pairs.reserve(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    const Json& m = (*list)[i];
    const std::string key = absl::StrCat("model.merges[", i, "]");
    std::string left, right;
    if (m.is_string()) {
      const std::string text = m.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        return err(key, "\"", absl::CEscape(text), "\" is not two tokens separated by one space");
      }
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return err(key, "expected \"left right\" or [\"left\", \"right\"], got ", Show(m));
    }
    int32_t ids[2];
    std::string joined;
    for (int side = 0; side < 2; ++side) {
      const std::string& token = side == 0 ? left : right;
      absl::StatusOr<std::string> bytes = Gpt2ByteDecode(token);
      const auto found = bytes.ok() ? merges->tokens.find(*bytes) : merges->tokens.end();
      if (found == merges->tokens.end()) {
        return err(key, "\"", absl::CEscape(token), "\" is not in model.vocab");
      }
      ids[side] = found->second;
      joined += *bytes;
    }
    if (!merges->tokens.contains(joined)) {
      return err(key, "the merged token \"", absl::CEscape(left + right), "\" is not in model.vocab");
    }
    // The first listing of a pair wins, as in tokenizers.
    merges->pairs.emplace(BpeMerges::PairKey(ids[0], ids[1]), static_cast<int32_t>(i));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<std::string, int32_t>>> ReadAddedTokens(const Json& root, const Errors& err) {
  std::vector<std::pair<std::string, int32_t>> out;
  const auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return out;
  if (!it->is_array()) return err("added_tokens", "expected a list");
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& t = (*it)[i];
    const std::string key = absl::StrCat("added_tokens[", i, "]");
    if (!t.is_object() || !t.contains("content") || !t["content"].is_string() || !t.contains("id") ||
        !t["id"].is_number_integer()) {
      return err(key, "expected {\"id\": integer, \"content\": string, ...}");
    }
    for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
      if (!IsNullOr(t, flag, false)) {
        return err(absl::StrCat(key, ".", flag), "true is not supported (token \"", t["content"].get<std::string>(),
                   "\")");
      }
    }
    out.emplace_back(t["content"].get<std::string>(), t["id"].get<int32_t>());
  }
  return out;
}

}  // namespace

absl::StatusOr<HfTokenizerJson> ParseHfTokenizerJson(std::string_view contents, std::string_view source,
                                                     size_t cache_entries) {
  const Errors err(source);
  Json root = Json::parse(contents.begin(), contents.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(ToAbsl(source), ": not a JSON object (a tokenizer.json)"));
  }
  absl::StatusOr<Normalizer> normalizer = ReadNormalizer(root, err);
  if (!normalizer.ok()) return normalizer.status();
  if (absl::Status s = CheckDecoder(root, err); !s.ok()) return s;
  absl::StatusOr<Pretokenizer> pretokenizer = ReadPretokenizer(root, err);
  if (!pretokenizer.ok()) return pretokenizer.status();
  BpeMerges merges;
  bool ignore_merges = false;
  if (absl::Status s = ReadModel(root, err, &merges, &ignore_merges); !s.ok()) return s;
  absl::StatusOr<std::vector<std::pair<std::string, int32_t>>> added = ReadAddedTokens(root, err);
  if (!added.ok()) return added.status();

  TokenizerOptions options;
  options.special_tokens = *std::move(added);
  options.pretokenizer = *pretokenizer;
  options.normalizer = *normalizer;
  options.whole_piece_lookup = ignore_merges;
  options.cache_entries = cache_entries;
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::FromMerges(std::move(merges), source, std::move(options));
  if (!tokenizer.ok()) return tokenizer.status();
  HfTokenizerJson out{*std::move(tokenizer), {}, {}, *pretokenizer};
  if (absl::Status s = ReadPostProcessor(root, err, &out); !s.ok()) return s;
  for (const std::vector<int32_t>* ids : {&out.prefix_ids, &out.suffix_ids}) {
    for (const int32_t id : *ids) {
      if (!out.tokenizer.TokenBytes(id)) return err("post_processor", "special token id ", id, " is no token");
    }
  }
  return out;
}

absl::StatusOr<HfTokenizerJson> ReadHfTokenizerJson(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFileToString(path);
  if (!contents.ok()) return contents.status();
  return ParseHfTokenizerJson(*contents, path);
}

}  // namespace colossal::io
