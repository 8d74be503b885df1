// colossal::nn — Linear: y = x W + b over the last dimension.
//
// Weight layout (a choice per layer, stated in its ParameterTable entry):
//   * WeightLayout::kInOut — weight [in, out], y = x W. This is Hugging Face
//     GPT-2's Conv1D layout, so GPT-2's c_attn / c_proj / c_fc weights are
//     stored exactly as `transformers` stores them: the HF name and shape map
//     to ours one to one, checkpoints need no transpose.
//   * WeightLayout::kOutIn — weight [out, in], y = x W^T (torch.nn.Linear, and
//     the tied GPT-2 LM head, which uses wte [vocab, C] this way).
// bias [out] (optional). Parameters: "<name>.weight", "<name>.bias", declared
// with the init rules N(0, kDefaultInitStd) and zeros (a model may change them
// in its table: ParameterTable::set_init).
//
// Input [..., in] -> output [..., out]. Backward: dW += x^T dy (or dy^T x),
// db += column sums of dy, dx = dy W^T (or dy W), all GEMMs (core/gemm).
//
// Activation::kGelu (GPT-2's c_fc): y = gelu(x W + b), GELU applied by the
// GEMM's epilogue (core/gemm bias_gelu), which also writes the pre-activation
// x W + b that the backward keeps. The next Linear can then take GELU's
// backward into its input-gradient GEMM (fuse_input_gelu, core/gemm dgelu):
// no separate GELU pass either way. Needs the bias and no row split.
//
// forward_add(x, r) = r + forward(x), r added by the GEMM as it writes its
// output (core/gemm's addend: a pre-norm block's residual add costs no pass
// of its own). The backward is backward()'s (r's gradient is the output's).
// Devices and dtypes: see nn/layers/BUILD.
//
// Tensor parallelism (nn/layers/tensor_parallel.h): Parallel::kColumn holds
// out/size output features (the weight's out dimension and the bias split;
// `blocks` > 1 splits each of that many equal blocks of the outputs, GPT-2's
// fused q|k|v), kRow holds in/size input features, sums the partial outputs
// over the group and adds the whole bias once. in_features / out_features are
// the whole layer's.
//
//   Linear fc("transformer.h.0.mlp.c_fc", 768, 3072, {.dtype = DType::kF32});
//   COLOSSAL_RETURN_IF_ERROR(fc.declare(table));   ... fc.bind(store) ...
//   COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, fc.forward(ctx, x));   // [B, T, 3072]
#ifndef COLOSSAL_NN_LAYERS_LINEAR_H_
#define COLOSSAL_NN_LAYERS_LINEAR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "nn/layers/tensor_parallel.h"
#include "nn/module/module.h"

namespace colossal::nn {

enum class WeightLayout { kInOut, kOutIn };

enum class Parallel { kNone, kColumn, kRow };

enum class Activation { kNone, kGelu };

struct LinearOptions {
  bool bias = true;
  WeightLayout layout = WeightLayout::kInOut;
  core::DType dtype = core::DType::kF32;
  Parallel parallel = Parallel::kNone;
  TensorParallel tp{};  // with kColumn / kRow
  int blocks = 1;       // kColumn: equal output blocks split separately
  // A column (or unsplit) layer that starts a parallel region: its backward
  // adds the input gradient into the region's sum and lets the reduction run
  // during its weight-gradient GEMM (see RegionGrad); it returns the
  // unreduced sum, which the region's owner replaces by region_grad->finish().
  std::shared_ptr<RegionGrad> region_grad{};
  Activation activation = Activation::kNone;  // applied to the output (see above)
  // The number of input rows changes from call to call (a mixture of
  // experts' expert): the GEMMs skip autotuning (core/gemm's varying_size).
  bool varying_rows = false;
};

class Linear : public Module {
 public:
  Linear(std::string name, int64_t in_features, int64_t out_features, LinearOptions options);
  const char* type() const override { return "Linear"; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  // This rank's input and output widths (the whole ones without tensor parallelism).
  int64_t local_in() const;
  int64_t local_out() const;

  // GELU's backward folded into this layer's: `own` is this layer's Saved
  // from a forward whose input was the output of `producer`'s forward (a
  // Linear with Activation::kGelu), both of the same call. This layer's
  // backward then multiplies its input gradient by GELU's derivative in the
  // GEMM that computes it and returns the gradient with respect to the
  // producer's pre-activation, which the producer's backward takes as it is.
  // Returns false and changes nothing when the contexts are not plain Linear
  // forwards of that kind (activation checkpointing replaces them), when this
  // layer starts a parallel region, or when its input width is not a multiple
  // of 8 (cuBLASLt's rule); then both backwards work unfused.
  bool fuse_input_gelu(Saved& own, Saved& producer) const;

  // residual + forward(x), the add in the GEMM. Adds after instead (same
  // result up to one rounding) when the GEMM cannot: tensor parallelism, a
  // GELU activation, a checkpointed layer. Hooks as forward(x).
  absl::StatusOr<ForwardResult> forward_add(core::Context& ctx, const core::Tensor& x,
                                            const core::Tensor& residual);

 protected:
  absl::Status declare_own(ParameterTable& table) override;
  absl::Status bind_own(const ParameterStore& store) override;
  absl::StatusOr<ForwardResult> forward_impl(core::Context& ctx, const core::Tensor& input) override;
  absl::StatusOr<core::Tensor> backward_impl(core::Context& ctx, Saved& saved,
                                             const core::Tensor& grad_output) override;

 private:
  // forward_impl, with `residual` (when defined) added by the GEMM.
  absl::StatusOr<ForwardResult> run_forward(core::Context& ctx, const core::Tensor& input,
                                            const core::Tensor& residual);

  int64_t in_, out_;
  LinearOptions options_;
  ParameterHandle weight_, bias_;
};

}  // namespace colossal::nn

#endif  // COLOSSAL_NN_LAYERS_LINEAR_H_
