#include "lua/api/generation.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "comm/process_group/process_group.h"
#include "core/ops/elementwise.h"
#include "core/status/status.h"
#include "core/tensor/tensor.h"
#include "kernels/random/philox.h"
#include "nn/layers/tensor_parallel.h"
#include "nn/models/causal_lm/last_logits.h"

namespace colossal::lua {

std::string DefaultTokenizerPath() {
  if (const char* d = std::getenv("COLOSSAL_DATA"); d != nullptr && *d != '\0') {
    return absl::StrCat(d, "/gpt2.tiktoken");
  }
  const char* home = std::getenv("HOME");
  return absl::StrCat(home ? home : "", "/.cache/colossal/data/gpt2.tiktoken");
}

absl::Status DefaultTokenizerInstalled() {
  const std::string path = DefaultTokenizerPath();
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "no GPT-2 tokenizer at ", path,
      "; fetch it with tools/data/fetch_gpt2_ranks.sh (it installs gpt2.tiktoken under $COLOSSAL_DATA, default "
      "~/.cache/colossal/data), or name another tokenizer (data prepare --tokenizer DIR|FILE)"));
}

int32_t PickToken(const float* logits, int64_t vocab, const SamplingOptions& o, uint64_t draw) {
  if (o.temperature == 0) {
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);  // first max
  }
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  const int64_t k = (o.top_k == 0 || o.top_k > vocab) ? vocab : o.top_k;
  // Likeliest first; equal logits by id, so the order is total.
  auto better = [logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), better);
  std::vector<double> p(k);
  const double top = logits[ids[0]];
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    p[i] = std::exp((static_cast<double>(logits[ids[i]]) - top) / o.temperature);
    sum += p[i];
  }
  const kernels::random::PhiloxBlock bits = kernels::random::philox_stream_block(o.seed, draw / 4);
  const double u = static_cast<double>(kernels::random::uniform_float(bits.w[draw % 4])) * sum;
  double acc = 0;
  for (int64_t i = 0; i < k; ++i) {
    acc += p[i];
    if (u < acc) return ids[i];
  }
  return ids[k - 1];
}

absl::StatusOr<int> GenerateTokens(core::Context& ctx, nn::CausalLM& model,
                                   std::vector<int32_t>& tokens, int max_new_tokens,
                                   const SamplingOptions& options, int32_t stop_token,
                                   const std::function<absl::Status(int32_t)>& emit,
                                   const ForwardFn& forward) {
  if (tokens.empty()) return absl::InvalidArgumentError("generation needs at least one token");
  for (int32_t id : tokens) {
    if (id < 0 || id >= model.vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", id, " is outside the model's vocabulary of ", model.vocab_size(),
          ": the tokenizer does not match the model"));
    }
  }
  // No dropout while generating; the model's mode comes back afterwards.
  const bool was_training = model.training();
  model.set_training(false);
  struct Restore {
    nn::CausalLM& model;
    bool training;
    ~Restore() { model.set_training(training); }
  } restore{model, was_training};
  const core::Stream& stream = ctx.compute_stream();
  const int64_t padded = model.padded_vocab_size();
  const int64_t vocab = options.vocab_limit > 0
                            ? std::min<int64_t>(options.vocab_limit, model.vocab_size())
                            : model.vocab_size();
  int generated = 0;
  for (; generated < max_new_tokens; ++generated) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(tokens.size()), model.max_seq_len());
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host,
                              core::Tensor::empty({1, T}, core::DType::kI32, core::Stream::cpu()));
    std::copy(tokens.end() - T, tokens.end(), host.data<int32_t>());
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor input, host.to(ctx.device(), stream));
    COLOSSAL_ASSIGN_OR_RETURN(nn::ForwardResult out,
                              forward ? forward(input) : model.forward(ctx, input));
    // A tensor-parallel head gives this rank's vocabulary columns: the last
    // position's are gathered (rank-major, so in vocabulary order). `forward`
    // may give the last position alone (a pipeline's last stage's).
    const nn::TensorParallel& tp = model.tensor_parallel();
    const int64_t columns = padded / tp.size();
    const int64_t rows = out.output.numel() / columns;
    if (rows < 1 || rows * columns != out.output.numel()) {
      return absl::InternalError(absl::StrCat("generation: the logits are ",
                                              out.output.to_string(), ", not rows of ", columns));
    }
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor flat, out.output.reshape({rows, columns}));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor last, flat.narrow(0, rows - 1, 1));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor last_f32, core::ops::cast(ctx, last, core::DType::kF32));
    if (tp.enabled()) {
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor all,
                                core::Tensor::empty({padded}, core::DType::kF32, stream));
      comm::CollectiveOptions o;
      if (stream.is_cuda()) o.stream = stream;
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor mine, last_f32.reshape({padded / tp.size()}));
      COLOSSAL_ASSIGN_OR_RETURN(comm::WorkPtr w, tp.group->all_gather(all, mine, o));
      COLOSSAL_RETURN_IF_ERROR(w->wait());
      last_f32 = all;
    }
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor logits, last_f32.to(core::Device::cpu(), stream));
    stream.synchronize();
    const int32_t next =
        PickToken(logits.data<float>(), vocab, options, static_cast<uint64_t>(generated));
    if (next == stop_token) break;
    tokens.push_back(next);
    COLOSSAL_RETURN_IF_ERROR(emit(next));
  }
  return generated;
}

ForwardFn SequenceSplitForward(core::Context& ctx, const nn::CausalLM& model, ForwardFn inner) {
  if (!model.tensor_parallel().chunks_sequence()) return inner;
  return [&ctx, &model, inner](const core::Tensor& tokens) -> absl::StatusOr<nn::ForwardResult> {
    COLOSSAL_ASSIGN_OR_RETURN(
        core::Tensor last,
        nn::last_position_logits(
            ctx, model,
            [&](const core::Tensor& t) -> absl::StatusOr<core::Tensor> {
              COLOSSAL_ASSIGN_OR_RETURN(nn::ForwardResult out, inner(t));
              return out.output;
            },
            tokens));
    return nn::ForwardResult{last, nullptr};
  };
}

}  // namespace colossal::lua
