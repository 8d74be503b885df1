// colossal::nn — finite-difference gradient checks for Modules (tests only).
//
// The scalar objective is L = sum(output * R) for a fixed random R, so the
// analytic gradients come from one backward with grad_output = R and the
// numeric ones from central differences (L(p + eps) - L(p - eps)) / (2 eps) of
// every input element (when the input is floating point) and every parameter
// element. Run it in float64 on the CPU.
//
//   ParameterStore store = random_parameters(layer, /*seed=*/7, is_norm_weight);
//   COLOSSAL_ASSIGN_OR_RETURN(GradCheckReport r, gradcheck(ctx, layer, store, x, {}));
//   EXPECT_LT(r.max_error, 1e-6) << r.worst;
#ifndef COLOSSAL_NN_MODULE_GRADCHECK_H_
#define COLOSSAL_NN_MODULE_GRADCHECK_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "core/context/context.h"
#include "core/tensor/tensor.h"
#include "nn/module/module.h"
#include "nn/module/parameter.h"

namespace colossal::nn {

struct GradCheckOptions {
  double eps = 1e-5;
  uint64_t seed = 1;
  // Check at most this many elements per tensor (evenly spread), 0 for all.
  int64_t max_elements_per_tensor = 0;
};

struct GradCheckReport {
  // Largest |analytic - numeric| / max(1, |numeric|) over all checked elements.
  double max_error = 0;
  // Where it was, e.g. "fc.weight[3]: analytic 0.1 numeric 0.2".
  std::string worst;
  int64_t checked = 0;
};

// Checks `module` (bound to `store`, float64, CPU) at `input`. Gradients in
// `store` are zeroed first and hold the analytic gradients afterwards.
absl::StatusOr<GradCheckReport> gradcheck(core::Context& ctx, Module& module,
                                          ParameterStore& store, const core::Tensor& input,
                                          const GradCheckOptions& options);

// The module's parameters declared, materialized on the CPU and bound, filled
// with N(0, 0.5) draws of `seed` (float32 or float64), plus 1 for those
// `is_scale` names (norm weights: near 1, not near 0). Dies on a module that
// cannot be declared (tests only).
ParameterStore random_parameters(Module& module, uint64_t seed,
                                 const std::function<bool(const std::string&)>& is_scale);

// A CPU tensor of N(0, scale) draws of `seed` (float32 or float64).
core::Tensor random_normal(const core::Shape& shape, uint64_t seed,
                           core::DType dtype = core::DType::kF64, double scale = 1.0);

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_MODULE_GRADCHECK_H_
