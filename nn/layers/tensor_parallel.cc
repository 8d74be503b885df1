#include "nn/layers/tensor_parallel.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {

namespace {
struct NothingSaved : Saved {
  SavedStats stats() const override { return {}; }
};
}  // namespace

absl::StatusOr<ForwardResult> TensorParallelRegion::forward_impl(core::Context& ctx,
                                                                 const core::Tensor& input) {
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor x, region_input(ctx, tp_, input));
  return ForwardResult{x, std::make_unique<NothingSaved>()};
}

absl::StatusOr<core::Tensor> TensorParallelRegion::backward_impl(core::Context& ctx, Saved& saved,
                                                                 const core::Tensor& grad_output) {
  return region_input_grad(ctx, tp_, grad_output);
}

namespace {

// Issues `w` after ctx's compute-stream work and orders that stream after it
// (CUDA), or waits for it (CPU).
absl::Status finish(core::Context& ctx, absl::StatusOr<comm::WorkPtr> w, bool cuda,
                    const char* what) {
  if (!w.ok()) return core::annotate(w.status(), what);
  if (cuda) {
    (*w)->wait_stream(ctx.compute_stream());
    return absl::OkStatus();
  }
  return core::annotate((*w)->wait(), what);
}

comm::CollectiveOptions on_compute(core::Context& ctx, bool cuda) {
  comm::CollectiveOptions o;
  if (cuda) o.stream = ctx.compute_stream();
  return o;
}

// [B, T, C] -> (B, T, row bytes); InvalidArgument unless T splits over the group.
struct SeqShape {
  int64_t B, T, Tc;
  size_t row;  // bytes of one position
};
absl::StatusOr<SeqShape> seq_shape(const TensorParallel& tp, const core::Tensor& x, int64_t T) {
  if (x.rank() < 2 || x.dim(1) != T) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence parallelism: ", x.to_string(), " is not [B, ", T, ", ...]"));
  }
  if (T % tp.size() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence parallelism: the sequence length ", T, " does not split over ",
                     tp.size(), " tensor-parallel ranks (make seq_len a multiple of tp_size)"));
  }
  return SeqShape{x.dim(0), T, T / tp.size(),
                  static_cast<size_t>(x.numel() / (x.dim(0) * T)) * core::dtype_size(x.dtype())};
}

std::vector<int64_t> with_dim1(const core::Tensor& x, int64_t t) {
  std::vector<int64_t> d(x.shape().dims().begin(), x.shape().dims().end());
  d[1] = t;
  return d;
}

}  // namespace

absl::Status all_reduce(core::Context& ctx, const TensorParallel& tp, const core::Tensor& t,
                        comm::ReduceOp op, const char* what) {
  if (!tp.enabled()) return absl::OkStatus();
  const bool cuda = t.device().is_cuda();
  return finish(ctx, tp.group->all_reduce(t, op, on_compute(ctx, cuda)), cuda,
                absl::StrCat("tensor parallel: reducing ", what).c_str());
}

absl::Status all_reduce_sum(core::Context& ctx, const TensorParallel& tp, const core::Tensor& t,
                            const char* what) {
  return all_reduce(ctx, tp, t, comm::ReduceOp::kSum, what);
}

absl::StatusOr<core::Tensor> sequence_chunk(core::Context& ctx, const TensorParallel& tp,
                                            const core::Tensor& x) {
  COLOSSAL_ASSIGN_OR_RETURN(SeqShape s, seq_shape(tp, x, x.rank() >= 2 ? x.dim(1) : 0));
  COLOSSAL_ASSIGN_OR_RETURN(core::Shape shape, core::Shape::make(with_dim1(x, s.Tc)));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor out, empty(ctx, shape, x.dtype()));
  const char* src = static_cast<const char*>(x.raw_data()) + tp.rank() * s.Tc * s.row;
  COLOSSAL_RETURN_IF_ERROR(
      copy_2d(ctx, out.raw_data(), s.Tc * s.row, src, s.T * s.row, s.Tc * s.row, s.B));
  return out;
}

