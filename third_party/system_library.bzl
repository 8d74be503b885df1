"""Repository rules that expose this machine's installed libraries to Bazel, offline."""

def _search_dirs(rctx, kind):
    multiarch = rctx.execute(["gcc", "-print-multiarch"]).stdout.strip()
    base = "/usr/include" if kind == "include" else "/usr/lib"
    dirs = [base]
    if multiarch:
        dirs = [base + "/" + multiarch] + dirs
    return dirs

def _find(rctx, dirs, name):
    for d in dirs:
        p = rctx.path(d + "/" + name)
        if p.exists:
            return p
    return None

def _system_library_impl(rctx):
    hint = "install the Debian package(s) '%s' (./tools/setup.sh does)" % rctx.attr.debian_package
    include_dirs = _search_dirs(rctx, "include")
    for name in rctx.attr.includes:
        found = _find(rctx, include_dirs, name)
        if not found:
            fail("%s: header '%s' not found in %s; %s" % (rctx.name, name, include_dirs, hint))
        rctx.symlink(found, "include/" + name)

    lib_dirs = _search_dirs(rctx, "lib")
    for prefix in rctx.attr.lib_prefixes:
        matched = False
        for d in lib_dirs:
            dpath = rctx.path(d)
            if not dpath.exists:
                continue
            for entry in dpath.readdir():
                if entry.basename.startswith(prefix) and (entry.basename.endswith(".so") or entry.basename.endswith(".a")):
                    rctx.symlink(entry, "lib/" + entry.basename)
                    matched = True
            if matched:
                break
        if not matched:
            fail("%s: no library '%s*' in %s; %s" % (rctx.name, prefix, lib_dirs, hint))
    rctx.symlink(rctx.attr.build_file, "BUILD.bazel")
    rctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % rctx.name)

system_library = repository_rule(
    implementation = _system_library_impl,
    local = True,
    attrs = {
        "build_file": attr.label(mandatory = True, allow_single_file = True),
        "includes": attr.string_list(doc = "Header files or folders under /usr/include to expose."),
        "lib_prefixes": attr.string_list(doc = "Library file name prefixes to expose under lib/."),
        "debian_package": attr.string(mandatory = True),
    },
    doc = "Exposes a system-installed library (headers under include/, libraries under lib/).",
)

def _shim_repository_impl(rctx):
    src = rctx.path(rctx.attr.marker).dirname
    for entry in src.readdir():
        rctx.symlink(entry, entry.basename)

shim_repository = repository_rule(
    implementation = _shim_repository_impl,
    local = True,
    attrs = {"marker": attr.label(mandatory = True, allow_single_file = True)},
    doc = "A repository made of one folder of this repo (found through a file in it).",
)
