#include "nn/layers/sparse_moe.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "kernels/moe/moe.h"
#include "nn/layers/llama_projection.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {
namespace {

struct SparseMoeSaved : Saved {
  SavedStats stats() const override {
    SavedStats s = saved_stats({logits, weights, experts, slots, ys}, {gate.get()});
    for (const auto& e : expert_saved) {
      const SavedStats c = e->stats();
      s.tensors += c.tensors;
      s.bytes += c.bytes;
    }
    return s;
  }
  std::unique_ptr<Saved> gate;
  std::vector<std::unique_ptr<Saved>> expert_saved;
  core::Tensor logits;   // [N, E]
  core::Tensor weights;  // [N, k] float32 (float64 for float64 models)
  core::Tensor experts;  // [N, k] int32, on the device
  core::Tensor slots;    // [N, k] int32, on the device
  std::vector<int64_t> offsets;  // expert e's rows: [offsets[e], offsets[e + 1])
  core::Tensor ys;       // the experts' outputs [N * k, C], expert-sorted
  core::Shape input_shape;
};

core::DType weight_dtype(core::DType dtype) {
  return dtype == core::DType::kF64 ? core::DType::kF64 : core::DType::kF32;
}

}  // namespace

SparseMoe::SparseMoe(std::string name, const SparseMoeShape& shape, core::DType dtype)
    : Module(name),
      shape_(shape),
      dtype_(dtype),
      gate_(name + ".gate", shape.hidden, shape.num_experts,
            internal::llama_projection(/*bias=*/false, dtype, Parallel::kNone, {})) {
  register_child(&gate_);
  for (int64_t j = 0; j < shape.num_experts; ++j) {
    experts_.push_back(std::make_unique<LlamaMlp>(absl::StrCat(name, ".experts.", j), shape.hidden,
                                                  shape.intermediate, /*bias=*/false, dtype,
                                                  TensorParallel{}, LlamaMlpNames{"w1", "w3", "w2"},
                                                  /*varying_rows=*/true));
    register_child(experts_.back().get());
  }
}

absl::StatusOr<ForwardResult> SparseMoe::forward_impl(core::Context& ctx, const core::Tensor& input) {
  return run_forward(ctx, input, core::Tensor());
}

absl::StatusOr<ForwardResult> SparseMoe::forward_add(core::Context& ctx, const core::Tensor& x,
                                                     const core::Tensor& residual) {
  if (checkpoint()) return forward_then_add(ctx, *this, x, residual);
  return forward_with(ctx, x, [&] { return run_forward(ctx, x, residual); });
}

absl::StatusOr<ForwardResult> SparseMoe::run_forward(core::Context& ctx, const core::Tensor& input,
                                                     const core::Tensor& residual) {
  COLOSSAL_RETURN_IF_ERROR(require_device(ctx, input, "input"));
  COLOSSAL_RETURN_IF_ERROR(require_dtype(input, dtype_, "input"));
  if (residual.defined()) {
    COLOSSAL_RETURN_IF_ERROR(require_like(ctx, residual, dtype_, "residual", input.shape(), "input"));
  }
  const int64_t C = shape_.hidden, E = shape_.num_experts, k = shape_.top_k;
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor x, as_rows(input, C, "input"));
  const int64_t N = x.dim(0);
  auto saved = std::make_unique<SparseMoeSaved>();
  saved->input_shape = input.shape();

  // Route: the gate's logits, then the top-k choice and its weights.
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult g, gate_.forward(ctx, x));
  saved->gate = std::move(g.saved);
  saved->logits = g.output;
  COLOSSAL_ASSIGN_OR_RETURN(saved->weights, empty(ctx, {N, k}, weight_dtype(dtype_)));
  COLOSSAL_ASSIGN_OR_RETURN(saved->experts, empty(ctx, {N, k}, core::DType::kI32));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx,
          kernels::moe::route_forward_cpu(saved->weights.raw_data(), saved->experts.data<int32_t>(),
                                          g.output.raw_data(), N, E, k, shape_.normalize_top_k, dtype_),
          kernels::moe::route_forward_cuda(saved->weights.raw_data(), saved->experts.data<int32_t>(),
                                           g.output.raw_data(), N, E, k, shape_.normalize_top_k, dtype_,
                                           cuda_stream(ctx))),
      "moe route forward"));

  // The choice on the host (a device-to-host copy returns once the data is
  // there): each expert's rows, then the slots back on the device.
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor host_experts,
                            saved->experts.to(core::Device::cpu(), ctx.compute_stream()));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host_slots,
                            core::Tensor::empty({N, k}, core::DType::kI32, core::Stream::cpu()));
  saved->offsets.assign(E + 1, 0);
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      kernels::moe::expert_slots(host_slots.data<int32_t>(), saved->offsets.data(),
                                 host_experts.data<int32_t>(), N, E, k),
      "moe expert slots"));
  COLOSSAL_ASSIGN_OR_RETURN(saved->slots, host_slots.to(ctx.device(), ctx.compute_stream()));

  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor rows, empty(ctx, {N * k, C}, dtype_));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(ctx,
                            kernels::moe::dispatch_cpu(rows.raw_data(), x.raw_data(),
                                                       saved->slots.data<int32_t>(), N, k, C, dtype_),
                            kernels::moe::dispatch_cuda(rows.raw_data(), x.raw_data(),
                                                        saved->slots.data<int32_t>(), N, k, C, dtype_,
                                                        cuda_stream(ctx))),
      "moe dispatch"));

  // Every expert runs, on its rows (possibly none).
  COLOSSAL_ASSIGN_OR_RETURN(saved->ys, empty(ctx, {N * k, C}, dtype_));
  for (int64_t e = 0; e < E; ++e) {
    COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor xe, rows.slice(saved->offsets[e], saved->offsets[e + 1]));
    COLOSSAL_ASSIGN_OR_RETURN(ForwardResult ye, experts_[e]->forward(ctx, xe));
    saved->expert_saved.push_back(std::move(ye.saved));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dst, saved->ys.slice(saved->offsets[e], saved->offsets[e + 1]));
    if (dst.numel() > 0) COLOSSAL_RETURN_IF_ERROR(dst.copy_from(ye.output, ctx.compute_stream()));
  }

  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor out, empty(ctx, input.shape(), dtype_));
  const void* res = residual.defined() ? residual.raw_data() : nullptr;
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx,
          kernels::moe::combine_cpu(out.raw_data(), saved->ys.raw_data(), saved->slots.data<int32_t>(),
                                    saved->weights.raw_data(), res, N, k, C, dtype_),
          kernels::moe::combine_cuda(out.raw_data(), saved->ys.raw_data(), saved->slots.data<int32_t>(),
                                     saved->weights.raw_data(), res, N, k, C, dtype_, cuda_stream(ctx))),
      "moe combine"));
  return ForwardResult{out, std::move(saved)};
}

