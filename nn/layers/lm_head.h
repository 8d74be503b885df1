// colossal::nn — the language-model head: logits = x W^T over a [vocab, C]
// weight, GPT-2's tied head (W is the token embedding), Llama's lm_head (its
// own W) or Llama's tied one.
//
// The weight is named, not owned by the module's name: `declare_weight` says
// whether this module adds it to the table (Llama's untied "lm_head.weight";
// a tied head on a pipeline stage without the embedding) or only reads the
// entry the embedding declared (a tied head beside its embedding). Either way
// the handle is bound by that name.
//
// Input [B, T, C] -> logits [B, T, vocab]. Backward: dW += dlogits^T x,
// dx = dlogits W (GEMMs, core/gemm).
//
// Vocabulary parallelism (Megatron's VocabParallelLMHead, with a
// TensorParallel group): the weight's vocab rows split over the group, each
// rank computes the logits of its rows [B, T, vocab / size] (never gathered:
// the loss is computed across ranks, CausalLM::loss), and its input gradient,
// a partial sum, is summed over the group; with sequence parallelism the
// input is this rank's positions, gathered first (a parallel region).
//
//   LmHead head("lm_head", "lm_head.weight", 128256, 2048, DType::kBF16, /*declare_weight=*/true);
#ifndef COLOSSAL_NN_LAYERS_LM_HEAD_H_
#define COLOSSAL_NN_LAYERS_LM_HEAD_H_

#include <cstdint>
#include <string>

#include "nn/layers/tensor_parallel.h"
#include "nn/module/module.h"

namespace colossal::nn {

class LmHead : public Module {
 public:
  LmHead(std::string name, std::string weight_name, int64_t vocab, int64_t channels,
         core::DType dtype, bool declare_weight, const TensorParallel& tp = {});
  const char* type() const override { return "LmHead"; }
  const ParameterHandle& weight() const { return weight_; }

 protected:
  absl::Status declare_own(ParameterTable& table) override;
  absl::Status bind_own(const ParameterStore& store) override;
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;

 private:
  // logits = x W^T of the whole input x [B, T, C] (saved for the backward).
  absl::StatusOr<ForwardResult> project(core::Context& ctx, const core::Tensor& x);
  std::string weight_name_;
  int64_t vocab_, channels_;
  core::DType dtype_;
  bool declare_weight_;
  TensorParallel tp_;
  ParameterHandle weight_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_LM_HEAD_H_
