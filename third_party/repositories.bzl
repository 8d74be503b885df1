"""Every external repository colossal needs, all from this machine: no downloads.

Call `colossal_repositories()` from a WORKSPACE (ours, or a consumer's that has
`local_repository(name = "colossal", ...)`). System libraries come from Debian's
packages (tools/setup.sh installs them); the CUDA toolkit from $CUDA_HOME or
/usr/local/cuda. Headers and libraries are symlinked into each repository, so
they sit inside Bazel's exec root rather than on an ambient include path.
"""

load("//third_party:cuda_configure.bzl", "cuda_configure")
load("//third_party:system_library.bzl", "shim_repository", "system_library")

def colossal_repositories():
    """Declares the offline shims, the system libraries and the CUDA toolkit."""

    # Bazel 4.2's own tools load these; offline stand-ins (see each WORKSPACE file).
    for shim in ["rules_cc", "rules_java", "remote_coverage_tools"]:
        if not native.existing_rule(shim):
            shim_repository(
                name = shim,
                marker = Label("//third_party/%s:WORKSPACE" % shim),
            )

    system_library(
        name = "com_google_absl",
        build_file = Label("//third_party/absl:absl.BUILD"),
        includes = ["absl"],
        lib_prefixes = ["libabsl_"],
        debian_package = "libabsl-dev",
    )
    system_library(
        name = "com_google_googletest",
        build_file = Label("//third_party/googletest:googletest.BUILD"),
        includes = ["gtest", "gmock"],
        lib_prefixes = ["libgtest", "libgmock"],
        debian_package = "libgtest-dev libgmock-dev",
    )
    system_library(
        name = "com_github_google_benchmark",
        build_file = Label("//third_party/benchmark:benchmark.BUILD"),
        includes = ["benchmark"],
        lib_prefixes = ["libbenchmark"],
        debian_package = "libbenchmark-dev",
    )
    system_library(
        name = "lua",
        build_file = Label("//third_party/lua:lua.BUILD"),
        includes = ["lua5.4"],
        lib_prefixes = ["liblua5.4.a"],
        debian_package = "liblua5.4-dev",
    )
    system_library(
        name = "openblas",
        build_file = Label("//third_party/openblas:openblas.BUILD"),
        includes = ["openblas-pthread"],
        lib_prefixes = ["libopenblas.so"],
        debian_package = "libopenblas-dev",
    )
    system_library(
        name = "nlohmann_json",
        build_file = Label("//third_party/nlohmann_json:nlohmann_json.BUILD"),
        includes = ["nlohmann"],
        lib_prefixes = [],
        debian_package = "nlohmann-json3-dev",
    )
    system_library(
        name = "sentencepiece",
        build_file = Label("//third_party/sentencepiece:sentencepiece.BUILD"),
        includes = ["sentencepiece_processor.h"],
        lib_prefixes = ["libsentencepiece.so"],
        debian_package = "libsentencepiece-dev",
    )
    system_library(
        name = "utf8proc",
        build_file = Label("//third_party/utf8proc:utf8proc.BUILD"),
        includes = ["utf8proc.h"],
        lib_prefixes = ["libutf8proc.a"],
        debian_package = "libutf8proc-dev",
    )
    cuda_configure(name = "local_cuda")
