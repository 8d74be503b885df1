#include "comm/testing/reference.h"

#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "kernels/common/dispatch.h"
#include "kernels/reduce/reduce.h"

namespace colossal::comm::testing {
namespace {

using kernels::KernelStatus;

double as_double(DType dtype, const void* p, int64_t i) {
  double v = 0;
  (void)kernels::dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    v = static_cast<double>(kernels::to_math(static_cast<const T*>(p)[i]));
    return KernelStatus();
  });
  return v;
}

double eps(DType dtype) {
  switch (dtype) {
    case DType::kF32: return std::ldexp(1.0, -23);
    case DType::kBF16: return std::ldexp(1.0, -7);
    case DType::kF16: return std::ldexp(1.0, -10);
    case DType::kF64: return std::ldexp(1.0, -52);
    default: return 0;
  }
}

kernels::reduce::ReduceOp kernel_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return kernels::reduce::ReduceOp::kSum;
    case ReduceOp::kProd: return kernels::reduce::ReduceOp::kProd;
    case ReduceOp::kMax: return kernels::reduce::ReduceOp::kMax;
    case ReduceOp::kMin: return kernels::reduce::ReduceOp::kMin;
  }
  return kernels::reduce::ReduceOp::kSum;
}

}  // namespace

std::vector<uint8_t> make_input(DType dtype, int64_t count, int rank, uint32_t seed) {
  std::vector<uint8_t> bytes(static_cast<size_t>(count) * core::dtype_size(dtype));
  std::mt19937 rng(seed * 7919u + static_cast<uint32_t>(rank) * 104729u + 17u);
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> small(-100, 100);
  (void)kernels::dispatch_all_types(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = reinterpret_cast<T*>(bytes.data());
    for (int64_t i = 0; i < count; ++i) {
      if constexpr (std::is_same_v<T, kernels::Half> || std::is_same_v<T, kernels::BFloat16>) {
        p[i] = kernels::from_float<T>(static_cast<float>(real(rng)));
      } else if constexpr (std::is_floating_point_v<T>) {
        p[i] = static_cast<T>(real(rng));
      } else {
        p[i] = static_cast<T>(small(rng));
      }
    }
    return KernelStatus();
  });
  return bytes;
}

std::string check_reduction(DType dtype, ReduceOp op,
                            const std::vector<std::vector<uint8_t>>& inputs, int64_t offset,
                            const void* got, int64_t count) {
  const int P = static_cast<int>(inputs.size());
  const size_t esz = core::dtype_size(dtype);
  const bool exact = !core::dtype_is_floating(dtype) || op == ReduceOp::kMax || op == ReduceOp::kMin;
  if (exact) {
    // Serial reduction in rank order with the same kernel: exact for these ops.
    std::vector<uint8_t> want(inputs[0].begin() + offset * esz,
                              inputs[0].begin() + (offset + count) * esz);
    for (int r = 1; r < P; ++r) {
      KernelStatus s = kernels::reduce::reduce_into_cpu(want.data(), inputs[r].data() + offset * esz,
                                                        count, dtype, kernel_op(op));
      if (!s.ok()) return absl::StrCat("reference reduction failed: ", s.message());
    }
    return check_bytes(dtype, got, want.data(), count);
  }
  for (int64_t i = 0; i < count; ++i) {
    double ref = op == ReduceOp::kProd ? 1.0 : 0.0;
    double magnitude = 0;
    for (int r = 0; r < P; ++r) {
      const double x = as_double(dtype, inputs[r].data(), offset + i);
      if (op == ReduceOp::kProd) {
        ref *= x;
      } else {
        ref += x;
        magnitude += std::fabs(x);
      }
    }
    double divisor = 1;
    if (op == ReduceOp::kAvg) {
      divisor = P;
      ref /= P;
    }
    if (op == ReduceOp::kProd) magnitude = std::fabs(ref) * P;
    const double tol = 2.0 * P * eps(dtype) * magnitude / divisor + eps(dtype) * std::fabs(ref) + 1e-300;
    const double v = as_double(dtype, got, i);
    if (!(std::fabs(v - ref) <= tol)) {
      return absl::StrCat("element ", offset + i, ": got ", v, ", want ", ref, " +- ", tol, " (",
                          reduce_op_name(op), " over ", P, " ranks, ", core::dtype_name(dtype), ")");
    }
  }
  return "";
}

std::string check_bytes(DType dtype, const void* got, const void* want, int64_t count) {
  const size_t esz = core::dtype_size(dtype);
  const auto* g = static_cast<const uint8_t*>(got);
  const auto* w = static_cast<const uint8_t*>(want);
  for (int64_t i = 0; i < count; ++i) {
    if (std::memcmp(g + i * esz, w + i * esz, esz) != 0) {
      return absl::StrCat("element ", i, " of ", count, ": got ", as_double(dtype, got, i),
                          ", want ", as_double(dtype, want, i), " (", core::dtype_name(dtype), ")");
    }
  }
  return "";
}

}  // namespace colossal::comm::testing
