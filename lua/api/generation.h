// colossal::lua — text generation with a GPT-2: token sampling shared by
// `colossal generate` (lua/cli/generate.cc) and model:generate() in Lua.
//
// Each new token: the full forward over the last min(len, max_seq_len)
// tokens (no KV cache), the last position's logits over the real vocabulary
// (padding columns ignored), then greedy (temperature 0) or sampling of
// softmax(logits / T) restricted to the top-k with a uniform from Philox
// stream element i of `seed` for the i-th new token: the same options give
// the same text on any device.
#ifndef COLOSSAL_LUA_API_GENERATION_H_
#define COLOSSAL_LUA_API_GENERATION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "nn/models/causal_lm/causal_lm.h"

namespace colossal::lua {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy
  int top_k = 50;            // 0: the whole vocabulary
  uint64_t seed = 1337;
  // > 0: sample only ids below it (a tokenizer's vocabulary smaller than the
  // model's, e.g. a Llama shape trained on GPT-2's tokens); 0: the model's.
  int64_t vocab_limit = 0;
};

// $COLOSSAL_DATA/gpt2.tiktoken, default ~/.cache/colossal/data/gpt2.tiktoken.
std::string DefaultTokenizerPath();
// FailedPrecondition (exit code 1: this machine lacks a file, the command or
// recipe is right) naming DefaultTokenizerPath() and how to install it when
// it does not exist; `data prepare` and colossal.data.prepare both ask.
absl::Status DefaultTokenizerInstalled();

// The next token from `logits` (`vocab` real entries); `draw` is the index of
// the Philox stream element this choice uses.
int32_t PickToken(const float* logits, int64_t vocab, const SamplingOptions& options,
                  uint64_t draw);

// Appends up to `max_new_tokens` tokens to `tokens` (not empty), calling
// `emit` with each; stops early at `stop_token`. Returns how many were added.
// Errors: the model's; a token outside the vocabulary; emit's. `forward`,
// when set, runs the model instead of model.forward (a boosted model runs
// through its Booster, with the plugin's hooks); its output may hold every
// position's logits or the last position's alone.
using ForwardFn = std::function<absl::StatusOr<nn::ForwardResult>(const core::Tensor& tokens)>;
absl::StatusOr<int> GenerateTokens(core::Context& ctx, nn::CausalLM& model,
                                   std::vector<int32_t>& tokens, int max_new_tokens,
                                   const SamplingOptions& options, int32_t stop_token,
                                   const std::function<absl::Status(int32_t)>& emit,
                                   const ForwardFn& forward = {});

// `inner` (a forward of `model`), for a model whose activations split the
// sequence over ranks, as nn::last_position_logits runs it (padded, the last
// real position's logits on every rank); otherwise `inner` itself.
ForwardFn SequenceSplitForward(core::Context& ctx, const nn::CausalLM& model, ForwardFn inner);

}  // namespace colossal::lua

#endif  // COLOSSAL_LUA_API_GENERATION_H_