absl::StatusOr<core::Tensor> gather_sequence(core::Context& ctx, const TensorParallel& tp,
                                             const core::Tensor& chunk) {
  const int64_t Tc = chunk.rank() >= 2 ? chunk.dim(1) : 0;
  COLOSSAL_ASSIGN_OR_RETURN(SeqShape s, seq_shape(tp, chunk, Tc));
  s.T = Tc * tp.size();
  const bool cuda = chunk.device().is_cuda();
  // Rank-major [size, B, Tc, ...], then each rank's block into its positions.
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor all,
                            empty(ctx, {tp.size() * chunk.numel()}, chunk.dtype()));
  COLOSSAL_RETURN_IF_ERROR(finish(ctx, tp.group->all_gather(all, chunk, on_compute(ctx, cuda)),
                                  cuda, "sequence parallelism: gathering the sequence"));
  COLOSSAL_ASSIGN_OR_RETURN(core::Shape shape, core::Shape::make(with_dim1(chunk, s.T)));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor out, empty(ctx, shape, chunk.dtype()));
  const size_t block = static_cast<size_t>(s.B) * Tc * s.row;
  for (int q = 0; q < tp.size(); ++q) {
    COLOSSAL_RETURN_IF_ERROR(
        copy_2d(ctx, static_cast<char*>(out.raw_data()) + q * Tc * s.row, s.T * s.row,
                static_cast<const char*>(all.raw_data()) + q * block, Tc * s.row, Tc * s.row, s.B));
  }
  return out;
}

absl::StatusOr<core::Tensor> reduce_scatter_sequence(core::Context& ctx, const TensorParallel& tp,
                                                     const core::Tensor& x) {
  COLOSSAL_ASSIGN_OR_RETURN(SeqShape s, seq_shape(tp, x, x.rank() >= 2 ? x.dim(1) : 0));
  const bool cuda = x.device().is_cuda();
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor packed, empty(ctx, {x.numel()}, x.dtype()));
  const size_t block = static_cast<size_t>(s.B) * s.Tc * s.row;
  for (int q = 0; q < tp.size(); ++q) {
    COLOSSAL_RETURN_IF_ERROR(copy_2d(
        ctx, static_cast<char*>(packed.raw_data()) + q * block, s.Tc * s.row,
        static_cast<const char*>(x.raw_data()) + q * s.Tc * s.row, s.T * s.row, s.Tc * s.row, s.B));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Shape shape, core::Shape::make(with_dim1(x, s.Tc)));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor out, empty(ctx, shape, x.dtype()));
  COLOSSAL_RETURN_IF_ERROR(finish(
      ctx, tp.group->reduce_scatter(out, packed, comm::ReduceOp::kSum, on_compute(ctx, cuda)), cuda,
      "sequence parallelism: reduce-scattering the sequence"));
  return out;
}

absl::StatusOr<core::Tensor> pad_sequence(core::Context& ctx, const TensorParallel& tp,
                                          const core::Tensor& chunk) {
  const int64_t Tc = chunk.rank() >= 2 ? chunk.dim(1) : 0;
  COLOSSAL_ASSIGN_OR_RETURN(SeqShape s, seq_shape(tp, chunk, Tc));
  s.T = Tc * tp.size();
  COLOSSAL_ASSIGN_OR_RETURN(core::Shape shape, core::Shape::make(with_dim1(chunk, s.T)));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor out, empty(ctx, shape, chunk.dtype()));
  COLOSSAL_RETURN_IF_ERROR(fill(ctx, out, 0.0));
  COLOSSAL_RETURN_IF_ERROR(copy_2d(ctx, static_cast<char*>(out.raw_data()) + tp.rank() * Tc * s.row,
                                   s.T * s.row, chunk.raw_data(), Tc * s.row, Tc * s.row, s.B));
  return out;
}

absl::StatusOr<core::Tensor> region_input(core::Context& ctx, const TensorParallel& tp,
                                          const core::Tensor& x) {
  if (!tp.splits_sequence()) return x;
  return gather_sequence(ctx, tp, x);
}

absl::StatusOr<core::Tensor> region_input_grad(core::Context& ctx, const TensorParallel& tp,
                                               const core::Tensor& dx) {
  if (tp.splits_sequence()) return reduce_scatter_sequence(ctx, tp, dx);
  // Summed in place: the region's own input gradient, read by nothing else.
  COLOSSAL_RETURN_IF_ERROR(all_reduce_sum(ctx, tp, dx, "a region's input gradient"));
  return dx;
}

}  // namespace colossal::nn
