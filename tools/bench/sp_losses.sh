#!/usr/bin/env bash
# all_to_all sequence parallelism against one GPU (the same seed and data): three steps of
# recipes/llama_hybrid.lua (Llama-3.2-1B's shape, bf16, B4 x T2048) at tp = sp = 1 on one GPU
# and at sp 2 on two, the step losses side by side.
# Usage: tools/bench/sp_losses.sh BUNDLE   (BUNDLE: tools/gpu/bundle.sh //lua:colossal, data/)
set -uo pipefail
B="$(cd "$1" && pwd)"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
export LD_LIBRARY_PATH="$B/lib:${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"
export COLOSSAL_DATA="$B/data" NCCL_NVLS_ENABLE=0
bin="$B/bin/lua_colossal"
short=(--set steps=3 --set eval.every_steps=0 --set checkpoint.every_steps=0 --set sample.max_new_tokens=0
  --set lr_scheduler.warmup_steps=1 --set data.micro_batch_size=4 --set accumulation_steps=1)
for v in one sp2; do
  rm -rf "/tmp/spl_$v" && mkdir -p "/tmp/spl_$v" && ln -s "$repo/recipes" "/tmp/spl_$v/recipes"
done
(cd /tmp/spl_one && CUDA_VISIBLE_DEVICES=0 "$bin" recipes/llama_hybrid.lua "${short[@]}" >/tmp/spl_one.out 2>&1)
(cd /tmp/spl_sp2 && "$bin" run --nproc_per_node 2 --master_port 29651 recipes/llama_hybrid.lua "${short[@]}" \
  --set plugin.tp_size=1 --set plugin.enable_sequence_parallelism=true \
  --set plugin.sequence_parallelism_mode=all_to_all --set plugin.sp_size=2 >/tmp/spl_sp2.out 2>&1)
for s in 1 2 3; do
  a=$(grep -E "^step +$s/" /tmp/spl_one.out | grep -oE 'loss [0-9.]+' | head -1)
  b=$(grep -E "step +$s/" /tmp/spl_sp2.out | grep -oE 'loss [0-9.]+' | head -1)
  echo "step $s: one GPU ${a:-?}, sp 2 ${b:-?}"
done
grep -hE "error|Error" /tmp/spl_one.out /tmp/spl_sp2.out | head -5
