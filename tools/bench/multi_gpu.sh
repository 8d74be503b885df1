#!/usr/bin/env bash
# Issue #21's runs that are not the scaling table (tools/bench/scaling.sh), on one
# host of N GPUs (NCCL_NVLS_ENABLE=0), from the repository root:
#
#   tools/bench/multi_gpu.sh BUNDLE [comm] [fault]
#
# BUNDLE: tools/gpu/bundle.sh //comm/builtin:cuda_ipc_test //comm/bench:comm_bench //lua:colossal,
# with BUNDLE/data holding corpus/ and gpt2.tiktoken.
#   comm   comm/builtin:cuda_ipc_test (its collectives at 3 and 4 ranks); comm_bench (NCCL)
#          all_reduce, reduce_scatter, all_gather, all_to_all on all N GPUs, 1 MiB .. 256 MiB bf16,
#          beside tools/bench/torch_comm.py (torch.distributed, NCCL) in the same call
#   fault  `colossal run --nproc_per_node N recipes/gpt2_zero.lua` (GPT-2 124M, checkpoints every 5
#          steps); once step 10 is saved one worker (rank 1) gets SIGKILL: every worker must be gone
#          within 30 s, the launcher must name the rank, and a new run must resume from the last
#          checkpoint and finish
set -uo pipefail
B="$1"
shift
parts="${*:-comm fault}"
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export COLOSSAL_DATA="$B/data" NCCL_NVLS_ENABLE=0
n=$(nvidia-smi -L | wc -l)
repo="$PWD"
summary=()
has() { [[ " $parts " == *" $1 "* ]]; }

if has comm; then
  if out=$("$B/bin/comm_builtin_cuda_ipc_test" --gtest_brief=1 2>&1); then
    summary+=("cuda_ipc_test ($n GPUs; worlds 3..min(4, GPUs)): PASS")
  else
    echo "$out" | tail -30
    summary+=("cuda_ipc_test: FAIL")
  fi
  for op in all_reduce reduce_scatter all_gather all_to_all; do
    echo "== $op, $n GPUs: colossal comm_bench (NCCL), then torch.distributed"
    "$B/bin/comm_bench_comm_bench" --spawn "$n" --backend nccl --op "$op" -b 1M -e 256M -f 4 \
      --dtype bfloat16 2>&1
    python3 tools/bench/torch_comm.py --spawn "$n" --op "$op" -b 1M -e 256M -f 4 --dtype bfloat16 2>&1
  done
fi

if has fault; then
  work=$(mktemp -d)
  cd "$work"
  ln -s "$repo/recipes" recipes
  log="$work/run.log"
  start=$(date +%s)
  "$B/bin/lua_colossal" run --nproc_per_node "$n" --master_port 29611 recipes/gpt2_zero.lua \
    --set steps=400 --set checkpoint.every_steps=5 --set eval.every_steps=0 >"$log" 2>&1 &
  launcher=$!
  for _ in $(seq 1 240); do
    grep -q "saved checkpoints/gpt2_zero/step_000010" "$log" && break
    sleep 0.5
  done
  victim=""
  for pid in $(pgrep -P "$launcher"); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "RANK=1"; then victim=$pid; fi
  done
  if [[ -z "$victim" ]]; then
    summary+=("fault: FAIL (no rank-1 worker found; log tail: $(tail -3 "$log" | tr '\n' ' '))")
  else
    kill -9 "$victim"
    killed=$(date +%s.%N)
    wait "$launcher"
    rc=$?
    gone=$(date +%s.%N)
    left=$(pgrep -f "gpt2_zero.lua" | wc -l)
    secs=$(python3 -c "print(f'{$gone - $killed:.1f}')")
    named=$(grep -m1 -iE "rank 1" "$log" | grep -iE "signal|killed|exit" || true)
    last=$(cat checkpoints/gpt2_zero/latest 2>/dev/null)
    echo "--- the killed run's log tail"; tail -8 "$log"
    "$B/bin/lua_colossal" run --nproc_per_node "$n" --master_port 29612 recipes/gpt2_zero.lua \
      --set steps=14 --set checkpoint.every_steps=5 --set eval.every_steps=0 >"$work/resume.log" 2>&1
    rrc=$?
    resumed=$(grep -m1 "resumed from" "$work/resume.log")
    echo "--- the resumed run's log tail"; tail -4 "$work/resume.log"
    summary+=("fault: rank 1 (pid $victim) SIGKILLed after step 10 was saved ($(( $(date +%s) - start )) s in);" \
      " launcher exit $rc after ${secs} s, workers left $left, names the rank: ${named:-NO};" \
      " latest = $last; resume exit $rrc: ${resumed:-NO RESUME LINE}")
  fi
  cd "$repo"
fi
echo "=== summary"
printf '%s\n' "${summary[@]}"
