#!/usr/bin/env bash
# Data-parallel scaling table: GPT-2 124M ("gpt2") and 1.5B ("gpt2-xl") on 1, 2, 4 and 8
# GPUs of one host, colossal's plugins beside PyTorch's DDP and FSDP, from one run.
#
# Run on the GPU host, from the repository root:
#   COLOSSAL_BIN=/path/to/colossal tools/bench/scaling.sh
#   COLOSSAL_BIN=... MODELS=gpt2 WORLDS="1 2" METHODS="zero2 torch_fsdp" tools/bench/scaling.sh
#
# Methods (every run: bf16, sequence 1024, one micro-batch per step, no accumulation):
#   ddp            colossal bench recipes/gpt2_ddp.lua  (plugin torch_ddp, precision bf16)
#   zero1          colossal bench recipes/gpt2_zero.lua (low_level_zero, stage 1, plugin.precision bf16)
#   zero2          the same, stage 2
#   zero2_offload  the same, stage 2, plugin.cpu_offload = true
#   torch_ddp      tools/bench/torch_gpt2_dist.py --mode ddp  (torchrun; fp32 weights, bf16 autocast)
#   gemini         colossal bench recipes/gpt2_gemini.lua (gemini, placement_policy auto, plugin.precision bf16)
#   torch_fsdp     tools/bench/torch_gpt2_dist.py --mode fsdp (torchrun; FSDP1 FULL_SHARD, bf16 MixedPrecision)
#   torch_fsdp2    tools/bench/torch_gpt2_dist.py --mode fsdp2 (torchrun; fully_shard per block, bf16 MixedPrecisionPolicy)
# The exact command lines, as run (N GPUs, M the micro-batch, S/W steps/warm-up):
#   cd <fresh dir> && $COLOSSAL_BIN run --nproc_per_node N --master_port P bench <repo>/recipes/gpt2_zero.lua \
#       --steps S --warmup W --set model.preset=gpt2-xl --set data.micro_batch_size=M --set data.seq_len=1024 \
#       --set accumulation_steps=1 --set plugin.stage=2 --set plugin.precision=bf16 [--set plugin.cpu_offload=true]
#   cd <fresh dir> && $COLOSSAL_BIN run --nproc_per_node N --master_port P bench <repo>/recipes/gpt2_ddp.lua \
#       --steps S --warmup W --set model.preset=gpt2 --set data.micro_batch_size=M --set data.seq_len=1024 \
#       --set accumulation_steps=1 --set precision=bf16
#   cd <fresh dir> && python3 -m torch.distributed.run --standalone --nproc_per_node N \
#       <repo>/tools/bench/torch_gpt2_dist.py --model gpt2-xl --mode fsdp --micro_batch M --steps S --warmup W
# (each one also starts with `timeout`; every log begins with its command line).
#
# Environment (all optional but COLOSSAL_BIN, which the colossal methods need):
#   COLOSSAL_BIN     the colossal binary (a bundled build of ./colossal's //lua:colossal)
#   COLOSSAL_DATA    colossal's data folder (default ~/.cache/colossal/data); it must hold
#                    corpus/shakespeare/ and, unless the corpus is already tokenized, gpt2.tiktoken
#   SCALING_DATA     folder for the tokenized corpus, shared by the colossal runs (each run's
#                    ./data links to it); default $OUT/scaling/data. Point it at an existing
#                    data/ folder (one holding shakespeare/manifest.json) to skip tokenizing.
#   MODELS           "gpt2 gpt2-xl"            WORLDS  "1 2 4 8" (those above the GPU count are skipped)
#   METHODS          "ddp zero1 zero2 zero2_offload torch_ddp torch_fsdp" (also: gemini, torch_fsdp2)
#   MICRO_BATCH_GPT2 8   MICRO_BATCH_GPT2_XL 4 (sequences per GPU per step)
#   STEPS 10  WARMUP 3  RUN_TIMEOUT 240 (seconds per run)  PYTHON python3  NGPU (default: counted)
#   OUT              logs, results.jsonl and table.md go to ${OUT:-/tmp}/scaling/
#
# Numbers: tokens/s per GPU = global tokens/s / GPUs; scaling eff. = tokens/s per GPU at N
# over the same model and method's at 1 GPU. colossal's ms/step is the mean host wall-clock
# time of the timed steps (its bench loop reads the loss back every step); torch's is the
# median of CUDA-event times (each step synchronised). colossal's peak GiB is the allocator
# peak over the timed steps (reset after warm-up), torch's max_memory_allocated over the timed
# steps; both the maximum over ranks. A failed run is a row with its exit status and the tail
# of its log; the script goes on.
set -uo pipefail

