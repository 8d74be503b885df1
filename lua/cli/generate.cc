// `colossal generate`: text from a GPT-2 checkpoint, on the CPU.
//
// Resolves the checkpoint (a step directory, or a root whose `latest` names
// one), reads its config.json, builds the model in float32 on the CPU, loads
// the weights and encodes the prompt with GPT-2's tokenizer. Then, token by
// token, it runs the full forward over the last min(len, n_positions) tokens
// (no KV cache), takes the logits of the last position over the real
// vocabulary (the padded columns >= vocab_size are ignored) and picks the
// next token: greedily for --temperature 0, else by sampling softmax(logits /
// T) restricted to the top-k logits with a uniform from the Philox stream of
// --seed (stream element i for the i-th new token, kernels/random/philox.h),
// so the same flags give the same text. The prompt and then each new token's
// bytes go to stdout as they are produced; it stops at <|endoftext|> (not
// printed) or after --max_new_tokens tokens.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
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
#include "nn/train/checkpoint.h"
#include "io/tokenizer/tokenizer.h"
#include "core/ops/elementwise.h"
#include "lua/api/generation.h"
#include "lua/cli/commands.h"
#include "lua/cli/flags.h"
#include "nn/models/causal_lm/hugging_face.h"
#include "nn/models/gpt2/gpt2.h"
#include "nn/models/gpt2/hugging_face.h"

namespace colossal::lua::cli {
namespace {

constexpr FlagSpec kGenerateFlags[] = {
    {"--checkpoint", FlagKind::kValue, "DIR", "a step directory, or a root with a `latest` file"},
    {"--prompt", FlagKind::kValue, "TEXT", "the text to continue (required, not empty)"},
    {"--max_new_tokens", FlagKind::kValue, "N", "at most N new tokens (64)"},
    {"--temperature", FlagKind::kValue, "T", "softmax temperature; 0: greedy (1.0)"},
    {"--top_k", FlagKind::kValue, "K", "sample among the K likeliest tokens; 0: all (50)"},
    {"--seed", FlagKind::kValue, "S", "Philox seed of the sampling (1337)"},
    {"--tokenizer", FlagKind::kValue, "FILE",
     "GPT-2 ranks, tiktoken format ($COLOSSAL_DATA/gpt2.tiktoken)"},
};

std::string GenerateUsage() {
  return absl::StrCat(
      "usage: colossal generate --checkpoint DIR --prompt TEXT [options]\n\n"
      "Continues TEXT with the GPT-2 model of a checkpoint, on the CPU (float32),\n"
      "printing the prompt and each new token to stdout as it is produced. It stops\n"
      "at <|endoftext|> or after --max_new_tokens tokens. The same flags give the same\n"
      "text. Exit codes: 0 ok, 1 runtime failure (checkpoint, tokenizer, model),\n"
      "2 usage error.\n\n",
      FlagHelp(kGenerateFlags));
}

void Emit(std::string_view bytes) {
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  std::fflush(stdout);
}

// The generation itself; errors are runtime failures (exit code 1).
absl::Status Generate(const std::string& checkpoint, const std::string& tokenizer_path,
                      const std::string& prompt, int max_new_tokens, const SamplingOptions& o) {
  absl::StatusOr<std::string> dir = io::ResolveCheckpoint(checkpoint);
  if (!dir.ok()) return dir.status();
  absl::StatusOr<nn::GPT2Config> config = nn::ReadGPT2Config(*dir);
  if (!config.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(*dir, "/config.json: ", config.status().message()));
  }
  absl::StatusOr<io::Tokenizer> tokenizer = io::Tokenizer::FromTiktokenFile(tokenizer_path);
  if (!tokenizer.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("tokenizer ", tokenizer_path, ": ", tokenizer.status().message()));
  }
  absl::StatusOr<std::unique_ptr<nn::GPT2>> model =
      nn::GPT2::create(*config, core::DType::kF32, core::Stream::cpu());
  if (!model.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(*dir, ": the model of config.json: ", model.status().message()));
  }
  if (absl::Status s = nn::LoadHuggingFaceModelConverting(*dir, **model, (*model)->store()); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("loading the weights (generate runs float32 on the CPU): ", s.message()));
  }
  absl::StatusOr<std::unique_ptr<core::Context>> ctx = core::Context::create(core::Device::cpu());
  if (!ctx.ok()) return ctx.status();

  std::vector<int32_t> tokens = tokenizer->EncodeOrdinary(prompt);
  const int32_t eot = tokenizer->special_token_id(io::kEndOfText).value_or(io::kGpt2EndOfTextId);
  std::fprintf(stderr,
               "generate: %s: GPT-2 %lld layers, %lld heads, n_embd %lld, vocab %lld, "
               "context %lld; CPU, float32; %zu prompt tokens\n",
               dir->c_str(), static_cast<long long>(config->n_layer),
               static_cast<long long>(config->n_head), static_cast<long long>(config->n_embd),
               static_cast<long long>(config->vocab_size),
               static_cast<long long>(config->max_seq_len), tokens.size());
  Emit(prompt);
  absl::StatusOr<int> generated = GenerateTokens(
      **ctx, **model, tokens, max_new_tokens, o, eot, [&](int32_t next) -> absl::Status {
        std::optional<std::string_view> bytes = tokenizer->TokenBytes(next);
        if (!bytes.has_value()) {
          return absl::FailedPreconditionError(absl::StrCat(
              "the model produced token ", next, ", which the tokenizer ", tokenizer_path,
              " has no text for: the tokenizer does not match the checkpoint"));
        }
        Emit(*bytes);
        return absl::OkStatus();
      });
  if (!generated.ok()) return generated.status();
  Emit("\n");
  std::fprintf(stderr, "generate: %d new tokens%s\n", *generated,
               *generated < max_new_tokens ? " (<|endoftext|>)" : "");
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
  absl::Status s = Generate(flags->value("--checkpoint"), tokenizer, flags->value("--prompt"),
                            *max_new, sampling);
  if (!s.ok()) return Fail("generate", s.message(), kExitFailure);
  return kExitOk;
}

}  // namespace colossal::lua::cli
