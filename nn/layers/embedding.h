// colossal::nn — GPT-2's token + position embedding (kernels/embedding), or
// a token-only embedding (Llama's embed_tokens: Embedding::tokens_only).
//
//   out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]     (tokens only: no wpe term)
//
// Parameters "<name>.wte.weight" [vocab, C] and "<name>.wpe.weight"
// [max_seq_len, C], both declared N(0, kDefaultInitStd); with name
// "transformer" these are Hugging Face GPT-2's names. `vocab` is the (possibly padded) row count of wte. Input int32 token
// ids [B, T] (T <= max_seq_len) -> [B, T, C]. Token ids are not
// differentiable: backward accumulates dwte/dwpe and returns an undefined
// tensor. CPU: float32, float64 (and the 16-bit types); an id outside [0,
// vocab) is an InvalidArgumentError. CUDA (float32 and the 16-bit types;
// deterministic backward): such an id gives a NaN output row instead (no
// synchronisation to report it) and no gradient.
//
// tokens_only(name, vocab, channels, dtype) declares one parameter,
// "<name>.weight" [vocab, C] (Hugging Face Llama: "model.embed_tokens"), and
// takes any T.
//
// Vocabulary parallelism (Megatron's VocabParallelEmbedding, with a
// TensorParallel group): each rank holds vocab / size rows of wte (vocab must
// divide), looks up the tokens in its rows (zeros for the others) and the
// partial rows are summed over the group; wpe stays whole and is added after
// the sum. With sequence parallelism the caller keeps only its positions of
// the output and hands back their gradient padded with zeros: wte's rows then
// take the group's summed gradient, wpe this rank's part (a partial sum the
// plugin adds up, as for every whole parameter).
//
//   Embedding emb("transformer", 50304, 1024, 768, DType::kF32);
//   COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, emb.forward(ctx, tokens));   // [B, T, 768]
#ifndef COLOSSAL_NN_LAYERS_EMBEDDING_H_
#define COLOSSAL_NN_LAYERS_EMBEDDING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "nn/layers/tensor_parallel.h"
#include "nn/module/module.h"

namespace colossal::nn {

class Embedding : public Module {
 public:
  Embedding(std::string name, int64_t vocab, int64_t max_seq_len, int64_t channels,
            core::DType dtype, const TensorParallel& tp = {});
  static std::unique_ptr<Embedding> tokens_only(std::string name, int64_t vocab,
                                                int64_t channels, core::DType dtype,
                                                const TensorParallel& tp = {});
  const char* type() const override { return "Embedding"; }
  // The token table's handle (after bind), e.g. for a tied output head.
  const ParameterHandle& wte() const { return wte_; }

 protected:
  absl::Status declare_own(ParameterTable& table) override;
  absl::Status bind_own(const ParameterStore& store) override;
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;

 private:
  int64_t vocab_, max_seq_len_, channels_;  // max_seq_len_ 0: tokens only, any T
  core::DType dtype_;
  TensorParallel tp_;  // enabled: this rank holds wte rows [vocab_start(), + local_vocab())
  int64_t local_vocab() const { return vocab_ / tp_.size(); }
  int64_t vocab_start() const { return tp_.rank() * local_vocab(); }
  // Position ids [B, T] on the device (wpe looked up as a token-only table),
  // made once per shape.
  absl::StatusOr<core::Tensor> positions(core::Context& ctx, int64_t B, int64_t T);
  core::Tensor positions_;
  absl::StatusOr<ForwardResult> forward_vocab_parallel(core::Context& ctx, const core::Tensor& tokens);
  absl::StatusOr<core::Tensor> backward_vocab_parallel(core::Context& ctx, const core::Tensor& tokens,
                                                       const core::Tensor& grad_output);
  ParameterHandle wte_, wpe_;  // wpe_ unbound for tokens only
  std::string wte_name() const;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_EMBEDDING_H_
