// colossal::io — chat data for supervised fine-tuning: conversations in JSON
// Lines, rendered with a model family's chat template into token ids and a
// loss mask that counts the assistant's replies only.
//
//   absl::StatusOr<std::vector<colossal::io::ChatMessage>> conv = colossal::io::ParseConversation(line);
//   absl::StatusOr<colossal::io::ChatRenderer> chat =
//       colossal::io::ChatRenderer::Create(tokenizer, colossal::io::ChatTemplate::kLlama3);
//   std::vector<int32_t> ids;
//   std::vector<uint8_t> counted;  // 1: a target the loss counts
//   absl::Status s = chat->Render(*conv, &ids, &counted);
//
// A line is one conversation, in either of the two layouts fine-tuning sets
// come in:
//   {"messages": [{"role": "system", "content": "..."}, {"role": "user", ...}, {"role": "assistant", ...}]}
//     (OpenAI's and transformers' layout; Colossal-AI's SFT data also names the role "from")
//   {"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}]}   (ShareGPT)
// Roles are system, user and assistant (ShareGPT's human and gpt are user and
// assistant; its "system" too). Other keys of the line are ignored.
//
// Templates (what transformers' apply_chat_template(messages) gives with the
// model's own template; chat_test checks ids against it):
//   kLlama3   Llama 3's ("llama3"): <|begin_of_text|> once, then per message
//             <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>,
//             CONTENT with whitespace trimmed at both ends (as its template's
//             `| trim`).
//   kLlama31  Llama 3.1's and 3.2's ("llama3.1"): the same, but the first
//             message is always a system one that starts "Cutting Knowledge
//             Date: December 2023\nToday Date: 26 Jul 2024\n\n" (then the
//             conversation's system message, if it has one). 26 Jul 2024 is the
//             templates' own default date: transformers fills in today's for
//             3.2's, which would make data prepared on two days differ.
//   kChatMl   ChatML ("chatml"): per message <|im_start|>ROLE\nCONTENT<|im_end|>\n.
//   kQwen2    Qwen2's ("qwen2"): ChatML, with the system message "You are a
//             helpful assistant." first when the conversation has none.
//   kQwen25   Qwen2.5's ("qwen2.5"): ChatML, with "You are Qwen, created by
//             Alibaba Cloud. You are a helpful assistant." in that case.
// The loss counts the tokens of each assistant CONTENT and the end token after
// it (<|eot_id|>, <|im_end|>): the model learns to answer and to stop. Headers,
// system and user turns are context. Text between special tokens is tokenized
// as one piece, as transformers does; special-token text inside CONTENT stays
// text (EncodeOrdinary), so data cannot forge turns.
#ifndef COLOSSAL_IO_PREPARE_CHAT_H_
#define COLOSSAL_IO_PREPARE_CHAT_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/tokenizer/text_tokenizer.h"

namespace colossal::io {

enum class ChatTemplate { kLlama3, kLlama31, kChatMl, kQwen2, kQwen25 };

// "llama3", "llama3.1", "chatml", "qwen2", "qwen2.5"; FromName: nullopt for
// any other name. ChatTemplateNames: those, for messages ("llama3, ...").
const char* ChatTemplateName(ChatTemplate t);
std::optional<ChatTemplate> ChatTemplateFromName(std::string_view name);
std::string ChatTemplateNames();

// The template a model folder's tokenizer uses: its tokenizer_config.json's
// chat_template (or chat_template.jinja beside it) is recognized by its
// markers: <|start_header_id|> is Llama 3's (kLlama31 when it has "Cutting
// Knowledge Date"); <|im_start|> ChatML (kQwen25 or kQwen2 when it holds
// their default system message).
// `tokenizer_file` is the file the tokenizer was read from; the folder is its
// own. InvalidArgument naming the file when there is no template or it is
// neither (give one by name then).
absl::StatusOr<ChatTemplate> DetectChatTemplate(const std::string& tokenizer_file);

enum class ChatRole { kSystem, kUser, kAssistant };

struct ChatMessage {
  ChatRole role = ChatRole::kUser;
  std::string content;
};

// One JSON line as above. InvalidArgument naming the key ("messages[2].role:
// ...") for text that is not a JSON object, no or an empty message list, an
// unknown role, content that is not a string, or a conversation without an
// assistant message (nothing to train on). The caller adds file and line.
absl::StatusOr<std::vector<ChatMessage>> ParseConversation(std::string_view line);

class ChatRenderer {
 public:
  // InvalidArgument naming the tokenizer file and the token when it lacks a
  // special token the template needs (a Llama 2 SentencePiece model has none
  // of them), or, for Llama's, a BOS. The renderer keeps a pointer to
  // `tokenizer`, which must outlive it.
  static absl::StatusOr<ChatRenderer> Create(const TextTokenizer& tokenizer, ChatTemplate t);

  // Appends the conversation's ids to *ids and one 0/1 a token to *counted.
  void Render(std::span<const ChatMessage> conversation, std::vector<int32_t>* ids,
              std::vector<uint8_t>* counted) const;
  // Appends what a model continues with its reply: the conversation, then the
  // assistant's header (transformers' add_generation_prompt=True).
  void RenderPrompt(std::span<const ChatMessage> conversation, std::vector<int32_t>* ids) const;
  // The token that ends a message (<|eot_id|>, <|im_end|>): generation stops there.
  int32_t end_token() const { return end_; }

  ChatTemplate chat_template() const { return template_; }

 private:
  ChatRenderer(const TextTokenizer& tokenizer, ChatTemplate t) : tokenizer_(&tokenizer), template_(t) {}
  // Appends the text of `head` + `body` as one piece; counts body's tokens
  // when `count` (those past head's own tokens).
  void AppendText(std::string_view head, std::string_view body, bool count, std::vector<int32_t>* ids,
                  std::vector<uint8_t>* counted) const;

  const TextTokenizer* tokenizer_;
  ChatTemplate template_;
  int32_t bos_ = -1;
  int32_t begin_ = -1;    // <|start_header_id|> / <|im_start|>
  int32_t mid_ = -1;      // <|end_header_id|> (Llama's)
  int32_t end_ = -1;      // <|eot_id|> / <|im_end|>
  bool llama_ = false;    // Llama's headers, else ChatML
  std::string default_system_;  // ChatML: the system message when a conversation has none
};

}  // namespace colossal::io

#endif  // COLOSSAL_IO_PREPARE_CHAT_H_
