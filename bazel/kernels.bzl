"""Macros for colossal's C++ targets: kernel families, tests and benchmarks.

A kernel family is one cc_library with a CPU implementation and, when
//bazel:cuda is on, a CUDA implementation compiled by nvcc:

    colossal_kernel_library(
        name = "reduce",
        hdrs = ["reduce.h"],
        cpu_srcs = ["reduce_cpu.cc"],
        cuda_srcs = ["reduce.cu"],
    )

Its header declares the CUDA functions under `#if COLOSSAL_WITH_CUDA`.
"""

load("//bazel:copts.bzl", "COLOSSAL_COPTS")
load("//bazel:cuda.bzl", "cuda_library")

def colossal_kernel_library(name, hdrs, cpu_srcs, cuda_srcs = [], private_hdrs = [], deps = [],
                            visibility = ["//visibility:public"], cpu_copts = [],
                            cpu_linkopts = []):
    """One kernel family: `name` (CPU + CUDA when enabled).

    cpu_copts/cpu_linkopts apply to the CPU sources only, e.g. -fopenmp for
    loops over rows in parallel.
    """
    cuda_deps = []
    if cuda_srcs:
        cuda_library(
            name = name + "_cuda",
            srcs = cuda_srcs + private_hdrs,
            hdrs = hdrs,
            deps = deps + ["//kernels/common:cuda_utils", "//bazel:cuda_config"],
            visibility = ["//visibility:private"],
        )
        cuda_deps = select({
            "//bazel:cuda_enabled": [":" + name + "_cuda"],
            "//conditions:default": [],
        })
    native.cc_library(
        name = name,
        hdrs = hdrs,
        srcs = cpu_srcs + private_hdrs,
        copts = COLOSSAL_COPTS + cpu_copts,
        linkopts = cpu_linkopts,
        deps = deps + ["//kernels/common", "//bazel:cuda_config"] + cuda_deps,
        visibility = visibility,
    )

def colossal_cc_test(name, srcs, deps = [], gpu = False, multi_gpu = False, size = "small",
                     tags = [], copts = [], **kwargs):
    """A GoogleTest binary. gpu/multi_gpu tag it for tools/gpu/bundle.sh; without a
    device its GPU cases skip (tests/util:gpu_test). copts: added to the project's."""
    extra_tags = (["gpu"] if gpu else []) + (["multi_gpu"] if multi_gpu else [])
    native.cc_test(
        name = name,
        srcs = srcs,
        copts = COLOSSAL_COPTS + copts,
        deps = deps + ["@com_google_googletest//:gtest_main"],
        size = size,
        tags = tags + extra_tags,
        **kwargs
    )

def colossal_cc_benchmark(name, srcs, deps = [], gpu = False, tags = [], **kwargs):
    """A Google Benchmark binary; run it directly or through tools/gpu/run.sh."""
    native.cc_binary(
        name = name,
        srcs = srcs,
        copts = COLOSSAL_COPTS,
        deps = deps + ["@com_github_google_benchmark//:benchmark"],
        tags = tags + ["benchmark"] + (["gpu"] if gpu else []),
        **kwargs
    )