REPO="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)"
OUTDIR="${OUT:-/tmp}/scaling"
LOGDIR="$OUTDIR/logs"
RESULTS="$OUTDIR/results.jsonl"
TABLE="$OUTDIR/table.md"
SCALING_DATA="${SCALING_DATA:-$OUTDIR/data}"
MODELS="${MODELS:-gpt2 gpt2-xl}"
WORLDS="${WORLDS:-1 2 4 8}"
METHODS="${METHODS:-ddp zero1 zero2 zero2_offload torch_ddp torch_fsdp}"
MICRO_BATCH_GPT2="${MICRO_BATCH_GPT2:-8}"
MICRO_BATCH_GPT2_XL="${MICRO_BATCH_GPT2_XL:-4}"
SEQ=1024
STEPS="${STEPS:-10}"
WARMUP="${WARMUP:-3}"
RUN_TIMEOUT="${RUN_TIMEOUT:-240}"
PYTHON="${PYTHON:-python3}"
export NCCL_NVLS_ENABLE=0  # NVLink SHARP multicast off on these hosts

die() { echo "scaling.sh: $*" >&2; exit 2; }

# --- checks --------------------------------------------------------------------------
command -v "$PYTHON" >/dev/null || die "no $PYTHON (set PYTHON)"
command -v timeout >/dev/null || die "no timeout (coreutils)"
for m in $MODELS; do
  case "$m" in gpt2 | gpt2-xl) ;; *) die "unknown model '$m' (gpt2, gpt2-xl)" ;; esac
done
needs_colossal=0
for method in $METHODS; do
  case "$method" in
    ddp | zero1 | zero2 | zero2_offload | gemini) needs_colossal=1 ;;
    torch_ddp | torch_fsdp | torch_fsdp2) ;;
    *) die "unknown method '$method' (ddp zero1 zero2 zero2_offload gemini torch_ddp torch_fsdp torch_fsdp2)" ;;
  esac
done
if [[ $needs_colossal -eq 1 ]]; then
  [[ -n "${COLOSSAL_BIN:-}" ]] || die "set COLOSSAL_BIN to the colossal binary (or METHODS to torch_ddp/torch_fsdp only)"
  [[ -x "$COLOSSAL_BIN" ]] || die "COLOSSAL_BIN=$COLOSSAL_BIN is not an executable file"
  COLOSSAL_BIN="$(readlink -f "$COLOSSAL_BIN")"
  corpus="${COLOSSAL_DATA:-$HOME/.cache/colossal/data}/corpus/shakespeare"
  if [[ ! -f "$corpus/SHA256SUMS" ]]; then
    echo "scaling.sh: warning: no $corpus/SHA256SUMS: the colossal runs will fail" \
      "(set COLOSSAL_DATA to a folder with corpus/shakespeare/)" >&2
  fi
fi
if [[ -z "${NGPU:-}" ]]; then
  NGPU="$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || true)"
  if [[ -z "$NGPU" || "$NGPU" == 0 ]]; then
    NGPU="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
  fi
fi
[[ "$NGPU" =~ ^[0-9]+$ && "$NGPU" -ge 1 ]] || die "found no GPU (set NGPU to override)"

mkdir -p "$LOGDIR" "$OUTDIR/runs" "$SCALING_DATA" || die "cannot create $OUTDIR"
SCALING_DATA="$(readlink -f "$SCALING_DATA")"
: >"$RESULTS"

micro_batch() {
  case "$1" in
    gpt2) echo "$MICRO_BATCH_GPT2" ;;
    gpt2-xl) echo "$MICRO_BATCH_GPT2_XL" ;;
  esac
}

