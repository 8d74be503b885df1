#!/usr/bin/env bash
# tools/test_matrix.sh for a bundle on another machine: runs every test binary
# in a bundle made by tools/gpu/bundle.sh under each OpenBLAS kernel family
# that machine's CPU can execute and under several thread counts, and prints
# one table last (setting, tests passed, failed), with the GPU hidden (the CPU
# cases alone; tools/gpu/run.sh runs the GPU cases). Use it on the GPU host to
# cover OPENBLAS_CORETYPE=SkylakeX (AVX-512), which a CPU without AVX-512
# cannot run.
#
#   tools/gpu/cpu_matrix.sh [bundle-dir]      # default .gpu_bundle
set -uo pipefail

bundle="${1:-.gpu_bundle}"
if [[ ! -f "$bundle/manifest" ]]; then
  echo "cpu_matrix: no $bundle/manifest: build one with tools/gpu/bundle.sh" >&2
  exit 1
fi
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
logs="${OUT:-$bundle}/matrix_logs"
mkdir -p "$logs"
mapfile -t tests < <(awk '$2 == "test" {print $1}' "$bundle/manifest")

settings=("OPENBLAS_CORETYPE=Haswell" "OPENBLAS_CORETYPE=Zen" "OMP_NUM_THREADS=1"
  "OMP_NUM_THREADS=2" "OMP_NUM_THREADS=7")
if grep -qw avx512f /proc/cpuinfo; then
  settings=("OPENBLAS_CORETYPE=SkylakeX" "${settings[@]}")
else
  echo "cpu_matrix: no avx512f on this CPU: OPENBLAS_CORETYPE=SkylakeX skipped" >&2
fi

rows=()
status=0
for setting in "${settings[@]}"; do
  passed=0 failed=0 names=""
  for t in "${tests[@]}"; do
    log="$logs/${setting//=/_}_$t.log"
    # The CPU cases only (GPU cases skip): tools/gpu/run.sh runs those once.
    if env CUDA_VISIBLE_DEVICES= "$setting" timeout 600 "$bundle/bin/$t" >"$log" 2>&1; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
      names+=" $t"
      status=1
    fi
  done
  rows+=("$(printf '%-28s %6d %6d %s' "$setting" "$passed" "$failed" "$names")")
done
printf '\n%-28s %6s %6s\n' "setting" "passed" "failed"
printf '%s\n' "${rows[@]}"
exit "$status"
