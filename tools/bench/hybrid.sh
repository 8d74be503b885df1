#!/usr/bin/env bash
# hybrid_parallel on GPUs (one call on a 2-GPU host; NCCL_NVLS_ENABLE=0):
#   1. one GPU: hybrid_parallel at tp 1 (zero_stage 2) against low_level_zero stage 2 on the same
#      Llama-3.2-1B-shaped model, bf16, B4 x T2048, alternating A B A B (the issue's "tp = pp = 1
#      costs <= 2%" line);
#   2. two GPUs, the same model and tokens per step: tp 2, tp 2 with sequence parallelism, and two
#      pipeline stages (1F1B over 8 micro-batches): tokens/s and each rank's peak memory;
#   3. with HYBRID_LOSSES=1: the same 5 steps at tp 1 and tp 2 (same seed and data), the losses
#      side by side, then the tp 2 run's checkpoint (gathered over NCCL) resumed at tp 1.
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
one_batch="--set data.micro_batch_size=4 --set accumulation_steps=1"
for round in 1 2; do
  for r in "llama_hybrid.lua --set plugin.zero_stage=2 $one_batch" "llama_finetune.lua"; do
    # shellcheck disable=SC2086
    line=$(CUDA_VISIBLE_DEVICES=0 "$bin" bench recipes/$r --steps 10 --warmup 3 2>&1 | grep '^bench:' | head -1)
    note "1 GPU round $round, ${r%% *}: ${line:-failed}"
  done
done

# Two GPUs, the same 8192 tokens a step: tp 2; tp 2 with sequence parallelism;
# two pipeline stages over 8 micro-batches of 1.
port=29611
for v in "tp2|$one_batch" "tp2+sp|$one_batch --set plugin.enable_sequence_parallelism=true" \
    "pp2|--set plugin.tp_size=1 --set plugin.pp_size=2 --set data.micro_batch_size=1 --set accumulation_steps=8"; do
  IFS='|' read -r label sets <<<"$v"
  fresh /tmp/hyb2
  cd /tmp/hyb2
  port=$((port + 1))
  # shellcheck disable=SC2086
  line=$("$bin" run --nproc_per_node 2 --master_port "$port" bench recipes/llama_hybrid.lua --steps 10 \
    --warmup 3 $sets 2>&1 | tee "/tmp/hyb2_$label.out" | grep 'bench:' | head -1)
  note "2 GPUs, $label: ${line:-failed}"
  note "  per-rank peaks: $(grep -h '"bench_rank"' "/tmp/hyb2_$label.out" | grep -oE '"peak_memory_bytes": [0-9]+' | tr '\n' ' ')"
done
if [[ "${HYBRID_LOSSES:-0}" != 1 ]]; then
  echo "=== summary"
  printf '%s\n' "${summary[@]}"
  exit 0
fi

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
