#!/usr/bin/env bash
# Runs everything in a bundle made by tools/gpu/bundle.sh, on the GPU machine,
# and prints one table last: binary, result, seconds. Exits non-zero if any
# test fails. Full logs go to $OUT (when set) or the bundle's logs/ folder.
#
#   tools/gpu/run.sh [bundle-dir]       # default .gpu_bundle
#   RUN_BENCHMARKS=0 tools/gpu/run.sh   # tests only (no benchmarks, no PyTorch references)
#
# With benchmarks on, the PyTorch references for the bundled packages
# (tools/bench/torch_<package>.py, plus torch_copy.py) run first when python3 has
# torch, so both sets of numbers come from one run. Bundle a few packages per
# call: a device call is limited to 10 minutes.
set -uo pipefail

bundle="${1:-.gpu_bundle}"
if [[ ! -f "$bundle/manifest" ]]; then
  echo "run: no $bundle/manifest: build one with tools/gpu/bundle.sh and carry it" >&2
  exit 1
fi
logs="${OUT:-$bundle}/logs"
mkdir -p "$logs"
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared hosts
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)

rows=()
failures=0
here="$(cd "$(dirname "$0")/../.." && pwd)"
if [[ ${RUN_BENCHMARKS:-1} != 0 ]] && python3 -c 'import torch' 2>/dev/null; then
  # The references for the packages in this bundle (torch_<package>.py), and the copy ceiling.
  scripts=("$here/tools/bench/torch_copy.py")
  for pkg in $(awk '$2 ~ /^bench/ {split($3, p, ":"); n = split(p[1], d, "/"); print d[n]}' "$bundle/manifest" | sort -u); do
    [[ -f "$here/tools/bench/torch_$pkg.py" ]] && scripts+=("$here/tools/bench/torch_$pkg.py")
  done
  for script in "${scripts[@]}"; do
    name="$(basename "$script" .py)"
    echo "===== $name ====="
    if PYTHONUNBUFFERED=1 timeout 300 python3 "$script" 2>&1 | tee "$logs/$name.log"; then
      rows+=("$name|reference ok|-")
    else
      rows+=("$name|reference FAILED|-")
    fi
  done
fi
while read -r name role target; do
  if [[ $role == *multi_gpu && $gpus -lt 2 ]]; then
    rows+=("$name|skipped (needs 2+ GPUs, have $gpus)|0")
    continue
  fi
  if [[ $role == bench* && ${RUN_BENCHMARKS:-1} == 0 ]]; then
    continue
  fi
  missing=$(ldd "$bundle/bin/$name" | grep 'not found' || true)
  if [[ -n $missing ]]; then
    rows+=("$name|failed (missing: $(echo "$missing" | awk '{print $1}' | tr '\n' ' '))|0")
    failures=$((failures + 1))
    continue
  fi
  start=$(date +%s%N)
  if [[ $role == test* ]]; then
    "$bundle/bin/$name" --gtest_color=no >"$logs/$name.log" 2>&1
  else
    "$bundle/bin/$name" --benchmark_min_time=0.2 >"$logs/$name.log" 2>&1
  fi
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  secs="$((ms / 1000)).$(((ms % 1000) / 100))"
  if [[ $rc -ne 0 ]]; then
    result="FAILED (exit $rc)"
    failures=$((failures + 1))
    echo "===== $name (FAILED) =====" && tail -40 "$logs/$name.log"
  elif [[ $role == test* ]]; then
    passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$logs/$name.log")
    skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$logs/$name.log")
    result="passed ${passed:-0}, skipped ${skipped:-0}"
    if [[ -n $skipped ]]; then grep -h -B1 '^\[  SKIPPED \] .*\.' "$logs/$name.log" | head -4; fi
  else
    result="benchmark ok"
    echo "===== $name =====" && cat "$logs/$name.log"
  fi
  rows+=("$name|$result|$secs")
done <"$bundle/manifest"

echo
echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1) x $gpus"
printf '%-44s %-34s %8s\n' binary result seconds
for row in "${rows[@]}"; do
  IFS='|' read -r a b c <<<"$row"
  printf '%-44s %-34s %8s\n' "$a" "$b" "$c"
done
exit $((failures > 0))