# record IMPL LOG RC MODEL METHOD WORLD MICRO_BATCH: one line of results.jsonl from a log.
record() {
  "$PYTHON" - "$@" >>"$RESULTS" <<'PY'
import json, re, sys
impl, log, rc, model, method, world, mb = sys.argv[1:8]
row = {"model": model, "method": method, "world": int(world), "micro_batch": int(mb),
       "rc": int(rc), "log": log}
try:
    text = open(log, errors="replace").read()
except OSError as e:
    text = f"(no log: {e})"
marker = '{"bench": true' if impl == "colossal" else '{"impl": "torch"'
found = None
for line in text.splitlines():
    i = line.find(marker)  # colossal run prefixes worker lines with "[rank N] "
    if i >= 0:
        try:
            found = json.loads(line[i:])
        except ValueError:
            pass
# colossal: every rank's own peak (recipe.lua's "bench_rank" lines); the row takes the maximum.
rank_peaks = []
for line in text.splitlines():
    i = line.find('{"bench_rank"')
    if i >= 0:
        try:
            rank_peaks.append(float(json.loads(line[i:])["peak_memory_bytes"]))
        except (ValueError, KeyError):
            pass
try:
    ok = found is not None and int(rc) == 0
    if ok and impl == "colossal":
        n = int(found["world_size"])
        row.update(ms_per_step=float(found["ms_per_step"]),
                   tokens_per_s_per_gpu=float(found["tokens_per_s"]) / n,
                   peak_gib=max([float(found["peak_memory_bytes"])] + rank_peaks) / 2**30,
                   world_reported=n)
    elif ok:
        n = int(found["world"])
        row.update(ms_per_step=float(found["ms_per_step"]),
                   tokens_per_s_per_gpu=float(found["tokens_per_s_per_gpu"]),
                   peak_gib=float(found["peak_gib"]), world_reported=n)
    if ok and n != int(world):
        row["error"] = f"ran with world size {n}, asked for {world}"
except (KeyError, TypeError, ValueError) as e:
    ok = False
    text += f"\nresult line unreadable: {type(e).__name__}: {e}"
if not ok:
    why = {124: f"timed out ({rc})", 137: "killed (timeout or memory)"}.get(int(rc), f"exit {rc}")
    if int(rc) == 0:
        why = "no JSON result line"
    # The last error-like lines of the log, without the command line, traceback frames
    # and torchrun's failure banner; else its last lines.
    noise = re.compile(r"^(# cd |File |\^|~|=+$|-+$|Traceback|warnings\.warn)|ChildFailedError|error_file|"
                       r"traceback :|To enable traceback|Root Cause|Failures:|NO_OTHER_FAILURES|"
                       r"^\s*(time|host|rank|exitcode|local_rank)\s*:")
    errorish = re.compile(r"Error|Exception|error|FAILED|failed|Killed|out of memory|not available|"
                          r"unknown|must be|no corpus|Aborted|Segmentation")
    lines = [l.strip() for l in text.splitlines() if l.strip() and not noise.search(l.strip())]
    picked = []
    for l in reversed([l for l in lines if errorish.search(l)]):
        if l not in picked:
            picked.insert(0, l)
        if len(picked) == 2:
            break
    tail = picked or lines[-3:]
    row["error"] = (why + ": " + " / ".join(l[-240:] for l in tail))[:600]
row["error"] = row.get("error", "")
print(json.dumps(row))
if row["error"]:
    print(f"   FAILED: {row['error']}", file=sys.stderr)
else:
    print(f"   {row['ms_per_step']:.1f} ms/step, {row['tokens_per_s_per_gpu']:.0f} tokens/s per GPU, "
          f"peak {row['peak_gib']:.2f} GiB", file=sys.stderr)
PY
}

