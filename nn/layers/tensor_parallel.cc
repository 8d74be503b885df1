#include "nn/layers/tensor_parallel.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/elementwise.h"
#include "core/status/status.h"
#include "nn/layers/tensor_util.h"

namespace colossal::nn {

namespace {

// Issues `w` after ctx's compute-stream work and orders that stream after it
// (CUDA), or waits for it (CPU).
absl::Status finish_work(core::Context& ctx, absl::StatusOr<comm::WorkPtr> w, bool cuda,
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

// The group a [B, T, ...] activation's positions split over: the sequence
// group under all_to_all, else the tp group (split_gather).
struct SeqGroup {
  comm::ProcessGroup* group;
  int size, rank;
  const char* ranks;  // for messages
};
SeqGroup chunk_group(const TensorParallel& tp) {
  if (tp.all_to_all()) {
    return {tp.sequence_group.get(), tp.sequence_size(), tp.sequence_rank(),
            "sequence-parallel ranks (make seq_len a multiple of sp_size)"};
  }
  return {tp.group.get(), tp.size(), tp.rank(),
          "tensor-parallel ranks (make seq_len a multiple of tp_size)"};
}

// [B, T, C] -> (B, T, row bytes); InvalidArgument unless T splits over the group.
struct SeqShape {
  int64_t B, T, Tc;
  size_t row;  // bytes of one position
};
absl::StatusOr<SeqShape> seq_shape(const SeqGroup& g, const core::Tensor& x, int64_t T) {
  if (x.rank() < 2 || x.dim(1) != T) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence parallelism: ", x.to_string(), " is not [B, ", T, ", ...]"));
  }
  if (T % g.size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("sequence parallelism: the sequence length ",
                                                   T, " does not split over ", g.size, " ",
                                                   g.ranks));
  }
  return SeqShape{x.dim(0), T, T / g.size,
                  static_cast<size_t>(x.numel() / (x.dim(0) * T)) * core::dtype_size(x.dtype())};
}
absl::StatusOr<SeqShape> seq_shape(const TensorParallel& tp, const core::Tensor& x, int64_t T) {
  return seq_shape(chunk_group(tp), x, T);
}
// A chunk [B, Tc, ...] of a sequence of Tc * size positions.
absl::StatusOr<SeqShape> chunk_shape(const SeqGroup& g, const core::Tensor& chunk) {
  if (chunk.rank() < 2 || chunk.dim(1) < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence parallelism: ", chunk.to_string(), " is not [B, T, ...]"));
  }
  const int64_t Tc = chunk.dim(1);
  return SeqShape{chunk.dim(0), Tc * g.size, Tc,
                  static_cast<size_t>(chunk.numel() / (chunk.dim(0) * Tc)) *
                      core::dtype_size(chunk.dtype())};
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
  return finish_work(ctx, tp.group->all_reduce(t, op, on_compute(ctx, cuda)), cuda,
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
  const char* src =
      static_cast<const char*>(x.raw_data()) + chunk_group(tp).rank * s.Tc * s.row;
  COLOSSAL_RETURN_IF_ERROR(
      copy_2d(ctx, out.raw_data(), s.Tc * s.row, src, s.T * s.row, s.Tc * s.row, s.B));
  return out;
}

absl::StatusOr<core::Tensor> gather_sequence(core::Context& ctx, const TensorParallel& tp,
                                             const core::Tensor& chunk) {
  // split_gather only: over the tp group.
  COLOSSAL_ASSIGN_OR_RETURN(const SeqShape s,
                            chunk_shape(SeqGroup{tp.group.get(), tp.size(), tp.rank(), ""}, chunk));
  const int64_t Tc = s.Tc;
  const bool cuda = chunk.device().is_cuda();
  // Rank-major [size, B, Tc, ...], then each rank's block into its positions.
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor all,
                            empty(ctx, {tp.size() * chunk.numel()}, chunk.dtype()));
  COLOSSAL_RETURN_IF_ERROR(finish_work(ctx, tp.group->all_gather(all, chunk, on_compute(ctx, cuda)),
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

namespace {

// A reduce-scatter along the sequence, issued: `out` is ready once `work` is
// done; `packed` (its input) must live until then.
struct ScatterIssued {
  core::Tensor out, packed;
  absl::StatusOr<comm::WorkPtr> work;
};

absl::StatusOr<ScatterIssued> issue_reduce_scatter_sequence(core::Context& ctx,
                                                            const TensorParallel& tp,
                                                            const core::Tensor& x) {
  COLOSSAL_ASSIGN_OR_RETURN(SeqShape s, seq_shape(tp, x, x.rank() >= 2 ? x.dim(1) : 0));
  const bool cuda = x.device().is_cuda();
  // Rank-major [size, B, Tc, ...]: block q holds the positions rank q keeps.
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor packed, empty(ctx, {x.numel()}, x.dtype()));
  const size_t block = static_cast<size_t>(s.B) * s.Tc * s.row;
  for (int q = 0; q < tp.size(); ++q) {
    COLOSSAL_RETURN_IF_ERROR(copy_2d(
        ctx, static_cast<char*>(packed.raw_data()) + q * block, s.Tc * s.row,
        static_cast<const char*>(x.raw_data()) + q * s.Tc * s.row, s.T * s.row, s.Tc * s.row, s.B));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Shape shape, core::Shape::make(with_dim1(x, s.Tc)));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor out, empty(ctx, shape, x.dtype()));
  auto work = tp.group->reduce_scatter(out, packed, comm::ReduceOp::kSum, on_compute(ctx, cuda));
  return ScatterIssued{out, packed, std::move(work)};
}

constexpr char kScatterWhat[] = "sequence parallelism: reduce-scattering the sequence";
constexpr char kRegionWhat[] = "tensor parallel: reducing a region's input gradient";

}  // namespace

absl::StatusOr<core::Tensor> reduce_scatter_sequence(core::Context& ctx, const TensorParallel& tp,
                                                     const core::Tensor& x) {
  COLOSSAL_ASSIGN_OR_RETURN(ScatterIssued issued, issue_reduce_scatter_sequence(ctx, tp, x));
  COLOSSAL_RETURN_IF_ERROR(
      finish_work(ctx, std::move(issued.work), x.device().is_cuda(), kScatterWhat));
  return issued.out;
}

absl::StatusOr<core::Tensor> pad_sequence(core::Context& ctx, const TensorParallel& tp,
                                          const core::Tensor& chunk) {
  const SeqGroup g = chunk_group(tp);
  COLOSSAL_ASSIGN_OR_RETURN(const SeqShape s, chunk_shape(g, chunk));
  const int64_t Tc = s.Tc;
  COLOSSAL_ASSIGN_OR_RETURN(core::Shape shape, core::Shape::make(with_dim1(chunk, s.T)));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor out, empty(ctx, shape, chunk.dtype()));
  COLOSSAL_RETURN_IF_ERROR(core::ops::fill(ctx, out, 0.0));
  COLOSSAL_RETURN_IF_ERROR(copy_2d(ctx, static_cast<char*>(out.raw_data()) + g.rank * Tc * s.row,
                                   s.T * s.row, chunk.raw_data(), Tc * s.row, Tc * s.row, s.B));
  return out;
}

namespace {

// The last dimension's split for seq_to_heads / heads_to_seq: `groups` groups
// of `cols` elements, each cut into n blocks of `block`.
struct HeadSplit {
  int64_t B, Tc, cols, block;
  size_t es;  // element bytes
};
absl::StatusOr<HeadSplit> head_split(const TensorParallel& tp, const core::Tensor& x, int groups,
                                     int64_t T_per_rank, int64_t cols) {
  const int n = tp.sequence_size();
  if (x.rank() != 3 || groups < 1 || cols % n != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("all_to_all sequence parallelism: ", x.to_string(), " is not [B, T, ", groups,
                     " x columns] with columns (heads) divisible by ", n, " ranks"));
  }
  return HeadSplit{x.dim(0), T_per_rank, cols, cols / n, core::dtype_size(x.dtype())};
}

absl::Status exchange(core::Context& ctx, const TensorParallel& tp, const core::Tensor& out,
                      const core::Tensor& in, const char* what) {
  const bool cuda = in.device().is_cuda();
  return finish_work(ctx, tp.sequence_group->all_to_all(out, in, on_compute(ctx, cuda)), cuda, what);
}

}  // namespace

