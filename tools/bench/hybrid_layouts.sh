#!/usr/bin/env bash
# hybrid_parallel layouts on one host of N GPUs (issue #21's hybrid rows; NCCL_NVLS_ENABLE=0):
# a Llama-2-7B-shaped model (recipes/llama_hybrid.lua --set model.preset=llama2-7b: 32 layers,
# width 4096, activation checkpointing on every block), bf16, sequence 2048, the same
# GLOBAL_SEQS sequences a step in every layout, `colossal bench` (STEPS timed after WARMUP):
#   tp N; tp 2 x dp N/2 (ZeRO-1); pp N and pp 2 x dp N/2 (1F1B, ZeRO-1); pp N interleaved
#   (two model chunks a stage); tp 2 x pp N/2, 1F1B and interleaved; dp N (ZeRO-1, tp = pp = 1);
#   dpNz2 (dp N with ZeRO-2; not in the default list);
#   sp N (all_to_all sequence parallelism over every GPU), tp2sp2 and pp2sp2 (all_to_all with
#   tensor or pipeline parallelism), tp2sgpp2 (split_gather with pipeline stages); not in the
#   default list.
# Prints one row per layout: ms/step, tokens/s, MFU (the recipe's: 6·params + attention FLOPs
# per token over the GPUs' dense bf16 peak; the recomputation of checkpointing not counted), and
# every rank's peak memory; a failed layout prints its log's tail.
# GPT-2: RECIPE=recipes/gpt2_hybrid.lua PRESET=gpt2-xl SEQ=1024 (its presets' own context; gpt2-xl's
#   25 heads split over no tp > 1, so its layouts are dp and pp only).
# VOCAB: the model's vocabulary. The bundled corpus is GPT-2 tokens (ids to 50256), which colossal
#   refuses for a smaller vocabulary, so Llama-2 presets (32000) default to 50257: a Llama-2-7B
#   shape with GPT-2's vocabulary, 6.89B parameters instead of 6.74B.
# BIN: another build of the binary (e.g. an older commit's, for a before/after pair).
# Usage: tools/bench/hybrid_layouts.sh BUNDLE   (BUNDLE: tools/gpu/bundle.sh //lua:colossal, data/)
#   LAYOUTS="tp4 pp4i" GLOBAL_SEQS=16 STEPS=6 WARMUP=2 RUN_TIMEOUT=240 PRESET=llama2-7b SEQ=2048
set -uo pipefail
B="$(cd "$1" && pwd)"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
export LD_LIBRARY_PATH="$B/lib:${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"
export COLOSSAL_DATA="$B/data" NCCL_NVLS_ENABLE=0
bin="${BIN:-$B/bin/lua_colossal}"
RECIPE="${RECIPE:-recipes/llama_hybrid.lua}"
N="${NGPU:-$(nvidia-smi -L | wc -l)}"
H=$((N / 2))
GLOBAL_SEQS="${GLOBAL_SEQS:-16}"
STEPS="${STEPS:-6}"
WARMUP="${WARMUP:-2}"
RUN_TIMEOUT="${RUN_TIMEOUT:-240}"
PRESET="${PRESET:-llama2-7b}"
SEQ="${SEQ:-2048}"
VOCAB="${VOCAB:-}"
[[ -z "$VOCAB" && "$RECIPE" == *llama* && "$PRESET" == llama2* ]] && VOCAB=50257
LAYOUTS="${LAYOUTS:-dp$N tp$N tp2dp$H pp$N pp${N}i pp2dp$H tp2pp$H tp2pp${H}i}"

# layout -> "tp pp chunks zero micro_batch_size sp split_gather" (accumulation follows from
# GLOBAL_SEQS).
spec() {
  case "$1" in
    dp$N) echo "1 1 1 1 4 1 0" ;;
    dp${N}z2) echo "1 1 1 2 4 1 0" ;;
    tp$N) echo "$N 1 1 1 4 1 0" ;;
    sp$N) echo "1 1 1 1 4 $N 0" ;;
    tp2dp$H) echo "2 1 1 1 4 1 0" ;;
    pp$N) echo "1 $N 1 1 1 1 0" ;;
    pp${N}i) echo "1 $N 2 1 1 1 0" ;;
    pp2dp$H) echo "1 2 1 1 2 1 0" ;;
    tp2pp$H) echo "2 $H 1 1 2 1 0" ;;
    tp2pp${H}i) echo "2 $H 2 1 2 1 0" ;;
    tp2sp2) echo "2 1 1 1 4 2 0" ;;
    pp2sp2) echo "1 2 1 1 2 2 0" ;;
    tp2sgpp2) echo "2 2 1 1 2 1 1" ;;
    *) return 1 ;;
  esac
}

