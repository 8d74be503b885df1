// `colossal generate`: text from a GPT-2 or Llama checkpoint, on the CPU.
//
// Resolves the checkpoint (a step directory, or a root whose `latest` names
// one), reads its config.json, builds the model in float32 on the CPU, loads
// the weights and encodes the prompt with --tokenizer, else the checkpoint
// folder's own tokenizer, else GPT-2's (load_tokenizer.h). Then, token by
// token, it runs the full forward over the last min(len, n_positions) tokens
// (no KV cache), takes the logits of the last position over the real
// vocabulary (the padded columns >= vocab_size are ignored) and picks the
// next token: greedily for --temperature 0, else by sampling softmax(logits /
// T) restricted to the top-k logits with a uniform from the Philox stream of
// --seed (stream element i for the i-th new token, kernels/random/philox.h),
// so the same flags give the same text. The prompt and then each new token's
// bytes go to stdout as they are produced; it stops at <|endoftext|> (not
// printed) or after --max_new_tokens tokens. With --chat the prompt is a user
// message: it is rendered with the tokenizer folder's chat template (or
// --chat_template's; io/prepare/chat.h) and the assistant's header, only the
// reply is printed, and generation stops at the end of the message.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <span>
#include <string_view>
#include <vector>
#include <sys/stat.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "io/checkpoint/checkpoint.h"
#include "io/common/file_util.h"
#include "nn/train/checkpoint.h"
#include "io/tokenizer/load_tokenizer.h"
#include "io/prepare/chat.h"
#include "io/tokenizer/text_tokenizer.h"
#include "core/ops/elementwise.h"
#include "lua/api/generation.h"
#include "lua/cli/commands.h"
#include "lua/cli/flags.h"
#include "nn/models/causal_lm/hugging_face.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/models/llama/llama.h"
#include "nn/models/registry/registry.h"