absl::StatusOr<core::Tensor> seq_to_heads(core::Context& ctx, const TensorParallel& tp,
                                          const core::Tensor& x, int groups) {
  if (!tp.all_to_all()) return x;
  const int n = tp.sequence_size();
  if (x.rank() != 3 || x.dim(2) % groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat("seq_to_heads: ", x.to_string(),
                                                   " is not [B, T, ", groups, " x columns]"));
  }
  COLOSSAL_ASSIGN_OR_RETURN(HeadSplit h, head_split(tp, x, groups, x.dim(1), x.dim(2) / groups));
  // Send block j of every group to rank j: [n, B, Tc, groups, block].
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor send, empty(ctx, {x.numel()}, x.dtype()));
  const size_t rows = static_cast<size_t>(h.B * h.Tc), part = groups * h.block * h.es;
  for (int j = 0; j < n; ++j) {
    for (int g = 0; g < groups; ++g) {
      COLOSSAL_RETURN_IF_ERROR(copy_2d(
          ctx, static_cast<char*>(send.raw_data()) + j * rows * part + g * h.block * h.es, part,
          static_cast<const char*>(x.raw_data()) + (g * h.cols + j * h.block) * h.es,
          groups * h.cols * h.es, h.block * h.es, rows));
    }
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor recv, empty(ctx, {x.numel()}, x.dtype()));
  COLOSSAL_RETURN_IF_ERROR(
      exchange(ctx, tp, recv, send, "all_to_all sequence parallelism: positions to heads"));
  // Rank s's block holds positions [s Tc, (s+1) Tc): [B, T, groups * block].
  const int64_t T = h.Tc * n;
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor out, empty(ctx, {h.B, T, groups * h.block}, x.dtype()));
  for (int src = 0; src < n; ++src) {
    COLOSSAL_RETURN_IF_ERROR(copy_2d(ctx, static_cast<char*>(out.raw_data()) + src * h.Tc * part,
                                     T * part,
                                     static_cast<const char*>(recv.raw_data()) + src * rows * part,
                                     h.Tc * part, h.Tc * part, h.B));
  }
  return out;
}

