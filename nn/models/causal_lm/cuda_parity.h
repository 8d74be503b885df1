// colossal::nn — one model family on CUDA against its CPU reference (tests
// only): the same architecture and seed on both devices, one forward,
// cross-entropy and backward on each, and the logits, loss, dlogits and every
// parameter gradient compared. Used by GPT-2's and Llama's CUDA tests.
//
//   CpuAndCuda m;
//   ASSERT_NO_FATAL_FAILURE(set_up(factory, /*seed=*/11, m));
//   Steps s;
//   ASSERT_NO_FATAL_FAILURE(forward_both(m, s));     // logits within 1e-4
//   ASSERT_NO_FATAL_FAILURE(backward_both(m, s));
//   expect_same_gradients(m);                        // within 1e-3
#ifndef COLOSSAL_NN_MODELS_CAUSAL_LM_CUDA_PARITY_H_
#define COLOSSAL_NN_MODELS_CAUSAL_LM_CUDA_PARITY_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "nn/layers/cross_entropy.h"
#include "nn/models/causal_lm/causal_lm.h"

namespace colossal::nn {

// max |a - b| / max(1e-6, max |b|): float32 tensors, a on any device, b on the host.
double relative_difference(const core::Tensor& a, const core::Tensor& b, const core::Stream& stream);

// Declares the family's model in float32 (no memory).
using ModelFactory = std::function<absl::StatusOr<std::unique_ptr<CausalLM>>()>;

// One model on the CPU (the reference) and one on cuda:0, both initialised
// with the same seed, their contexts, and a B x T batch on the host.
struct CpuAndCuda {
  static constexpr int64_t B = 2, T = 16;
  std::unique_ptr<core::Context> cpu_ctx, gpu_ctx;
  std::unique_ptr<CausalLM> cpu_model, gpu_model;
  core::Tensor tokens, targets;
  const core::Stream& stream() const { return gpu_ctx->compute_stream(); }
};
void set_up(const ModelFactory& factory, uint64_t seed, CpuAndCuda& m);

struct Steps {
  core::Tensor gpu_tokens, gpu_targets;
  ForwardResult cpu_out, gpu_out;
  CrossEntropyResult cpu_ce, gpu_ce;
};
// Forward and cross-entropy on both models; expects the logits within 1e-4.
void forward_both(CpuAndCuda& m, Steps& s);
// Backward on both from their dlogits (the CUDA one synchronised).
void backward_both(CpuAndCuda& m, Steps& s);
// Every parameter gradient of the CUDA model within `tolerance` of the CPU's.
void expect_same_gradients(const CpuAndCuda& m, double tolerance = 1e-3);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODELS_CAUSAL_LM_CUDA_PARITY_H_
