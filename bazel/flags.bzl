"""Minimal user-defined build settings (Bazel 4.2 has no bazel_skylib offline)."""

FlagInfo = provider(doc = "The value of a colossal build setting.", fields = ["value"])

def _flag_impl(ctx):
    return [FlagInfo(value = ctx.build_setting_value)]

bool_flag = rule(
    implementation = _flag_impl,
    build_setting = config.bool(flag = True),
    doc = "A boolean command-line build setting, e.g. --//bazel:cuda=false.",
)

string_flag = rule(
    implementation = _flag_impl,
    build_setting = config.string(flag = True),
    doc = "A string command-line build setting, e.g. --//bazel:cuda_archs=sm_90.",
)
