#include "nn/layers/linear.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/gemm/gemm.h"
#include "core/status/status.h"
#include "nn/layers/gelu.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {
namespace {

struct LinearSaved : Saved {
  // input_pre_activation is the producer's tensor, counted in its context.
  SavedStats stats() const override { return saved_stats({input, pre_activation}); }
  core::Tensor input;           // as given ([..., in])
  core::Tensor pre_activation;  // Activation::kGelu: x W + b ([..., out])
  // fuse_input_gelu: on the consumer, the producer's pre_activation (the
  // backward returns the gradient with respect to it); on the producer, that
  // grad_output is already the pre-activation's gradient.
  core::Tensor input_pre_activation;
  bool grad_is_pre_activation = false;
};

}  // namespace

Linear::Linear(std::string name, int64_t in_features, int64_t out_features, LinearOptions options)
    : Module(std::move(name)), in_(in_features), out_(out_features), options_(options) {}

int64_t Linear::local_in() const {
  return options_.parallel == Parallel::kRow ? in_ / options_.tp.size() : in_;
}

int64_t Linear::local_out() const {
  return options_.parallel == Parallel::kColumn ? out_ / options_.tp.size() : out_;
}

absl::Status Linear::declare_own(ParameterTable& table) {
  const bool in_out = options_.layout == WeightLayout::kInOut;
  const core::Shape w = in_out ? core::Shape{in_, out_} : core::Shape{out_, in_};
  // The weight's split dimension: its out dimension for column layers, its in
  // dimension for row layers; a row layer's bias is whole on every rank.
  TensorSplit w_split, b_split;
  if (options_.parallel == Parallel::kColumn) {
    w_split = options_.tp.split(in_out ? 1 : 0, options_.blocks);
    b_split = options_.tp.split(0, options_.blocks);
  } else if (options_.parallel == Parallel::kRow) {
    w_split = options_.tp.split(in_out ? 0 : 1);
    if (options_.region_grad != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": a row-parallel Linear cannot start a parallel region"));
    }
  }
  if (options_.activation == Activation::kGelu &&
      (!options_.bias || options_.parallel == Parallel::kRow)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name(), ": a GELU activation needs the bias and a layer that is not row-parallel ",
        "(the partial sums of a row split are not the pre-activation)"));
  }
  COLOSSAL_RETURN_IF_ERROR(table.add(name() + ".weight", w, options_.dtype,
                                     InitRule::normal(kDefaultInitStd), w_split));
  if (options_.bias) {
    COLOSSAL_RETURN_IF_ERROR(
        table.add(name() + ".bias", {out_}, options_.dtype, InitRule::zeros(), b_split));
  }
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
  return run_forward(ctx, input, core::Tensor());
}

absl::StatusOr<ForwardResult> Linear::forward_add(core::Context& ctx, const core::Tensor& x,
                                                  const core::Tensor& residual) {
  if (options_.tp.enabled() || options_.activation != Activation::kNone || checkpoint()) {
    return forward_then_add(ctx, *this, x, residual);
  }
  return forward_with(ctx, x, [&] { return run_forward(ctx, x, residual); });
}