absl::StatusOr<core::Tensor> heads_to_seq(core::Context& ctx, const TensorParallel& tp,
                                          const core::Tensor& y, int groups) {
  if (!tp.all_to_all()) return y;
  const int n = tp.sequence_size();
  if (y.rank() != 3 || y.dim(2) % groups != 0 || y.dim(1) % n != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("heads_to_seq: ", y.to_string(), " is not [B, T, ", groups,
                     " x columns] with T divisible by ", n, " ranks"));
  }
  const int64_t block = y.dim(2) / groups, Tc = y.dim(1) / n;
  COLOSSAL_ASSIGN_OR_RETURN(HeadSplit h, head_split(tp, y, groups, Tc, block * n));
  const size_t rows = static_cast<size_t>(h.B * h.Tc), part = groups * h.block * h.es;
  // Positions [s Tc, (s+1) Tc) to rank s: [n, B, Tc, groups * block].
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor send, empty(ctx, {y.numel()}, y.dtype()));
  for (int s = 0; s < n; ++s) {
    COLOSSAL_RETURN_IF_ERROR(copy_2d(ctx, static_cast<char*>(send.raw_data()) + s * rows * part,
                                     h.Tc * part,
                                     static_cast<const char*>(y.raw_data()) + s * h.Tc * part,
                                     y.dim(1) * part, h.Tc * part, h.B));
  }
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor recv, empty(ctx, {y.numel()}, y.dtype()));
  COLOSSAL_RETURN_IF_ERROR(
      exchange(ctx, tp, recv, send, "all_to_all sequence parallelism: heads to positions"));
  // Rank j's block is its heads of every group: columns j * block of each.
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor out,
                            empty(ctx, {h.B, h.Tc, groups * h.cols}, y.dtype()));
  for (int j = 0; j < n; ++j) {
    for (int g = 0; g < groups; ++g) {
      COLOSSAL_RETURN_IF_ERROR(copy_2d(
          ctx, static_cast<char*>(out.raw_data()) + (g * h.cols + j * h.block) * h.es,
          groups * h.cols * h.es,
          static_cast<const char*>(recv.raw_data()) + j * rows * part + g * h.block * h.es, part,
          h.block * h.es, rows));
    }
  }
  return out;
}

