#!/usr/bin/env bash
# Builds GPU test and benchmark binaries with -c opt and copies them, with the
# shared libraries a stock Ubuntu 24.04 + CUDA 13 GPU host lacks, into one
# git-ignored folder (default .gpu_bundle/) that tools/gpu/run.sh executes.
#
#   tools/gpu/bundle.sh                      # every target tagged gpu or multi_gpu
#   tools/gpu/bundle.sh //kernels/reduce:all # named targets (tests and binaries)
#   BUNDLE_ARCHS=sm_80,sm_90 tools/gpu/bundle.sh  # other GPUs (default sm_90: H100/H200)
#
# Then carry the folder to the GPU machine and run tools/gpu/run.sh there
# (CONTRIBUTING.md shows the one-call workflow).
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
out="${BUNDLE_DIR:-$root/.gpu_bundle}"
# The lent GPUs are Hopper (H100/H200): one architecture keeps the bundle small.
archs="${BUNDLE_ARCHS:-sm_90}"
limit_mb=64

if (($# > 0)); then
  query="kind('cc_test|cc_binary', set($*))"
else
  query="attr(tags, '\\bgpu\\b|\\bmulti_gpu\\b', kind('cc_test|cc_binary', //...))"
fi
mapfile -t targets < <(bazel query "$query" 2>/dev/null)
if ((${#targets[@]} == 0)); then
  echo "bundle: no targets match: $query" >&2
  exit 1
fi
echo "bundle: building ${#targets[@]} targets with -c opt for $archs" >&2
bazel build -c opt "--//bazel:cuda_archs=$archs" "${targets[@]}" >&2

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
: >"$out/manifest"

# Libraries the GPU host provides itself (driver, CUDA libraries, C/C++ runtime, OpenBLAS).
host_provided='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libcublasLt|libnccl|libcudnn|libnvrtc|libnvJitLink)\.so'

for target in "${targets[@]}"; do
  pkg="${target#//}"
  pkg="${pkg%%:*}"
  name="${target##*:}"
  # Not bazel-bin: a concurrent build in another configuration may repoint it.
  binary="bazel-out/k8-opt/bin/$pkg/$name"
  kind=$(bazel query --output=label_kind "$target" 2>/dev/null | awk '{print $1}')
  tags=$(bazel query "attr(tags, 'multi_gpu', $target)" 2>/dev/null | wc -l)
  flat="${pkg//\//_}_$name"
  cp "$binary" "$out/bin/$flat"
  chmod u+w "$out/bin/$flat"
  strip --strip-debug "$out/bin/$flat"
  role=bench
  [[ $kind == cc_test ]] && role=test
  [[ $tags -gt 0 ]] && role="${role}_multi_gpu"
  echo "$flat $role $target" >>"$out/manifest"
  # Copy every resolved shared library the host does not provide.
  ldd "$binary" | awk '/=> \// {print $1, $3}' | while read -r soname path; do
    if [[ ! $soname =~ $host_provided && ! -e "$out/lib/$soname" ]]; then
      cp -L "$path" "$out/lib/$soname"
    fi
  done
done

size_mb=$(du -sm "$out" | cut -f1)
echo "bundle: $(wc -l <"$out/manifest") binaries, $(ls "$out/lib" | wc -l) libraries, ${size_mb} MiB in $out" >&2
if ((size_mb >= limit_mb)); then
  echo "bundle: ${size_mb} MiB is over the ${limit_mb} MiB a device call can carry; name fewer targets" >&2
  exit 1
fi