absl::StatusOr<core::Tensor> SparseMoe::backward_impl(core::Context& ctx, Saved& saved,
                                                      const core::Tensor& grad_output) {
  COLOSSAL_ASSIGN_OR_RETURN(SparseMoeSaved * s, saved_as<SparseMoeSaved>(saved));
  COLOSSAL_RETURN_IF_ERROR(require_like(ctx, grad_output, dtype_, "grad_output", s->input_shape, "input"));
  const int64_t C = shape_.hidden, E = shape_.num_experts, k = shape_.top_k;
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor dy, as_rows(grad_output, C, "grad_output"));
  const int64_t N = dy.dim(0);
  const int32_t* slots = s->slots.data<int32_t>();

  // out[t] = sum_i w[t, i] ys[slot]: the experts' output gradients and the weights'.
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dys, empty(ctx, {N * k, C}, dtype_));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dweights, empty(ctx, {N, k}, weight_dtype(dtype_)));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx,
          kernels::moe::combine_backward_cpu(dys.raw_data(), dweights.raw_data(), dy.raw_data(),
                                             s->ys.raw_data(), slots, s->weights.raw_data(), N, k, C, dtype_),
          kernels::moe::combine_backward_cuda(dys.raw_data(), dweights.raw_data(), dy.raw_data(),
                                              s->ys.raw_data(), slots, s->weights.raw_data(), N, k, C,
                                              dtype_, cuda_stream(ctx))),
      "moe combine backward"));

  // Each expert's backward (every one, as in the forward), into the rows' gradient.
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor drows, empty(ctx, {N * k, C}, dtype_));
  for (int64_t e = E - 1; e >= 0; --e) {
    const int64_t begin = s->offsets[e], end = s->offsets[e + 1];
    COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor dye, dys.slice(begin, end));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dxe, experts_[e]->backward(ctx, *s->expert_saved[e], dye));
    COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dst, drows.slice(begin, end));
    if (dst.numel() > 0) COLOSSAL_RETURN_IF_ERROR(dst.copy_from(dxe, ctx.compute_stream()));
  }

  // The router: dlogits from the weights' gradient, then the gate's input gradient.
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dlogits, empty(ctx, {N, E}, dtype_));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(
          ctx,
          kernels::moe::route_backward_cpu(dlogits.raw_data(), dweights.raw_data(), s->logits.raw_data(),
                                           s->experts.data<int32_t>(), N, E, k, shape_.normalize_top_k,
                                           dtype_),
          kernels::moe::route_backward_cuda(dlogits.raw_data(), dweights.raw_data(), s->logits.raw_data(),
                                            s->experts.data<int32_t>(), N, E, k, shape_.normalize_top_k,
                                            dtype_, cuda_stream(ctx))),
      "moe route backward"));
  COLOSSAL_ASSIGN_OR_RETURN(const core::Tensor dx_gate, gate_.backward(ctx, *s->gate, dlogits));

  // dx[t] = dx_gate[t] + sum_i drows[slot]: the dispatch's transpose, with weights 1.
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dx, empty(ctx, s->input_shape, dtype_));
  COLOSSAL_RETURN_IF_ERROR(core::from_kernel_status(
      COLOSSAL_NN_ON_DEVICE(ctx,
                            kernels::moe::combine_cpu(dx.raw_data(), drows.raw_data(), slots, nullptr,
                                                      dx_gate.raw_data(), N, k, C, dtype_),
                            kernels::moe::combine_cuda(dx.raw_data(), drows.raw_data(), slots, nullptr,
                                                       dx_gate.raw_data(), N, k, C, dtype_, cuda_stream(ctx))),
      "moe combine (input gradient)"));
  return dx;
}

}  // namespace colossal::nn
