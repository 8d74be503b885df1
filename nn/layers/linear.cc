#include "nn/layers/linear.h"

#include <vector>

#include "core/gemm/gemm.h"
#include "core/status/status.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {
namespace {

struct LinearSaved : Saved {
  SavedStats stats() const override { return saved_stats({input}); }
  core::Tensor input;  // as given ([..., in])
};

}  // namespace

Linear::Linear(std::string name, int64_t in_features, int64_t out_features, LinearOptions options)
    : Module(std::move(name)), in_(in_features), out_(out_features), options_(options) {}

absl::Status Linear::declare_own(ParameterTable& table) {
  const core::Shape w = options_.layout == WeightLayout::kInOut ? core::Shape{in_, out_}
                                                                 : core::Shape{out_, in_};
  COLOSSAL_RETURN_IF_ERROR(
      table.add(name() + ".weight", w, options_.dtype, InitRule::normal(kDefaultInitStd)));
  if (options_.bias) COLOSSAL_RETURN_IF_ERROR(table.add(name() + ".bias", {out_}, options_.dtype));
  return absl::OkStatus();
}

absl::Status Linear::bind_own(const ParameterStore& store) {
  COLOSSAL_ASSIGN_OR_RETURN(weight_, store.handle(name() + ".weight"));
  if (options_.bias) {
    COLOSSAL_ASSIGN_OR_RETURN(bias_, store.handle(name() + ".bias"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ForwardResult> Linear::forward_impl(core::Context& ctx, const core::Tensor& input) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, input, "input"));
  COLOSSAL_RETURN_IF_ERROR(require_dtype(input, options_.dtype, "input"));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor x, as_rows(input, in_, "input"));
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor w, weight_.value());
  core::Tensor b;
  core::gemm::GemmOptions g;
  g.trans_b = options_.layout == WeightLayout::kOutIn;
  if (options_.bias) {
    COLOSSAL_ASSIGN_OR_RETURN(b, bias_.value());
    g.epilogue = core::gemm::Epilogue::kBias;
    g.bias = &b;
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor y, core::gemm::matmul(ctx, x, w, g));
  std::vector<int64_t> dims(input.shape().dims().begin(), input.shape().dims().end());
  dims.back() = out_;
  COLOSSAL_ASSIGN_OR_RETURN(y, y.reshape(dims));
  auto saved = std::make_unique<LinearSaved>();
  saved->input = input;
  return ForwardResult{y, std::move(saved)};
}

absl::StatusOr<core::Tensor> Linear::backward_impl(core::Context& ctx, Saved& saved,
                                                   const core::Tensor& grad_output) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, grad_output, "grad_output"));
  COLOSSAL_ASSIGN_OR_RETURN(LinearSaved * s, saved_as<LinearSaved>(saved));
  COLOSSAL_RETURN_IF_ERROR(require_dtype(grad_output, options_.dtype, "grad_output"));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dy, as_rows(grad_output, out_, "grad_output"));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor x, as_rows(s->input, in_, "saved input"));
  if (dy.dim(0) != x.dim(0)) {
    return absl::InvalidArgumentError("grad_output does not match the forward's input rows");
  }
  const bool in_out = options_.layout == WeightLayout::kInOut;
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor w, weight_.value());
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dw, weight_.grad());
  // Weight gradient, accumulated: [in, out] += x^T dy, or [out, in] += dy^T x.
  if (in_out) {
    COLOSSAL_RETURN_IF_ERROR(
        core::gemm::gemm(ctx, x, dy, dw, {.trans_a = true, .beta = 1.0}));
  } else {
    COLOSSAL_RETURN_IF_ERROR(
        core::gemm::gemm(ctx, dy, x, dw, {.trans_a = true, .beta = 1.0}));
  }
  if (options_.bias) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor db, bias_.grad());
    COLOSSAL_RETURN_IF_ERROR(accumulate_column_sums(ctx, dy, db));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dx, core::gemm::matmul(ctx, dy, w, {.trans_b = in_out}));
  return dx.reshape(s->input.shape().dims());
}

}  // namespace colossal::nn
