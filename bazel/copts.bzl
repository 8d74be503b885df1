"""The one source of compiler flags for colossal's own C++ and CUDA code."""

# Host C++ warnings for our code (not for system libraries, which come in as -isystem).
COLOSSAL_COPTS = [
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-sign-compare",
]

# nvcc flags added to every cuda_library (architectures come from //bazel:cuda_archs).
COLOSSAL_NVCC_FLAGS = [
    "--expt-relaxed-constexpr",
    "--extended-lambda",
    "-lineinfo",
    "-Xcudafe",
    "--diag_suppress=177",  # unused variable in templated device code
]