namespace colossal::lua::cli {
namespace {

constexpr FlagSpec kGenerateFlags[] = {
    {"--checkpoint", FlagKind::kValue, "DIR", "a step directory, or a root with a `latest` file"},
    {"--prompt", FlagKind::kValue, "TEXT", "the text to continue (required, not empty)"},
    {"--max_new_tokens", FlagKind::kValue, "N", "at most N new tokens (64)"},
    {"--temperature", FlagKind::kValue, "T", "softmax temperature; 0: greedy (1.0)"},
    {"--top_k", FlagKind::kValue, "K", "sample among the K likeliest tokens; 0: all (50)"},
    {"--seed", FlagKind::kValue, "S", "Philox seed of the sampling (1337)"},
    {"--tokenizer", FlagKind::kValue, "FILE|DIR",
     "gpt2.tiktoken, tokenizer.json, tokenizer.model, encoder.json (vocab.bpe beside it) or a "
     "folder holding one (the checkpoint's own, else $COLOSSAL_DATA/gpt2.tiktoken)"},
    {"--chat", FlagKind::kBool, "", "TEXT is a user message: answer it with the tokenizer's chat template"},
    {"--chat_template", FlagKind::kValue, "NAME",
     "the chat template: llama3, llama3.1, chatml, qwen2, qwen2.5 (implies --chat; default: the "
     "tokenizer folder's)"},
    {"--system", FlagKind::kValue, "TEXT", "a system message before the user's (with --chat)"},
};

std::string GenerateUsage() {
  return absl::StrCat(
      "usage: colossal generate --checkpoint DIR --prompt TEXT [options]\n\n"
      "Continues TEXT with the model of a checkpoint (GPT-2 or Llama: a step directory\n"
      "or a Hugging Face model folder), on the CPU (float32), printing the prompt and\n"
      "each new token to stdout as it is produced. It stops at the tokenizer's end of\n"
      "text or after --max_new_tokens tokens. With --chat, TEXT is a user message\n"
      "rendered with the model's chat template (Llama 3's, Qwen2's, ...) and the reply alone\n"
      "is printed, ending at the end of the message. The same flags give the same\n"
      "text. Exit codes: 0 ok, 1 runtime failure (checkpoint, tokenizer, model),\n"
      "2 usage error.\n\n",
      FlagHelp(kGenerateFlags));
}

void Emit(std::string_view bytes) {
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  std::fflush(stdout);
}

// One line on the model for stderr: family and sizes.
std::string Describe(const nn::CausalLM& model) {
  if (const auto* g = dynamic_cast<const nn::GPT2*>(&model)) {
    const nn::GPT2Config& c = g->config();
    return absl::StrCat("GPT-2 ", c.n_layer, " layers, ", c.n_head, " heads, n_embd ", c.n_embd,
                        ", vocab ", c.vocab_size, ", context ", c.max_seq_len);
  }
  if (const auto* l = dynamic_cast<const nn::Llama*>(&model)) {
    const nn::LlamaConfig& c = l->config();
    return absl::StrCat("Llama ", c.num_hidden_layers, " layers, ", c.num_attention_heads,
                        " heads (", c.kv_heads(), " key-value), hidden ", c.hidden_size, ", vocab ",
                        c.vocab_size, ", context ", c.max_position_embeddings,
                        c.num_local_experts > 0 ? absl::StrCat(", ", c.num_local_experts, " experts (",
                                                               c.num_experts_per_tok, " per token)")
                                                : std::string());
  }
  return model.describe();
}

// The generation itself; errors are runtime failures (exit code 1).
// `default_tokenizer`: tokenizer_path is GPT-2's, taken because neither
// --tokenizer nor the checkpoint folder named one.
// How a --chat prompt is rendered (chat.h); `chat` false: plain text.
struct ChatPrompt {
  bool chat = false;
  std::optional<io::ChatTemplate> chat_template;  // nullopt: the tokenizer folder's
  std::string system;                             // empty: none
};

// The prompt's ids and the token generation stops at.
absl::StatusOr<std::pair<std::vector<int32_t>, int32_t>> EncodePrompt(const io::TextTokenizer& tokenizer,
                                                                      const std::string& prompt,
                                                                      const ChatPrompt& chat) {
  if (!chat.chat) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(prompt, /*add_special_tokens=*/true);
    if (!ids.ok()) return ids.status();
    return std::make_pair(*std::move(ids), tokenizer.eos_id().value_or(-1));
  }
  absl::StatusOr<io::ChatTemplate> t =
      chat.chat_template ? absl::StatusOr<io::ChatTemplate>(*chat.chat_template) : io::DetectChatTemplate(tokenizer.path());
  if (!t.ok()) return t.status();
  absl::StatusOr<io::ChatRenderer> renderer = io::ChatRenderer::Create(tokenizer, *t);
  if (!renderer.ok()) return renderer.status();
  std::vector<io::ChatMessage> messages;
  if (!chat.system.empty()) messages.push_back({io::ChatRole::kSystem, chat.system});
  messages.push_back({io::ChatRole::kUser, prompt});
  std::vector<int32_t> ids;
  renderer->RenderPrompt(messages, &ids);
  return std::make_pair(std::move(ids), renderer->end_token());
}

absl::Status Generate(const std::string& checkpoint, const std::string& tokenizer_path,
                      bool default_tokenizer, const std::string& prompt, int max_new_tokens,
                      const SamplingOptions& o, const ChatPrompt& chat) {
  absl::StatusOr<std::string> dir = io::ResolveCheckpoint(checkpoint);
  if (!dir.ok()) return dir.status();
  absl::StatusOr<std::unique_ptr<nn::CausalLM>> model =
      nn::DeclareHuggingFaceModel(*dir, core::DType::kF32);
  if (!model.ok()) return absl::FailedPreconditionError(model.status().message());
  absl::StatusOr<std::unique_ptr<io::TextTokenizer>> tokenizer = io::LoadTokenizer(tokenizer_path);
  if (!tokenizer.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("tokenizer ", tokenizer_path, ": ", tokenizer.status().message()));
  }
  if (default_tokenizer && (*tokenizer)->vocab_size() != (*model)->vocab_size()) {
    // Another family's tokenizer would encode the prompt into, and decode the
    // text from, ids that mean other words to this model.
    return absl::FailedPreconditionError(absl::StrCat(
        *dir, " holds no tokenizer, and GPT-2's (", tokenizer_path, ", ",
        (*tokenizer)->vocab_size(), " tokens) does not fit the model's vocabulary of ",
        (*model)->vocab_size(), ": pass --tokenizer (the one the model was trained with, e.g. the "
        "folder it was fine-tuned from)"));
  }
  if (absl::Status s = (*model)->store().allocate(core::Stream::cpu()); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(*dir, ": the model of config.json: ", s.message()));
  }
  if (absl::Status s = nn::LoadHuggingFaceModelConverting(*dir, **model, (*model)->store()); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("loading the weights (generate runs float32 on the CPU): ", s.message()));
  }
  absl::StatusOr<std::unique_ptr<core::Context>> ctx = core::Context::create(core::Device::cpu());
  if (!ctx.ok()) return ctx.status();

  absl::StatusOr<std::pair<std::vector<int32_t>, int32_t>> encoded = EncodePrompt(**tokenizer, prompt, chat);
  if (!encoded.ok()) return absl::FailedPreconditionError(encoded.status().message());
  std::vector<int32_t> tokens = std::move(encoded->first);
  const int32_t stop_token = encoded->second;
  const size_t prompt_tokens = tokens.size();
  std::fprintf(stderr, "generate: %s: %s; CPU, float32; %zu prompt tokens%s\n", dir->c_str(),
               Describe(**model).c_str(), prompt_tokens, chat.chat ? " (a chat turn)" : "");
  if (!chat.chat) Emit(prompt);
  // Each new token's text is what decoding all the new tokens adds to the
  // text so far (SentencePiece pieces carry their spaces that way).
  std::string emitted;
  // A vocabulary padded past the tokenizer's (Qwen2.5: 151936 rows, 151665
  // tokens) has rows no text belongs to: never sample them.
  SamplingOptions sampling = o;
  if ((*tokenizer)->vocab_size() < (*model)->vocab_size()) sampling.vocab_limit = (*tokenizer)->vocab_size();
  absl::StatusOr<int> generated = GenerateTokens(
      **ctx, **model, tokens, max_new_tokens, sampling, stop_token,
      [&](int32_t) -> absl::Status {
        absl::StatusOr<std::string> text =
            (*tokenizer)->Decode(std::span<const int32_t>(tokens).subspan(prompt_tokens));
        if (!text.ok()) {
          return absl::FailedPreconditionError(absl::StrCat(
              "the model produced a token the tokenizer ", tokenizer_path,
              " has no text for (", text.status().message(), "): the tokenizer does not match the checkpoint"));
        }
        if (text->size() > emitted.size() && text->compare(0, emitted.size(), emitted) == 0) {
          Emit(std::string_view(*text).substr(emitted.size()));
          emitted = *std::move(text);
        }
        return absl::OkStatus();
      });
  if (!generated.ok()) return generated.status();
  Emit("\n");
  std::fprintf(stderr, "generate: %d new tokens%s\n", *generated,
               *generated < max_new_tokens ? (chat.chat ? " (end of the reply)" : " (end of text)") : "");
  return absl::OkStatus();
}

}  // namespace