absl::StatusOr<ForwardResult> Linear::run_forward(core::Context& ctx, const core::Tensor& input,
                                                  const core::Tensor& residual) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, input, "input"));
  COLOSSAL_RETURN_IF_ERROR(require_dtype(input, options_.dtype, "input"));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor x, as_rows(input, local_in(), "input"));
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor w, weight_.value());
  core::Tensor b;
  core::gemm::GemmOptions g;
  g.trans_b = options_.layout == WeightLayout::kOutIn;
  g.varying_size = options_.varying_rows;
  // A row layer's ranks sum partial outputs: only rank 0 adds the bias.
  const bool row = options_.parallel == Parallel::kRow && options_.tp.enabled();
  if (options_.bias && (!row || options_.tp.rank() == 0)) {
    COLOSSAL_ASSIGN_OR_RETURN(b, bias_.value());
    g.epilogue = core::gemm::Epilogue::kBias;
    g.bias = &b;
  }
  std::vector<int64_t> dims(input.shape().dims().begin(), input.shape().dims().end());
  dims.back() = local_out();
  auto saved = std::make_unique<LinearSaved>();
  core::Tensor y;
  if (options_.activation == Activation::kGelu && local_out() % 8 == 0) {
    // One GEMM writes gelu(x W + b) and x W + b.
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor pre, empty(ctx, {x.dim(0), local_out()}, x.dtype()));
    g.epilogue = core::gemm::Epilogue::kBiasGelu;
    g.gelu_input = &pre;
    COLOSSAL_ASSIGN_OR_RETURN(y, core::gemm::matmul(ctx, x, w, g));
    COLOSSAL_ASSIGN_OR_RETURN(saved->pre_activation, pre.reshape(dims));
    COLOSSAL_ASSIGN_OR_RETURN(y, y.reshape(dims));
  } else if (options_.activation == Activation::kGelu) {
    // The epilogue's pre-activation output needs a width that is a multiple of 8.
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor pre, core::gemm::matmul(ctx, x, w, g));
    COLOSSAL_ASSIGN_OR_RETURN(saved->pre_activation, pre.reshape(dims));
    COLOSSAL_ASSIGN_OR_RETURN(y, gelu_forward(ctx, saved->pre_activation));
  } else if (residual.defined()) {
    COLOSSAL_ASSIGN_OR_RETURN(const core::Shape out_shape, core::Shape::make(dims));
    COLOSSAL_RETURN_IF_ERROR(require_like(ctx, residual, options_.dtype, "residual", out_shape, "the output's shape"));
    COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor r, as_rows(residual, local_out(), "residual"));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor out, empty(ctx, {x.dim(0), local_out()}, x.dtype()));
    g.beta = 1.0;
    g.addend = &r;
    COLOSSAL_RETURN_IF_ERROR(core::gemm::gemm(ctx, x, w, out, g));
    COLOSSAL_ASSIGN_OR_RETURN(y, out.reshape(dims));
  } else {
    COLOSSAL_ASSIGN_OR_RETURN(y, core::gemm::matmul(ctx, x, w, g));
    COLOSSAL_ASSIGN_OR_RETURN(y, y.reshape(dims));
  }
  if (row && options_.tp.splits_sequence()) {
    // Sequence parallelism: each rank keeps the sum over its positions.
    COLOSSAL_ASSIGN_OR_RETURN(y, reduce_scatter_sequence(ctx, options_.tp, y));
  } else if (row) {
    COLOSSAL_RETURN_IF_ERROR(all_reduce_sum(ctx, options_.tp, y, "a row-parallel output"));
  }
  saved->input = input;
  return ForwardResult{y, std::move(saved)};
}

bool Linear::fuse_input_gelu(Saved& own, Saved& producer) const {
  auto* consumer = dynamic_cast<LinearSaved*>(&own);
  auto* source = dynamic_cast<LinearSaved*>(&producer);
  if (consumer == nullptr || source == nullptr || !source->pre_activation.defined() ||
      source->grad_is_pre_activation || consumer->input_pre_activation.defined()) {
    return false;
  }
  if (options_.region_grad != nullptr || local_in() % 8 != 0) return false;
  if (source->pre_activation.shape() != consumer->input.shape() ||
      source->pre_activation.dtype() != consumer->input.dtype()) {
    return false;
  }
  consumer->input_pre_activation = source->pre_activation;
  source->grad_is_pre_activation = true;
  return true;
}

