// colossal::nn — GELU, tanh approximation (GPT-2's; kernels/activation).
//
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//
// No parameters. Any shape in, the same shape out; saves its input. Devices
// and dtypes: see nn/layers/BUILD.
//
//   Gelu act("transformer.h.0.mlp.act");
//   COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, act.forward(ctx, h));
#ifndef COLOSSAL_NN_LAYERS_GELU_H_
#define COLOSSAL_NN_LAYERS_GELU_H_

#include <string>

#include "nn/module/module.h"

namespace colossal::nn {

// The kernels behind it, for layers that apply GELU themselves (Linear's
// activation): y = gelu(x), and dx = dy * gelu'(x) (dy and x of one shape and dtype).
absl::StatusOr<core::Tensor> gelu_forward(core::Context& ctx, const core::Tensor& x);
absl::StatusOr<core::Tensor> gelu_backward(core::Context& ctx, const core::Tensor& dy,
                                           const core::Tensor& x);

class Gelu : public Module {
 public:
  explicit Gelu(std::string name) : Module(std::move(name)) {}
  const char* type() const override { return "Gelu"; }

 protected:
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_GELU_H_