int GenerateCommand(const Args& args) {
  const std::string usage = GenerateUsage();
  auto flags = ParseFlags(args, kGenerateFlags, /*stop_at_positional=*/false);
  if (!flags.ok()) return FailStatus("generate", flags.status(), usage);
  if (flags->help) {
    std::fputs(usage.c_str(), stdout);
    return kExitOk;
  }
  if (!flags->positional.empty()) {
    return Fail("generate", absl::StrCat("unexpected argument '", flags->positional[0], "'"),
                kExitUsage, usage);
  }
  if (!flags->has("--checkpoint")) {
    return Fail("generate", "--checkpoint is required", kExitUsage, usage);
  }
  if (flags->value("--prompt").empty()) {
    return Fail("generate", "--prompt is required (and must not be empty)", kExitUsage, usage);
  }
  auto max_new = IntFlag(*flags, "--max_new_tokens", 64, 0, 1 << 20);
  if (!max_new.ok()) return FailStatus("generate", max_new.status(), usage);
  auto top_k = IntFlag(*flags, "--top_k", 50, 0, 1 << 30);
  if (!top_k.ok()) return FailStatus("generate", top_k.status(), usage);
  auto temperature = DoubleFlag(*flags, "--temperature", 1.0);
  if (!temperature.ok()) return FailStatus("generate", temperature.status(), usage);
  if (!(*temperature >= 0 && std::isfinite(*temperature))) {
    return Fail("generate", absl::StrCat("--temperature must be a finite number >= 0, got ",
                                         flags->value("--temperature")),
                kExitUsage, usage);
  }
  SamplingOptions sampling{.temperature = *temperature, .top_k = *top_k};
  if (flags->has("--seed") && !absl::SimpleAtoi(flags->value("--seed"), &sampling.seed)) {
    return Fail("generate",
                absl::StrCat("--seed wants an integer in [0, 2^64), got '", flags->value("--seed"),
                             "'"),
                kExitUsage, usage);
  }
  std::string tokenizer = flags->value("--tokenizer");
  // A path that names nothing is a mistake on the command line (2); one that
  // is there but unusable fails below (1).
  for (const char* flag : {"--checkpoint", "--tokenizer"}) {
    const std::string path = flags->value(flag);
    if (!path.empty() && io::NoSuchPath(path)) {
      return Fail("generate", absl::StrCat(flag, " ", path, ": no such file or folder"), kExitUsage);
    }
  }
  if (tokenizer.empty()) {
    // The checkpoint folder's own tokenizer when it has one (a Hugging Face
    // model folder), else GPT-2's.
    absl::StatusOr<std::string> dir = io::ResolveCheckpoint(flags->value("--checkpoint"));
    if (dir.ok() && io::TokenizerFileIn(*dir)) tokenizer = *dir;
  }
  const bool default_tokenizer = tokenizer.empty();
  if (tokenizer.empty()) {
    tokenizer = DefaultTokenizerPath();
    struct stat st;
    if (stat(tokenizer.c_str(), &st) != 0) {
      return Fail("generate",
                  absl::StrCat("no GPT-2 tokenizer at ", tokenizer,
                               "; fetch it with tools/data/fetch_gpt2_ranks.sh (it installs "
                               "gpt2.tiktoken under $COLOSSAL_DATA, default ~/.cache/colossal/data)"
                               ", or pass --tokenizer FILE"),
                  kExitFailure);
    }
  }
  ChatPrompt chat;
  chat.chat = flags->has("--chat") || flags->has("--chat_template");
  if (flags->has("--chat_template")) {
    chat.chat_template = io::ChatTemplateFromName(flags->value("--chat_template"));
    if (!chat.chat_template) {
      return Fail("generate",
                  absl::StrCat("--chat_template must be one of ", io::ChatTemplateNames(), ", got '",
                               flags->value("--chat_template"), "'"),
                  kExitUsage, usage);
    }
  }
  if (flags->has("--system")) {
    if (!chat.chat) return Fail("generate", "--system goes with --chat", kExitUsage, usage);
    chat.system = flags->value("--system");
  }
  absl::Status s = Generate(flags->value("--checkpoint"), tokenizer, default_tokenizer,
                            flags->value("--prompt"), *max_new, sampling, chat);
  if (!s.ok()) return Fail("generate", s.message(), kExitFailure);
  return kExitOk;
}

}  // namespace colossal::lua::cli
