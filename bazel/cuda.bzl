"""cuda_library: compiles .cu files with nvcc into a target that behaves like a cc_library.

    load("//bazel:cuda.bzl", "cuda_library")

    cuda_library(
        name = "reduce_cuda",
        srcs = ["reduce.cu"],
        hdrs = ["reduce.h"],
        deps = [":reduce_headers"],
    )

The result carries CcInfo, so any cc_library/cc_test/cc_binary can depend on
it. Every header of the target and of its deps is an input of each nvcc action,
so a header change rebuilds what includes it. nvcc drives the C++ toolchain's
host compiler (-ccbin), compiles for the architectures in //bazel:cuda_archs,
adds -lineinfo, follows -c opt / -c dbg, and runs with a private TMPDIR so
parallel sandboxed actions never share nvcc's temporary files.

`archs` (optional) replaces //bazel:cuda_archs for one target: code that exists
for one architecture only, e.g. archs = "sm_90a" for Hopper's wgmma and
setmaxnreg, which no other architecture (and not plain sm_90) accepts. Such a
target's kernels must not be launched on another device; the caller checks
the compute capability first.

With //bazel:cuda off (--config=cpu, or no toolkit found) the target compiles
nothing and provides only its headers and deps: wrap whatever calls into it
in select() on //bazel:cuda_enabled or #if COLOSSAL_WITH_CUDA.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")
load("@local_cuda//:defs.bzl", "CUDA_ROOT")
load("//bazel:copts.bzl", "COLOSSAL_NVCC_FLAGS")
load("//bazel:flags.bzl", "FlagInfo")

def _gencode_flags(archs):
    flags = []
    for arch in [a.strip() for a in archs.split(",") if a.strip()]:
        if arch.startswith("sm_"):
            n = arch[len("sm_"):]
            flags += ["-gencode", "arch=compute_%s,code=sm_%s" % (n, n)]
        elif arch.startswith("compute_"):
            n = arch[len("compute_"):]
            flags += ["-gencode", "arch=compute_%s,code=compute_%s" % (n, n)]
        else:
            fail("//bazel:cuda_archs: '%s' is neither sm_XX (machine code) nor compute_XX (PTX)" % arch)
    if not flags:
        fail("//bazel:cuda_archs is empty: name at least one architecture, e.g. sm_90")
    return flags

def _mode_flags(mode):
    if mode == "opt":
        return ["-O3", "-DNDEBUG"]
    if mode == "dbg":
        return ["-g", "-G", "-O0"]
    return ["-O2"]

def _cuda_library_impl(ctx):
    deps_info = cc_common.merge_cc_infos(cc_infos = [d[CcInfo] for d in ctx.attr.deps])
    own_context = cc_common.create_compilation_context(
        headers = depset(ctx.files.hdrs),
        defines = depset(ctx.attr.defines),
    )
    header_info = cc_common.merge_cc_infos(
        direct_cc_infos = [CcInfo(compilation_context = own_context)],
        cc_infos = [deps_info],
    )
    if not ctx.attr._enabled[FlagInfo].value:
        return [header_info, DefaultInfo(files = depset(ctx.files.hdrs))]

    cc_toolchain = find_cpp_toolchain(ctx)
    feature_configuration = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    cc = header_info.compilation_context
    common = ["-x", "cu", "-std=c++20", "-ccbin", cc_toolchain.compiler_executable,
              "-Xcompiler", "-fPIC"]
    common += _gencode_flags(ctx.attr.archs or ctx.attr._archs[FlagInfo].value)
    common += _mode_flags(ctx.var["COMPILATION_MODE"])
    common += COLOSSAL_NVCC_FLAGS
    for d in cc.defines.to_list() + ctx.attr.local_defines:
        common.append("-D" + d)
    for i in cc.includes.to_list():
        common += ["-I", i]
    for i in cc.quote_includes.to_list():
        common += ["-I", i]
    for i in cc.system_includes.to_list():
        common += ["-isystem", i]
    common += ctx.attr.copts

    nvcc = CUDA_ROOT + "/bin/nvcc"
    objects = []
    inputs = depset(ctx.files.srcs, transitive = [cc.headers])
    for src in ctx.files.srcs:
        if not src.path.endswith(".cu"):
            continue
        obj = ctx.actions.declare_file("_objs/%s/%s.o" % (ctx.label.name, src.basename[:-len(".cu")]))
        ctx.actions.run_shell(
            command = ('tmp=$(mktemp -d "${TMPDIR:-/tmp}/nvcc.XXXXXXXX") && trap \'rm -rf "$tmp"\' EXIT && ' +
                       'TMPDIR="$tmp" "$@"'),
            arguments = [nvcc] + common + ["-c", src.path, "-o", obj.path],
            inputs = inputs,
            outputs = [obj],
            mnemonic = "NvccCompile",
            use_default_shell_env = True,
            progress_message = "nvcc %s" % src.short_path,
        )
        objects.append(obj)

    library = ctx.actions.declare_file("lib%s.a" % ctx.label.name)
    ctx.actions.run(
        executable = cc_toolchain.ar_executable,
        arguments = ["rcsD", library.path] + [o.path for o in objects],
        inputs = objects,
        outputs = [library],
        mnemonic = "NvccArchive",
    )
    library_to_link = cc_common.create_library_to_link(
        actions = ctx.actions,
        feature_configuration = feature_configuration,
        cc_toolchain = cc_toolchain,
        static_library = library,
        pic_static_library = library,
        alwayslink = ctx.attr.alwayslink,
    )
    linker_input = cc_common.create_linker_input(
        owner = ctx.label,
        libraries = depset([library_to_link]),
    )
    own_linking = cc_common.create_linking_context(linker_inputs = depset([linker_input]))
    runtime = ctx.attr._cudart[CcInfo]
    return [
        cc_common.merge_cc_infos(
            direct_cc_infos = [CcInfo(compilation_context = own_context, linking_context = own_linking)],
            cc_infos = [deps_info, runtime],
        ),
        DefaultInfo(files = depset([library])),
    ]

_cuda_library = rule(
    implementation = _cuda_library_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu", ".cuh", ".h"]),
        "hdrs": attr.label_list(allow_files = [".h", ".cuh"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(doc = "Extra nvcc flags for this target."),
        "archs": attr.string(doc = "When set, replaces //bazel:cuda_archs for this target " +
                                   "(same syntax, e.g. \"sm_90a\")."),
        "defines": attr.string_list(doc = "Defines for this target and its dependents."),
        "local_defines": attr.string_list(doc = "Defines for this target only."),
        "alwayslink": attr.bool(default = False),
        "_enabled": attr.label(default = Label("//bazel:cuda")),
        "_archs": attr.label(default = Label("//bazel:cuda_archs")),
        "_cudart": attr.label(default = Label("//bazel:cuda_config")),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    incompatible_use_toolchain_transition = True,
)

def cuda_library(name, **kwargs):
    """A library of .cu sources compiled by nvcc; see the file comment."""
    _cuda_library(name = name, **kwargs)
