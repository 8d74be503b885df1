#include "io/prepare/chat.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "io/common/absl_view.h"
#include "io/common/file_util.h"
#include "nlohmann/json.hpp"

namespace colossal::io {
namespace {

absl::Status Invalid(std::string_view what) { return absl::InvalidArgumentError(ToAbsl(what)); }

// Jinja's `trim`: whitespace off both ends.
std::string_view Trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kSpace) - first + 1);
}

const char* RoleName(ChatRole role) {
  switch (role) {
    case ChatRole::kSystem: return "system";
    case ChatRole::kUser: return "user";
    case ChatRole::kAssistant: return "assistant";
  }
  return "?";
}

std::optional<ChatRole> RoleFromName(std::string_view name) {
  if (name == "system") return ChatRole::kSystem;
  if (name == "user" || name == "human") return ChatRole::kUser;
  if (name == "assistant" || name == "gpt") return ChatRole::kAssistant;
  return std::nullopt;
}

// The value of the first of `keys` that `message` has, or nullptr.
const nlohmann::json* Field(const nlohmann::json& message, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    if (const auto it = message.find(k); it != message.end()) return &*it;
  }
  return nullptr;
}

}  // namespace

namespace {

constexpr std::pair<ChatTemplate, const char*> kTemplateNames[] = {
    {ChatTemplate::kLlama3, "llama3"}, {ChatTemplate::kLlama31, "llama3.1"}, {ChatTemplate::kChatMl, "chatml"},
    {ChatTemplate::kQwen2, "qwen2"},   {ChatTemplate::kQwen25, "qwen2.5"}};

constexpr char kLlama31System[] = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
constexpr char kQwen2System[] = "You are a helpful assistant.";
constexpr char kQwen25System[] = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

}  // namespace

const char* ChatTemplateName(ChatTemplate t) {
  for (const auto& [kind, name] : kTemplateNames) {
    if (kind == t) return name;
  }
  return "?";
}

std::optional<ChatTemplate> ChatTemplateFromName(std::string_view name) {
  for (const auto& [kind, n] : kTemplateNames) {
    if (name == n) return kind;
  }
  return std::nullopt;
}

std::string ChatTemplateNames() {
  std::string out;
  for (const auto& [kind, name] : kTemplateNames) absl::StrAppend(&out, out.empty() ? "" : ", ", name);
  return out;
}

absl::StatusOr<ChatTemplate> DetectChatTemplate(const std::string& tokenizer_file) {
  const size_t slash = tokenizer_file.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : tokenizer_file.substr(0, slash);
  const std::string config_path = dir + "/tokenizer_config.json";
  absl::StatusOr<TokenizerConfig> config = ReadTokenizerConfig(config_path);
  if (!config.ok()) return config.status();
  std::string text = config->chat_template, from = config_path;
  if (text.empty()) {
    // transformers 4.43 and later save the template in a file of its own.
    const std::string jinja = dir + "/chat_template.jinja";
    if (!NoSuchPath(jinja)) {
      absl::StatusOr<std::string> read = ReadFileToString(jinja);
      if (!read.ok()) return read.status();
      text = *std::move(read);
      from = jinja;
    }
  }
  const std::string choose = absl::StrCat("; name the template instead (", ChatTemplateNames(), ")");
  if (text.empty()) {
    return Invalid(absl::StrCat("the tokenizer's folder ", dir, " has no chat template (tokenizer_config.json's ",
                                "chat_template, or chat_template.jinja)", choose));
  }
  if (absl::StrContains(text, "<|start_header_id|>")) {
    return absl::StrContains(text, "Cutting Knowledge Date") ? ChatTemplate::kLlama31 : ChatTemplate::kLlama3;
  }
  if (absl::StrContains(text, "<|im_start|>")) {
    if (absl::StrContains(text, kQwen25System)) return ChatTemplate::kQwen25;
    if (absl::StrContains(text, kQwen2System)) return ChatTemplate::kQwen2;
    return ChatTemplate::kChatMl;
  }
  return Invalid(absl::StrCat(from, ": the chat template is neither Llama 3's (<|start_header_id|>) nor ChatML ",
                              "(<|im_start|>), the families colossal renders", choose));
}

absl::StatusOr<std::vector<ChatMessage>> ParseConversation(std::string_view line) {
  constexpr char kLayout[] = "one conversation a line: {\"messages\": [{\"role\": ..., \"content\": ...}]}";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line.begin(), line.end());
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann's message says where (the byte) and what (bad UTF-8 too).
    return Invalid(absl::StrCat("not JSON (", e.what(), "; ", kLayout, ")"));
  }
  if (!j.is_object()) return Invalid(absl::StrCat("not a JSON object (", kLayout, ")"));
  const char* list_key = j.contains("messages") ? "messages" : "conversations";
  const auto list = j.find(list_key);
  if (list == j.end()) return Invalid("no \"messages\" (or ShareGPT's \"conversations\") list");
  if (!list->is_array() || list->empty()) return Invalid(absl::StrCat(list_key, ": expected a non-empty list"));
  std::vector<ChatMessage> messages;
  bool answered = false;
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& m = (*list)[i];
    const std::string at = absl::StrCat(list_key, "[", i, "]");
    if (!m.is_object()) return Invalid(absl::StrCat(at, ": expected an object with a role and a content"));
    const nlohmann::json* role = Field(m, {"role", "from"});
    const nlohmann::json* content = Field(m, {"content", "value"});
    if (role == nullptr || !role->is_string()) {
      return Invalid(absl::StrCat(at, ".role: ", role == nullptr ? "missing" : "not a string",
                                  " (\"role\", or \"from\": system, user, assistant)"));
    }
    const std::optional<ChatRole> r = RoleFromName(role->get<std::string>());
    if (!r) {
      return Invalid(absl::StrCat(at, ".role: unknown role \"", role->get<std::string>(),
                                  "\" (system, user, assistant; ShareGPT's human and gpt)"));
    }
    if (content == nullptr || !content->is_string()) {
      return Invalid(absl::StrCat(at, ".content: ", content == nullptr ? "missing" : "not a string",
                                  " (\"content\", or \"value\")"));
    }
    answered = answered || *r == ChatRole::kAssistant;
    messages.push_back({*r, content->get<std::string>()});
  }
  if (!answered) return Invalid(absl::StrCat(list_key, ": no assistant message (nothing to train on)"));
  return messages;
}

