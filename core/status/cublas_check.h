// colossal::core — CUBLAS_CHECK: abort on a failed cuBLAS / cuBLASLt call.
//
//   #if COLOSSAL_WITH_CUDA
//   CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
//   #endif
// prints, on failure,
//   core/gemm/gemm_cuda.cc:140: cuBLAS error 7 (CUBLAS_STATUS_INVALID_VALUE):
//   an invalid numeric value was used as an argument in cublasLtMatmulDescCreate(...)
// and aborts. cuBLASLt returns cublasStatus_t too, so this checks both.
// Available only when COLOSSAL_WITH_CUDA is 1 (the header is empty otherwise).
#ifndef COLOSSAL_CORE_STATUS_CUBLAS_CHECK_H_
#define COLOSSAL_CORE_STATUS_CUBLAS_CHECK_H_

#include "bazel/cuda_config.h"
#include "core/status/check.h"

#if COLOSSAL_WITH_CUDA
#include <cublas_api.h>

// Aborts with file:line, the expression, the status name and
// cublasGetStatusString() unless `expr` returns CUBLAS_STATUS_SUCCESS.
#define CUBLAS_CHECK(expr)                                                                  \
  COLOSSAL_CHECK_LIBRARY_CALL_NAMED("cuBLAS", expr, CUBLAS_STATUS_SUCCESS, cublasGetStatusName, \
                                    cublasGetStatusString)

#endif  // COLOSSAL_WITH_CUDA

#endif  // COLOSSAL_CORE_STATUS_CUBLAS_CHECK_H_