absl::StatusOr<core::Tensor> Linear::backward_impl(core::Context& ctx, Saved& saved,
                                                   const core::Tensor& grad_output) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, grad_output, "grad_output"));
  COLOSSAL_ASSIGN_OR_RETURN(LinearSaved * s, saved_as<LinearSaved>(saved));
  COLOSSAL_RETURN_IF_ERROR(require_dtype(grad_output, options_.dtype, "grad_output"));
  const bool row = options_.parallel == Parallel::kRow && options_.tp.enabled();
  core::Tensor grad = grad_output;
  if (s->pre_activation.defined() && !s->grad_is_pre_activation) {
    // GELU's backward was not folded into the next layer's GEMM.
    COLOSSAL_ASSIGN_OR_RETURN(grad, gelu_backward(ctx, grad_output, s->pre_activation));
  }
  if (row && options_.tp.splits_sequence()) {
    // The bias (added once, by rank 0, to every position) takes this rank's
    // positions' part here, the others' on their ranks: a partial sum the
    // plugin adds up over the group. The GEMMs take every position's
    // gradient, gathered.
    if (options_.bias) {
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor rows, as_rows(grad_output, local_out(), "grad_output"));
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor db, bias_.grad());
      COLOSSAL_RETURN_IF_ERROR(accumulate_column_sums(ctx, rows, db));
    }
    COLOSSAL_ASSIGN_OR_RETURN(grad, gather_sequence(ctx, options_.tp, grad_output));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dy, as_rows(grad, local_out(), "grad_output"));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor x, as_rows(s->input, local_in(), "saved input"));
  if (dy.dim(0) != x.dim(0)) {
    return absl::InvalidArgumentError("grad_output does not match the forward's input rows");
  }
  const bool in_out = options_.layout == WeightLayout::kInOut;
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor w, weight_.value());
  RegionGrad* region = options_.region_grad.get();
  core::Tensor dx;
  if (region != nullptr) {
    // The input gradient first, added into the region's sum, so that its
    // reduction runs during the weight-gradient GEMM below.
    dx = region->sum();
    if (!dx.defined()) {
      COLOSSAL_ASSIGN_OR_RETURN(dx, core::gemm::matmul(ctx, dy, w, {.trans_b = in_out, .varying_size = options_.varying_rows}));
      COLOSSAL_ASSIGN_OR_RETURN(dx, dx.reshape(s->input.shape().dims()));
    } else {
      COLOSSAL_ASSIGN_OR_RETURN(core::Tensor rows, as_rows(dx, local_in(), "the region's sum"));
      if (rows.dim(0) != dy.dim(0)) {
        return absl::InternalError(absl::StrCat(name(), ": the region's input-gradient sum is ",
                                                dx.to_string(), "; this layer's input is ",
                                                s->input.to_string()));
      }
      COLOSSAL_RETURN_IF_ERROR(
          core::gemm::gemm(ctx, dy, w, rows, {.trans_b = in_out, .beta = 1.0, .varying_size = options_.varying_rows}));
    }
    COLOSSAL_RETURN_IF_ERROR(region->contributed(ctx, dx));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dw, weight_.grad());
  // Weight gradient, accumulated: [in, out] += x^T dy, or [out, in] += dy^T x.
  if (in_out) {
    COLOSSAL_RETURN_IF_ERROR(
        core::gemm::gemm(ctx, x, dy, dw, {.trans_a = true, .beta = 1.0, .varying_size = options_.varying_rows}));
  } else {
    COLOSSAL_RETURN_IF_ERROR(
        core::gemm::gemm(ctx, dy, x, dw, {.trans_a = true, .beta = 1.0, .varying_size = options_.varying_rows}));
  }
  if (options_.bias && !(row && options_.tp.splits_sequence())) {
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor db, bias_.grad());
    COLOSSAL_RETURN_IF_ERROR(accumulate_column_sums(ctx, dy, db));
  }
  if (region != nullptr) return dx;
  if (s->input_pre_activation.defined()) {
    // fuse_input_gelu: the gradient with respect to the producer's pre-activation.
    COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor pre,
                              as_rows(s->input_pre_activation, local_in(), "pre-activation"));
    COLOSSAL_ASSIGN_OR_RETURN(
        dx, core::gemm::matmul(ctx, dy, w,
                               {.trans_b = in_out,
                                .varying_size = options_.varying_rows,
                                .epilogue = core::gemm::Epilogue::kDGelu,
                                .gelu_input = &pre}));
  } else {
    COLOSSAL_ASSIGN_OR_RETURN(dx, core::gemm::matmul(ctx, dy, w, {.trans_b = in_out, .varying_size = options_.varying_rows}));
  }
  return dx.reshape(s->input.shape().dims());
}

}  // namespace colossal::nn