absl::StatusOr<ChatRenderer> ChatRenderer::Create(const TextTokenizer& tokenizer, ChatTemplate t) {
  ChatRenderer r(tokenizer, t);
  const bool llama3 = t == ChatTemplate::kLlama3 || t == ChatTemplate::kLlama31;
  r.llama_ = llama3;
  if (t == ChatTemplate::kQwen2) r.default_system_ = kQwen2System;
  if (t == ChatTemplate::kQwen25) r.default_system_ = kQwen25System;
  std::vector<std::pair<const char*, int32_t*>> needed = {
      {llama3 ? "<|start_header_id|>" : "<|im_start|>", &r.begin_},
      {llama3 ? "<|eot_id|>" : "<|im_end|>", &r.end_}};
  if (llama3) needed.push_back({"<|end_header_id|>", &r.mid_});
  for (auto [text, id] : needed) {
    const std::optional<int32_t> found = tokenizer.special_token_id(text);
    if (!found) {
      return Invalid(absl::StrCat("tokenizer '", tokenizer.path(), "' has no special token ", text, " that the ",
                                  ChatTemplateName(t), " chat template needs"));
    }
    *id = *found;
  }
  if (llama3) {
    if (!tokenizer.bos_id()) {
      return Invalid(absl::StrCat("tokenizer '", tokenizer.path(), "' has no BOS for the ", ChatTemplateName(t),
                                  " chat template"));
    }
    r.bos_ = *tokenizer.bos_id();
  }
  return r;
}

void ChatRenderer::AppendText(std::string_view head, std::string_view body, bool count, std::vector<int32_t>* ids,
                              std::vector<uint8_t>* counted) const {
  const size_t start = ids->size();
  tokenizer_->EncodeOrdinaryTo(absl::StrCat(ToAbsl(head), ToAbsl(body)), ids);
  size_t uncounted = ids->size() - start;
  if (count) {
    // The head's own tokens start the piece unless the tokenizer merged across
    // the seam (no Llama 3 or Qwen2 pattern does: a newline ends a pre-token);
    // then the whole piece counts rather than losing the reply's first token.
    const std::vector<int32_t> head_ids = tokenizer_->EncodeOrdinary(head);
    const bool prefix = head_ids.size() <= ids->size() - start &&
                        std::equal(head_ids.begin(), head_ids.end(), ids->begin() + static_cast<ptrdiff_t>(start));
    uncounted = prefix ? head_ids.size() : 0;
  }
  counted->insert(counted->end(), uncounted, 0);
  counted->insert(counted->end(), ids->size() - start - uncounted, 1);
}

void ChatRenderer::Render(std::span<const ChatMessage> conversation, std::vector<int32_t>* ids,
                          std::vector<uint8_t>* counted) const {
  auto special = [&](int32_t id, bool count) {
    ids->push_back(id);
    counted->push_back(count ? 1 : 0);
  };
  // Llama's templates trim the content; the dated system text is already.
  auto message = [&](ChatRole role, std::string_view content, bool trim = true) {
    const bool answer = role == ChatRole::kAssistant;
    special(begin_, false);
    if (llama_) {
      AppendText("", RoleName(role), false, ids, counted);
      special(mid_, false);
      AppendText("\n\n", trim ? Trim(content) : content, answer, ids, counted);
    } else {
      AppendText(absl::StrCat(RoleName(role), "\n"), content, answer, ids, counted);
    }
    special(end_, answer);
    if (!llama_) AppendText("", "\n", false, ids, counted);
  };
  if (llama_) special(bos_, false);
  const bool has_system = !conversation.empty() && conversation[0].role == ChatRole::kSystem;
  if (template_ == ChatTemplate::kLlama31) {
    // The dated system message, with the conversation's own after the date.
    message(ChatRole::kSystem,
            absl::StrCat(kLlama31System, ToAbsl(has_system ? Trim(conversation[0].content) : std::string_view())),
            /*trim=*/false);
    if (has_system) conversation = conversation.subspan(1);
  } else if (!default_system_.empty() && !has_system) {
    message(ChatRole::kSystem, default_system_);
  }
  for (const ChatMessage& m : conversation) message(m.role, m.content);
}

void ChatRenderer::RenderPrompt(std::span<const ChatMessage> conversation, std::vector<int32_t>* ids) const {
  std::vector<uint8_t> counted;
  Render(conversation, ids, &counted);
  ids->push_back(begin_);
  if (llama_) {
    tokenizer_->EncodeOrdinaryTo("assistant", ids);
    ids->push_back(mid_);
    tokenizer_->EncodeOrdinaryTo("\n\n", ids);
  } else {
    tokenizer_->EncodeOrdinaryTo("assistant\n", ids);
  }
}

}  // namespace colossal::io