absl::StatusOr<double> sum_over(core::Context& ctx, comm::ProcessGroup& group, double value,
                                const char* what) {
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor t,
                            core::Tensor::empty({1}, core::DType::kF64, core::Stream::cpu()));
  t.data<double>()[0] = value;
  const bool cuda = ctx.device().is_cuda();
  if (cuda) {
    COLOSSAL_ASSIGN_OR_RETURN(t, t.to(ctx.device(), ctx.compute_stream()));
  }
  COLOSSAL_RETURN_IF_ERROR(
      finish_work(ctx, group.all_reduce(t, comm::ReduceOp::kSum, on_compute(ctx, cuda)), cuda, what));
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor host, t.to(core::Device::cpu(), ctx.compute_stream()));
  ctx.compute_stream().synchronize();
  return host.data<double>()[0];
}

absl::StatusOr<double> sum_over_sequence(core::Context& ctx, const TensorParallel& tp,
                                         double value) {
  if (!tp.all_to_all()) return value;
  return sum_over(ctx, *tp.sequence_group, value,
                  "all_to_all sequence parallelism: summing the loss");
}

absl::StatusOr<core::Tensor> region_input(core::Context& ctx, const TensorParallel& tp,
                                          const core::Tensor& x) {
  if (!tp.splits_sequence()) return x;
  return gather_sequence(ctx, tp, x);
}

RegionGrad::~RegionGrad() { reset(); }

void RegionGrad::reset() {
  // An unfinished collective still reads (and writes) our buffers: let it end.
  if (work_ != nullptr) work_->wait().IgnoreError();
  work_ = nullptr;
  arrived_ = 0;
  sum_ = packed_ = result_ = core::Tensor();
}

absl::Status RegionGrad::contributed(core::Context& ctx, core::Tensor sum) {
  if (arrived_ >= contributors_) {
    return absl::InternalError(absl::StrCat("a parallel region's input gradient has ",
                                            contributors_,
                                            " contributors; one more arrived before finish()"));
  }
  sum_ = std::move(sum);
  if (++arrived_ == contributors_) return start(ctx);
  return absl::OkStatus();
}

absl::Status RegionGrad::start(core::Context& ctx) {
  if (tp_.splits_sequence()) {
    COLOSSAL_ASSIGN_OR_RETURN(ScatterIssued issued, issue_reduce_scatter_sequence(ctx, tp_, sum_));
    if (!issued.work.ok()) return core::annotate(issued.work.status(), kScatterWhat);
    work_ = *std::move(issued.work);
    packed_ = std::move(issued.packed);
    result_ = std::move(issued.out);
  } else {
    // Summed in place: the region's own input gradient, read by nothing else.
    result_ = sum_;
    if (!tp_.enabled()) return absl::OkStatus();
    const bool cuda = sum_.device().is_cuda();
    auto work = tp_.group->all_reduce(sum_, comm::ReduceOp::kSum, on_compute(ctx, cuda));
    if (!work.ok()) return core::annotate(work.status(), kRegionWhat);
    work_ = *std::move(work);
  }
  return absl::OkStatus();
}

absl::StatusOr<core::Tensor> RegionGrad::finish(core::Context& ctx) {
  if (arrived_ != contributors_) {
    const int arrived = arrived_;
    reset();
    return absl::InternalError(absl::StrCat("a parallel region's input gradient is finished with ",
                                            arrived, " of its ", contributors_,
                                            " contributors' parts"));
  }
  absl::Status status;
  if (work_ != nullptr) {
    const bool cuda = result_.device().is_cuda();
    status = finish_work(ctx, std::move(work_), cuda,
                         tp_.splits_sequence() ? kScatterWhat : kRegionWhat);
    work_ = nullptr;
  }
  core::Tensor result = std::move(result_);
  reset();
  COLOSSAL_RETURN_IF_ERROR(status);
  return result;
}

}  // namespace colossal::nn
