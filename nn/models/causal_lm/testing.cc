#include "nn/models/causal_lm/testing.h"

#include <algorithm>
#include <cmath>

#include "core/status/status.h"
#include "nn/layers/cross_entropy.h"

namespace colossal::nn {

core::Tensor tokens_of(const std::vector<int32_t>& ids, int64_t B, int64_t T) {
  absl::StatusOr<core::Tensor> t = core::Tensor::empty({B, T}, core::DType::kI32, core::Stream::cpu());
  COLOSSAL_CHECK_OK(t.status());
  COLOSSAL_CHECK_EQ(static_cast<int64_t>(ids.size()), B * T);
  std::copy(ids.begin(), ids.end(), t->data<int32_t>());
  return *t;
}

absl::StatusOr<OverfitResult> overfit_one_batch(core::Context& ctx, CausalLM& model,
                                                const core::Tensor& tokens,
                                                const core::Tensor& targets,
                                                const OverfitOptions& options) {
  ParameterStore& store = model.store();
  core::Tensor w = store.flat_values(core::DType::kF32), g = store.flat_grads(core::DType::kF32);
  const int64_t n = w.numel();
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  const float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  OverfitResult result;
  for (int step = 1; step <= options.steps; ++step) {
    COLOSSAL_RETURN_IF_ERROR(store.zero_grad(core::Stream::cpu()));
    COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, model.forward(ctx, tokens));
    COLOSSAL_ASSIGN_OR_RETURN(CrossEntropyResult ce,
                              cross_entropy(ctx, out.output, targets, model.vocab_size(), {}));
    result.last_loss = ce.loss;
    if (step == 1) result.first_loss = ce.loss;
    COLOSSAL_RETURN_IF_ERROR(model.backward(ctx, *out.saved, ce.dlogits).status());
    float* wp = w.data<float>();
    const float* gp = g.data<float>();
    const float c1 = 1 - std::pow(beta1, step), c2 = 1 - std::pow(beta2, step);
    for (int64_t i = 0; i < n; ++i) {
      m[i] = beta1 * m[i] + (1 - beta1) * gp[i];
      v[i] = beta2 * v[i] + (1 - beta2) * gp[i] * gp[i];
      wp[i] -= options.lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
    }
    if (ce.loss < options.stop_below) break;
  }
  return result;
}

}  // namespace colossal::nn