# run_one MODEL METHOD WORLD: one benchmark in a fresh directory, its result appended.
run_counter=0
run_one() {
  local model=$1 method=$2 world=$3
  local mb tag log dir impl rc port
  mb="$(micro_batch "$model")"
  tag="${model}_${method}_x${world}"
  log="$LOGDIR/$tag.log"
  dir="$(mktemp -d "$OUTDIR/runs/$tag.XXXXXX")"
  run_counter=$((run_counter + 1))
  port=$((29500 + run_counter))  # a fresh rendezvous port: a killed run may still hold the last
  local -a cmd
  case "$method" in
    ddp | zero1 | zero2 | zero2_offload | gemini)
      impl=colossal
      local recipe
      local -a sets=(--set "model.preset=$model" --set "data.micro_batch_size=$mb"
        --set "data.seq_len=$SEQ" --set accumulation_steps=1)
      case "$method" in
        ddp)
          recipe="$REPO/recipes/gpt2_ddp.lua"
          sets+=(--set precision=bf16)
          ;;
        gemini)
          # gpt2_gemini.lua names the sizes (no preset key) and checkpoints
          # activations: the sizes of $model, and no checkpointing, as the others.
          recipe="$REPO/recipes/gpt2_gemini.lua"
          local shape="12 12 768"
          [[ $model == gpt2-xl ]] && shape="48 25 1600"
          read -r nl nh ne <<<"$shape"
          sets=(--set "model.n_layer=$nl" --set "model.n_head=$nh" --set "model.n_embd=$ne"
            --set model.checkpoint_ratio=0 --set "data.micro_batch_size=$mb"
            --set "data.seq_len=$SEQ" --set accumulation_steps=1 --set plugin.precision=bf16)
          ;;
        zero1 | zero2 | zero2_offload)
          recipe="$REPO/recipes/gpt2_zero.lua"
          local stage=2
          [[ $method == zero1 ]] && stage=1
          sets+=(--set "plugin.stage=$stage" --set plugin.precision=bf16)
          if [[ $method == zero2_offload ]]; then
            sets+=(--set plugin.cpu_offload=true)
          fi
          ;;
      esac
      ln -s "$SCALING_DATA" "$dir/data"  # the recipes tokenize into ./data/shakespeare once
      cmd=("$COLOSSAL_BIN" run --nproc_per_node "$world" --master_port "$port" bench "$recipe"
        --steps "$STEPS" --warmup "$WARMUP" "${sets[@]}")
      ;;
    torch_ddp | torch_fsdp | torch_fsdp2)
      impl=torch
      cmd=("$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$world"
        "$REPO/tools/bench/torch_gpt2_dist.py" --model "$model" --mode "${method#torch_}"
        --micro_batch "$mb" --steps "$STEPS" --warmup "$WARMUP")
      ;;
  esac
  echo "== $tag: micro-batch $mb, $world GPU(s) ($(date -u +%H:%M:%S))"
  {
    echo "# cd $dir && NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE timeout -k 20 $RUN_TIMEOUT ${cmd[*]}"
  } >"$log"
  (cd "$dir" && timeout -k 20 "$RUN_TIMEOUT" "${cmd[@]}") >>"$log" 2>&1
  rc=$?
  if ! record "$impl" "$log" "$rc" "$model" "$method" "$world" "$mb" 2>&1; then
    printf '{"model": "%s", "method": "%s", "world": %d, "micro_batch": %d, "rc": %d, "error": "%s"}\n' \
      "$model" "$method" "$world" "$mb" "$rc" "could not read the log $log" >>"$RESULTS"
  fi
  rm -rf "$dir"
}

echo "scaling.sh: $NGPU GPU(s); models: $MODELS; GPUs: $WORLDS; methods: $METHODS;" \
  "$STEPS steps after $WARMUP warm-up; logs in $LOGDIR"
for model in $MODELS; do
  for world in $WORLDS; do
    if [[ "$world" -gt "$NGPU" ]]; then
      echo "== $model on $world GPUs: skipped (this host has $NGPU)"
      continue
    fi
    for method in $METHODS; do
      run_one "$model" "$method" "$world"
    done
  done
done

# --- the table -----------------------------------------------------------------------
"$PYTHON" - "$RESULTS" >"$TABLE" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
base = {(r["model"], r["method"]): r["tokens_per_s_per_gpu"]
        for r in rows if r["world"] == 1 and not r["error"]}
print("| model | method | GPUs | micro batch | ms/step | tokens/s per GPU | scaling eff. | peak GiB | notes |")
print("|---|---|---:|---:|---:|---:|---:|---:|---|")
for r in rows:
    head = f"| {r['model']} | {r['method']} | {r['world']} | {r['micro_batch']} |"
    if r["error"]:
        err = r["error"].replace("|", "\\|").replace("\n", " ")
        print(f"{head} - | - | - | - | FAILED ({err}) |")
        continue
    b = base.get((r["model"], r["method"]))
    eff = f"{r['tokens_per_s_per_gpu'] / b:.2f}" if b else "-"
    print(f"{head} {r['ms_per_step']:.1f} | {r['tokens_per_s_per_gpu']:,.0f} | {eff} | {r['peak_gib']:.2f} | |")
PY
echo
cat "$TABLE"
echo
echo "table: $TABLE; results: $RESULTS; logs: $LOGDIR"
