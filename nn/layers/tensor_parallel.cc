#include "nn/layers/tensor_parallel.h"

#include "absl/strings/str_cat.h"
#include "core/status/status.h"

namespace colossal::nn {

absl::Status all_reduce_sum(core::Context& ctx, const TensorParallel& tp, const core::Tensor& t,
                            const char* what) {
  if (!tp.enabled()) return absl::OkStatus();
  comm::CollectiveOptions o;
  const bool cuda = t.device().is_cuda();
  if (cuda) o.stream = ctx.compute_stream();
  absl::StatusOr<comm::WorkPtr> w = tp.group->all_reduce(t, comm::ReduceOp::kSum, o);
  const std::string context = absl::StrCat("tensor parallel: summing ", what);
  if (!w.ok()) return core::annotate(w.status(), context);
  if (cuda) {
    (*w)->wait_stream(ctx.compute_stream());
    return absl::OkStatus();
  }
  return core::annotate((*w)->wait(), context);
}

namespace {
struct NothingSaved : Saved {
  SavedStats stats() const override { return {}; }
};
}  // namespace

absl::StatusOr<ForwardResult> TensorParallelRegion::forward_impl(core::Context& ctx,
                                                                 const core::Tensor& input) {
  return ForwardResult{input, std::make_unique<NothingSaved>()};
}

absl::StatusOr<core::Tensor> TensorParallelRegion::backward_impl(core::Context& ctx, Saved& saved,
                                                                 const core::Tensor& grad_output) {
  // The gradient is summed in place: it is this region's own output gradient,
  // which nothing else reads after this call.
  COLOSSAL_RETURN_IF_ERROR(all_reduce_sum(ctx, tp_, grad_output, "a region's input gradient"));
  return grad_output;
}

}  // namespace colossal::nn
