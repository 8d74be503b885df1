// colossal::comm — NCCL_CHECK: abort on a failed NCCL call (file:line, the
// call, NCCL's error string), for calls that fail only through a bug or a
// device fault. Calls a user can make fail (communicator setup) are turned
// into absl::Status where they happen instead.
//
//   NCCL_CHECK(ncclGroupStart());
//
// Available only when COLOSSAL_WITH_CUDA is 1 (the header is empty otherwise).
#ifndef COLOSSAL_COMM_NCCL_NCCL_CHECK_H_
#define COLOSSAL_COMM_NCCL_NCCL_CHECK_H_

#include "bazel/cuda_config.h"
#include "core/status/check.h"

#if COLOSSAL_WITH_CUDA
#include <nccl.h>

#define NCCL_CHECK(expr) COLOSSAL_CHECK_LIBRARY_CALL("NCCL", expr, ncclSuccess, ncclGetErrorString)

#endif  // COLOSSAL_WITH_CUDA

#endif  // COLOSSAL_COMM_NCCL_NCCL_CHECK_H_
