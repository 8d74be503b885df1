// Reductions: validation, then kernels/reduction's reduce_rows on the CPU or
// on ctx.compute_stream() (with stream-ordered scratch when the kernel wants it).
#include "core/ops/reduction.h"

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/ops/ops_internal.h"
#include "core/status/check.h"
#include "core/status/status.h"
#include "kernels/reduction/reduction.h"

namespace colossal::core::ops {
namespace {

namespace kr = kernels::reduction;
using internal::check_floating;
using internal::check_operand;
using internal::invalid;

kr::RowReduceOp row_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return kr::RowReduceOp::kSum;
    case ReduceOp::kMean: return kr::RowReduceOp::kMean;
    case ReduceOp::kMax: return kr::RowReduceOp::kMax;
  }
  COLOSSAL_FATAL() << "unknown ReduceOp " << static_cast<int>(op);
}

// The reduction of `in` as kernels/reduction sees it: rows x cols, and the
// shape of the result.
struct Plan {
  int64_t rows = 1;
  int64_t cols = 0;
  Shape out_shape;
};

// Checks `in` and the request; the name of the op is reduce_op_name(op).
absl::StatusOr<Plan> plan(const Context& ctx, const Tensor& in, ReduceOp op, ReduceOver over) {
  const char* name = reduce_op_name(op);
  COLOSSAL_RETURN_IF_ERROR(check_operand(ctx, name, "in", in));
  COLOSSAL_RETURN_IF_ERROR(check_floating(name, in.dtype()));
  Plan p;
  if (over == ReduceOver::kAll) {
    p.cols = in.numel();
    if (p.cols == 0 && op == ReduceOp::kMax) {
      return invalid(name, absl::StrCat(internal::describe(in), " has no elements"));
    }
    return p;  // out_shape: the scalar []
  }
  if (over != ReduceOver::kLastDim) {
    return invalid(name, absl::StrCat("unknown ReduceOver ", static_cast<int>(over)));
  }
  if (in.rank() == 0) {
    return invalid(name, absl::StrCat(internal::describe(in),
                                      " is a scalar, which has no last dimension; use "
                                      "ReduceOver::kAll"));
  }
  const absl::Span<const int64_t> dims = in.shape().dims();
  p.cols = dims.back();
  for (size_t i = 0; i + 1 < dims.size(); ++i) p.rows *= dims[i];
  if (p.cols == 0 && op == ReduceOp::kMax && p.rows > 0) {
    return invalid(name,
                   absl::StrCat("the last dimension of ", internal::describe(in), " is empty"));
  }
  absl::StatusOr<Shape> shape = Shape::make(dims.subspan(0, dims.size() - 1));
  COLOSSAL_CHECK_OK(shape.status());  // fewer elements than a valid shape
  p.out_shape = *shape;
  return p;
}

// Whether `dtype` can hold the result for an input of `in_dtype`.
bool valid_out_dtype(DType dtype, DType in_dtype) {
  return dtype == DType::kF32 || dtype == in_dtype;
}

absl::Status out_dtype_error(const char* name, DType dtype, DType in_dtype) {
  return invalid(name, absl::StrCat("the output dtype must be float32 or the input's ",
                                    dtype_name(in_dtype), ", not ", dtype_name(dtype)));
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMean: return "mean";
    case ReduceOp::kMax: return "max";
  }
  return "unknown";
}

absl::Status reduce(Context& ctx, Tensor& out, const Tensor& in, ReduceOp op, ReduceOver over) {
  const char* name = reduce_op_name(op);
  COLOSSAL_ASSIGN_OR_RETURN(const Plan p, plan(ctx, in, op, over));
  COLOSSAL_RETURN_IF_ERROR(check_operand(ctx, name, "out", out));
  if (!valid_out_dtype(out.dtype(), in.dtype())) {
    return out_dtype_error(name, out.dtype(), in.dtype());
  }
  COLOSSAL_RETURN_IF_ERROR(internal::check_out(name, out, out.dtype(), p.out_shape));
  if (internal::overlaps(out, in)) {
    return invalid(name, absl::StrCat("out (", internal::describe(out), ") overlaps in (",
                                      internal::describe(in), ")"));
  }
  const kr::RowReduceOp kop = row_op(op);
  if (ctx.device().is_cpu()) {
    return from_kernel_status(kr::reduce_rows_cpu(out.raw_data(), in.raw_data(), p.rows, p.cols,
                                                  out.dtype(), in.dtype(), kop),
                              name);
  }
#if COLOSSAL_WITH_CUDA
  const int64_t bytes = kr::reduce_rows_scratch_bytes(p.rows, p.cols, in.dtype());
  COLOSSAL_CHECK_GE(bytes, 0);
  std::shared_ptr<Storage> scratch;  // released on the compute stream, after the kernels
  if (bytes > 0) {
    absl::StatusOr<std::shared_ptr<Storage>> s =
        Storage::allocate(ctx.allocator(), static_cast<size_t>(bytes), ctx.compute_stream());
    if (!s.ok()) return annotate(s.status(), absl::StrCat(name, ": reduction scratch"));
    scratch = *std::move(s);
  }
  return internal::launch_cuda(ctx, name, [&](CUstream_st* stream) {
    return kr::reduce_rows_cuda(out.raw_data(), in.raw_data(), scratch ? scratch->data() : nullptr,
                                bytes, p.rows, p.cols, out.dtype(), in.dtype(), kop, stream);
  });
#else
  return internal::built_without_cuda(ctx, name);
#endif
}

absl::StatusOr<Tensor> reduce(Context& ctx, const Tensor& in, ReduceOp op, ReduceOver over,
                              std::optional<DType> out_dtype) {
  const char* name = reduce_op_name(op);
  COLOSSAL_ASSIGN_OR_RETURN(const Plan p, plan(ctx, in, op, over));
  const DType dtype = out_dtype.value_or(in.dtype());
  if (!valid_out_dtype(dtype, in.dtype())) return out_dtype_error(name, dtype, in.dtype());
  COLOSSAL_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(p.out_shape, dtype, ctx.compute_stream()));
  COLOSSAL_RETURN_IF_ERROR(reduce(ctx, out, in, op, over));
  return out;
}

absl::Status sum(Context& ctx, Tensor& out, const Tensor& in, ReduceOver over) {
  return reduce(ctx, out, in, ReduceOp::kSum, over);
}
absl::Status mean(Context& ctx, Tensor& out, const Tensor& in, ReduceOver over) {
  return reduce(ctx, out, in, ReduceOp::kMean, over);
}
absl::Status max(Context& ctx, Tensor& out, const Tensor& in, ReduceOver over) {
  return reduce(ctx, out, in, ReduceOp::kMax, over);
}
absl::StatusOr<Tensor> sum(Context& ctx, const Tensor& in, ReduceOver over,
                           std::optional<DType> out_dtype) {
  return reduce(ctx, in, ReduceOp::kSum, over, out_dtype);
}
absl::StatusOr<Tensor> mean(Context& ctx, const Tensor& in, ReduceOver over,
                            std::optional<DType> out_dtype) {
  return reduce(ctx, in, ReduceOp::kMean, over, out_dtype);
}
absl::StatusOr<Tensor> max(Context& ctx, const Tensor& in, ReduceOver over,
                           std::optional<DType> out_dtype) {
  return reduce(ctx, in, ReduceOp::kMax, over, out_dtype);
}

}  // namespace colossal::core::ops