rows=()
port=29700
for layout in $LAYOUTS; do
  read -r tp pp chunks zero mb sp sg <<<"$(spec "$layout")" || { rows+=("| $layout | unknown layout |"); continue; }
  dp=$((N / (tp * pp * sp)))
  ((mb > GLOBAL_SEQS / dp)) && mb=$((GLOBAL_SEQS / dp))
  accum=$((GLOBAL_SEQS / (dp * mb)))
  style=1f1b
  ((chunks > 1)) && style=interleaved
  dir="/tmp/hl_$layout"
  rm -rf "$dir" && mkdir -p "$dir" && ln -s "$repo/recipes" "$dir/recipes"
  if [[ -n "$VOCAB" ]]; then
    # --set changes only keys a recipe has, and the GPU model table names no vocab_size: the run
    # gets a copy of the recipe whose preset line adds one.
    rm "$dir/recipes" && mkdir -p "$dir/recipes"
    sed -E "s/(preset = \"[^\"]+\",)/\1 vocab_size = $VOCAB,/" "$repo/$RECIPE" >"$dir/$RECIPE"
    grep -q "vocab_size = $VOCAB," "$dir/$RECIPE" || { echo "hybrid_layouts: no preset line in $RECIPE for vocab_size" >&2; exit 1; }
  fi
  port=$((port + 1))
  log="/tmp/hl_$layout.log"
  cmd=("$bin" run --nproc_per_node "$N" --master_port "$port" bench "$RECIPE"
    --steps "$STEPS" --warmup "$WARMUP" --set "model.preset=$PRESET" --set "data.seq_len=$SEQ")
  [[ "$RECIPE" == *llama* ]] && cmd+=(--set "model.max_position_embeddings=$((SEQ > 2048 ? SEQ : 2048))")
  cmd+=(--set "data.micro_batch_size=$mb" --set "accumulation_steps=$accum" --set "plugin.tp_size=$tp"
    --set "plugin.pp_size=$pp" --set "plugin.pp_style=$style" --set "plugin.num_model_chunks=$chunks"
    --set "plugin.zero_stage=$zero")
  if ((sp > 1)); then
    cmd+=(--set plugin.enable_sequence_parallelism=true --set plugin.sequence_parallelism_mode=all_to_all
      --set "plugin.sp_size=$sp")
  fi
  ((sg)) && cmd+=(--set plugin.enable_sequence_parallelism=true)
  echo "=== $layout: ${cmd[*]}"
  (cd "$dir" && timeout "$RUN_TIMEOUT" "${cmd[@]}" >"$log" 2>&1)
  rc=$?
  json=$(grep -h '"bench": true' "$log" | head -1)
  if [[ $rc -ne 0 || -z "$json" ]]; then
    echo "--- $layout failed (exit $rc):"; tail -n 15 "$log"
    rows+=("| $layout | tp $tp$( ((sg)) && echo " split_gather"), pp $pp ($style), sp $sp, dp $dp, B$mb x$accum | failed (exit $rc) | | | |")
    continue
  fi
  ms=$(grep -oE '"ms_per_step": [0-9.]+' <<<"$json" | grep -oE '[0-9.]+$')
  tps=$(grep -oE '"tokens_per_s": [0-9.]+' <<<"$json" | grep -oE '[0-9.]+$')
  mfu=$(grep -oE '"mfu": [0-9.]+' <<<"$json" | grep -oE '[0-9.]+$')
  peaks=$(grep -h '"bench_rank"' "$log" | grep -oE '"peak_memory_bytes": [0-9]+' | grep -oE '[0-9]+$' |
    awk '{printf "%s%.1f", (NR > 1 ? " / " : ""), $1 / 1e9}')
  rows+=("| $layout | tp $tp$( ((sg)) && echo " split_gather"), pp $pp ($style), sp $sp, dp $dp, B$mb x$accum | $ms | $tps | $mfu | $peaks |")
done
echo "=== $PRESET${VOCAB:+ (vocab_size $VOCAB)} on $N GPUs, $GLOBAL_SEQS x $SEQ tokens a step"
echo "| layout | split, micro-batch x count per copy | ms/step | tokens/s | MFU | peak GB per rank |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
