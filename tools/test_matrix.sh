#!/usr/bin/env bash
# Runs the whole test suite under each OpenBLAS kernel family and thread count
# a user's machine may pick, so that no tolerance holds only on this CPU:
#
#   OPENBLAS_CORETYPE = Haswell, SkylakeX, Zen   (AVX2, AVX-512 and AMD kernels:
#                                                 other blockings, other sum orders)
#   OMP_NUM_THREADS   = 1, 2, 7                  (OpenMP loops and OpenBLAS threads;
#                                                 7 oversubscribes a small machine)
#
#   tools/test_matrix.sh [bazel test flags]     e.g. --config=cpu, or //nn/...
#
# Every run executes the tests (--nocache_test_results); builds come from the
# cache after the first. SkylakeX needs AVX-512: on a CPU without it OpenBLAS
# would die with an illegal instruction, so that row is reported as "skipped
# (no avx512f)" instead of run. Prints one table last and exits non-zero if
# any row failed.
set -uo pipefail
cd "$(dirname "$0")/.."

COLOSSAL_SETUP_QUIET=1 tools/setup.sh
ranks="${COLOSSAL_DATA:-$HOME/.cache/colossal/data}/gpt2.tiktoken"
if [[ -z "${COLOSSAL_GPT2_RANKS:-}" && -f "$ranks" ]]; then export COLOSSAL_GPT2_RANKS="$ranks"; fi

rows=()
status=0
run_row() {  # run_row NAME VAR=VALUE
  local name="$1" env="$2" start log rc passed failed
  start=$(date +%s)
  log="$(mktemp)"
  echo "== $name: bazel test //... --test_env=$env" >&2
  bazel test //... --nocache_test_results --test_env="$env" --test_summary=short "${extra[@]}" \
    >"$log" 2>&1
  rc=$?
  passed=$(grep -cE '^//\S+\s+PASSED' "$log" || true)
  failed=$(grep -cE '^//\S+\s+(FAILED|TIMEOUT|NO STATUS|INCOMPLETE)' "$log" || true)
  if [[ $rc -ne 0 ]]; then
    grep -E '^//\S+\s+(FAILED|TIMEOUT|NO STATUS|INCOMPLETE)|^ERROR' "$log" >&2
    if [[ $failed -eq 0 ]]; then failed=1; fi
    status=1
  fi
  rows+=("$(printf '%-26s %6s %6s %6ss' "$name" "$passed" "$failed" "$(($(date +%s) - start))")")
  rm -f "$log"
}

extra=("$@")
for core in Haswell SkylakeX Zen; do
  if [[ $core == SkylakeX ]] && ! grep -qw avx512f /proc/cpuinfo; then
    rows+=("$(printf '%-26s %s' "OPENBLAS_CORETYPE=$core" "skipped (no avx512f on this CPU)")")
    continue
  fi
  run_row "OPENBLAS_CORETYPE=$core" "OPENBLAS_CORETYPE=$core"
done
for threads in 1 2 7; do
  run_row "OMP_NUM_THREADS=$threads" "OMP_NUM_THREADS=$threads"
done

printf '\n%-26s %6s %6s %7s\n' "setting" "passed" "failed" "time"
printf '%s\n' "${rows[@]}"
exit "$status"
