// Random fills: validation, a reservation of numel() numbers from the
// context's generator, then kernels/random on the CPU or ctx.compute_stream().
#include "core/ops/random.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "core/ops/ops_internal.h"
#include "kernels/random/random.h"

namespace colossal::core::ops {
namespace {

namespace kr = kernels::random;
using internal::invalid;

enum class Dist { kUniform, kNormal };

// The op's name in messages.
const char* dist_name(Dist d) { return d == Dist::kUniform ? "uniform" : "normal"; }

// (a, b) is (lo, hi) for uniform and (mean, std) for normal, as the kernels take them.
absl::Status check_parameters(Dist d, double a, double b) {
  if (d == Dist::kUniform &&
      (!std::isfinite(a) || !std::isfinite(b) || !(a <= b) || !std::isfinite(b - a))) {
    return invalid("uniform",
                   absl::StrCat("the bounds must be finite with lo <= hi (and hi - lo finite), "
                                "not lo = ", a, ", hi = ", b));
  }
  if (d == Dist::kNormal && (!std::isfinite(a) || !std::isfinite(b) || !(b >= 0))) {
    return invalid("normal", absl::StrCat("mean must be finite and std finite and >= 0, not "
                                          "mean = ", a, ", std = ", b));
  }
  return absl::OkStatus();
}

// Validates, reserves out.numel() numbers of the context's stream, fills.
absl::Status fill_random(Context& ctx, Dist d, Tensor& out, double a, double b) {
  const char* op = dist_name(d);
  COLOSSAL_RETURN_IF_ERROR(internal::check_operand(ctx, op, "out", out));
  COLOSSAL_RETURN_IF_ERROR(internal::check_floating(op, out.dtype()));
  COLOSSAL_RETURN_IF_ERROR(check_parameters(d, a, b));
  const RngState r = ctx.next_offset(static_cast<uint64_t>(out.numel()));
  if (d == Dist::kUniform) {
    return COLOSSAL_OPS_LAUNCH(ctx, op, kr::fill_uniform_cpu, kr::fill_uniform_cuda,
                               out.raw_data(), a, b, r.seed, r.offset, out.numel(), out.dtype());
  }
  return COLOSSAL_OPS_LAUNCH(ctx, op, kr::fill_normal_cpu, kr::fill_normal_cuda, out.raw_data(), a,
                             b, r.seed, r.offset, out.numel(), out.dtype());
}

// A new tensor, filled; nothing is allocated or reserved when the arguments are wrong.
absl::StatusOr<Tensor> make_random(Context& ctx, Dist d, const Shape& shape, DType dtype, double a,
                                   double b) {
  COLOSSAL_RETURN_IF_ERROR(internal::check_floating(dist_name(d), dtype));
  COLOSSAL_RETURN_IF_ERROR(check_parameters(d, a, b));
  COLOSSAL_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(shape, dtype, ctx.compute_stream()));
  COLOSSAL_RETURN_IF_ERROR(fill_random(ctx, d, out, a, b));
  return out;
}

}  // namespace

absl::Status fill_uniform(Context& ctx, Tensor& out, double lo, double hi) {
  return fill_random(ctx, Dist::kUniform, out, lo, hi);
}

absl::Status fill_normal(Context& ctx, Tensor& out, double mean, double std) {
  return fill_random(ctx, Dist::kNormal, out, mean, std);
}

absl::StatusOr<Tensor> uniform(Context& ctx, const Shape& shape, DType dtype, double lo,
                               double hi) {
  return make_random(ctx, Dist::kUniform, shape, dtype, lo, hi);
}

absl::StatusOr<Tensor> normal(Context& ctx, const Shape& shape, DType dtype, double mean,
                              double std) {
  return make_random(ctx, Dist::kNormal, shape, dtype, mean, std);
}

}  // namespace colossal::core::ops
