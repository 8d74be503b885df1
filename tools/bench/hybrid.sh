#!/usr/bin/env bash
# hybrid_parallel on GPUs (one call on a 2-GPU host; NCCL_NVLS_ENABLE=0):
#   1. one GPU: hybrid_parallel at tp 1 (zero_stage 2) against low_level_zero stage 2 on the same
#      Llama-3.2-1B-shaped model, bf16, B4 x T2048, alternating A B A B (the issue's "tp = pp = 1
#      costs <= 2%" line);
#   2. two GPUs: tensor parallelism tp 2 over NCCL, the same model: tokens/s and peak memory;
#   3. the same 5 steps at tp 1 and tp 2 (same seed and data): the losses side by side, then the
#      tp 2 run's checkpoint (gathered over NCCL) resumed at tp 1 for 2 more steps.
# Usage: tools/bench/hybrid.sh BUNDLE   (BUNDLE from tools/gpu/bundle.sh //lua:colossal, with data/)
set -uo pipefail
B="$(cd "$1" && pwd)"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
export LD_LIBRARY_PATH="$B/lib:${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"
export COLOSSAL_DATA="$B/data" NCCL_NVLS_ENABLE=0
bin="$B/bin/lua_colossal"
summary=()
note() { summary+=("$*"); }
fresh() { rm -rf "$1" && mkdir -p "$1" && ln -s "$repo/recipes" "$1/recipes"; }

fresh /tmp/hyb1
cd /tmp/hyb1
for round in 1 2; do
  for r in "llama_hybrid.lua --set plugin.zero_stage=2" "llama_finetune.lua"; do
    # shellcheck disable=SC2086
    line=$(CUDA_VISIBLE_DEVICES=0 "$bin" bench recipes/$r --steps 10 --warmup 3 2>&1 | grep '^bench:' | head -1)
    note "1 GPU round $round, ${r%% *}: ${line:-failed}"
  done
done

fresh /tmp/hyb2
cd /tmp/hyb2
line=$("$bin" run --nproc_per_node 2 --master_port 29611 bench recipes/llama_hybrid.lua --steps 10 \
  --warmup 3 2>&1 | tee /tmp/hyb2.out | grep 'bench:' | head -1)
note "2 GPUs, tp 2: ${line:-failed}"
grep -h '"bench_rank"' /tmp/hyb2.out | while read -r l; do echo "$l"; done

short=(--set steps=5 --set eval.every_steps=0 --set checkpoint.every_steps=5 --set sample.max_new_tokens=4
  --set lr_scheduler.warmup_steps=2)
fresh /tmp/hyb3a
(cd /tmp/hyb3a && CUDA_VISIBLE_DEVICES=0 "$bin" recipes/llama_hybrid.lua "${short[@]}" 2>&1 | tee /tmp/tp1.out | grep -E '^step|error' )
fresh /tmp/hyb3b
(cd /tmp/hyb3b && "$bin" run --nproc_per_node 2 --master_port 29612 recipes/llama_hybrid.lua "${short[@]}" 2>&1 \
  | tee /tmp/tp2.out | grep -E 'step|error|saved' )
for s in 1 2 3 4 5; do
  a=$(grep -E "^step +$s/" /tmp/tp1.out | grep -oE 'loss [0-9.]+' | head -1)
  b=$(grep -E "step +$s/" /tmp/tp2.out | grep -oE 'loss [0-9.]+' | head -1)
  note "step $s: tp1 ${a:-?}, tp2 ${b:-?}"
done
# The tp 2 checkpoint, resumed on one GPU (tp 1) for steps 6-7.
(cd /tmp/hyb3b && CUDA_VISIBLE_DEVICES=0 "$bin" recipes/llama_hybrid.lua "${short[@]}" --set steps=7 2>&1 \
  | tee /tmp/resume.out | grep -E 'resum|^step|error')
note "tp2 checkpoint resumed at tp1: $(grep -E '^step +7/' /tmp/resume.out | head -1)"
echo "=== summary"
printf '%s\n' "${summary[@]}"
