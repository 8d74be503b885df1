// Whether this build has a CUDA path. Depend on //bazel:cuda_config and test
//
//   #if COLOSSAL_WITH_CUDA
//   ... code that calls the CUDA runtime ...
//   #endif
//
// The macro is 1 when built with the CUDA configuration (the default when a
// toolkit is found) and 0 with --config=cpu.
#ifndef COLOSSAL_BAZEL_CUDA_CONFIG_H_
#define COLOSSAL_BAZEL_CUDA_CONFIG_H_

#ifndef COLOSSAL_WITH_CUDA
#error "COLOSSAL_WITH_CUDA is not set: depend on //bazel:cuda_config"
#endif

#endif  // COLOSSAL_BAZEL_CUDA_CONFIG_H_
