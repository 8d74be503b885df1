// colossal::core — CUDA_CHECK: abort on a failed CUDA runtime call.
//
// Every CUDA runtime call in colossal is checked. A failure is a broken
// invariant or a device fault, not user input (principle 8), so it aborts:
//   core/alloc/cuda_allocator.cc:88: CUDA error 700 (cudaErrorIllegalAddress):
//   an illegal memory access was encountered in cudaStreamSynchronize(stream)
// Calls that a user can make fail (an allocation that does not fit) are
// handled where they happen and returned as absl::Status instead.
//
//   #if COLOSSAL_WITH_CUDA
//   CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
//   #endif
//
// Available only when COLOSSAL_WITH_CUDA is 1 (the header is empty otherwise).
#ifndef COLOSSAL_CORE_STATUS_CUDA_CHECK_H_
#define COLOSSAL_CORE_STATUS_CUDA_CHECK_H_

#include "bazel/cuda_config.h"
#include "core/status/check.h"

#if COLOSSAL_WITH_CUDA
#include <cuda_runtime_api.h>

// Aborts with file:line, the expression, the cudaError_t's name and
// cudaGetErrorString() unless `expr` returns cudaSuccess.
#define CUDA_CHECK(expr) \
  COLOSSAL_CHECK_LIBRARY_CALL_NAMED("CUDA", expr, cudaSuccess, cudaGetErrorName, cudaGetErrorString)

namespace colossal::core::internal {
// cudaSuccess for the errors a release call may see while the process exits
// (the CUDA runtime already unloaded, or the context destroyed): nothing is
// left to release then. Any other code is returned unchanged.
inline cudaError_t ignore_teardown_errors(cudaError_t err) {
  if (err == cudaErrorCudartUnloading || err == cudaErrorContextIsDestroyed) {
    (void)cudaGetLastError();  // clear it so later calls do not report it
    return cudaSuccess;
  }
  return err;
}
}  // namespace colossal::core::internal

// CUDA_CHECK for calls that release resources (cudaFreeAsync, cudaStreamDestroy,
// ...) from destructors, which may run during process exit: errors saying the
// runtime or context is already gone are ignored, any other error aborts.
#define CUDA_CHECK_RELEASE(expr) \
  CUDA_CHECK(::colossal::core::internal::ignore_teardown_errors(expr))

#endif  // COLOSSAL_WITH_CUDA

#endif  // COLOSSAL_CORE_STATUS_CUDA_CHECK_H_
