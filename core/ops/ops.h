// colossal::core::ops — Tensor ops on the CPU and CUDA, all of them.
//
// Free functions in namespace colossal::core::ops that take the Context first
// (its device, its compute stream, its allocator and its random generator)
// and return absl::Status (writing into an `out` tensor) or
// absl::StatusOr<Tensor> (allocating the result):
//   core/ops/elementwise.h  add, sub, mul, scale, axpby, cast, fill / full
//   core/ops/reduction.h    sum, mean, max over the last dimension or all elements
//   core/ops/random.h       fill_uniform / uniform, fill_normal / normal
// GEMM is core/gemm/gemm.h. Depend on //core/ops for everything, or on one of
// //core/ops:elementwise, :reduction, :random.
//
//   Context& ctx = Context::get();
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor x, ops::normal(ctx, {4, 7}, DType::kF32));
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor y, ops::scale(ctx, x, 2.0));
//   COLOSSAL_RETURN_IF_ERROR(ops::add(ctx, y, y, x));                      // y = 3x, in place
//   COLOSSAL_ASSIGN_OR_RETURN(Tensor s, ops::sum(ctx, y, ops::ReduceOver::kLastDim));  // [4]
#ifndef COLOSSAL_CORE_OPS_OPS_H_
#define COLOSSAL_CORE_OPS_OPS_H_

#include "core/ops/elementwise.h"
#include "core/ops/random.h"
#include "core/ops/reduction.h"

#endif  // COLOSSAL_CORE_OPS_OPS_H_
