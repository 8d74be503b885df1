#!/usr/bin/env bash
# Gemini on one GPU beside low_level_zero and PyTorch FSDP2 (CPU offload), in one
# call on the GPU machine, from the repository root, with a bundle made by
#   tools/gpu/bundle.sh //parallel/gemini:gemini_cuda_test //lua:colossal
# and the data files (corpus/, gpt2.tiktoken) in $BUNDLE/data:
#
#   tools/bench/gemini.sh BUNDLE small   # GPT-2 1.5B, micro-batch 8: zero2, gemini cuda/auto/cpu,
#                                        # zero2 + cpu_offload, torch FSDP2 + CPUOffloadPolicy
#   tools/bench/gemini.sh BUNDLE large   # gemini auto: the 6.6B (32 x 4096) at micro-batch 4,
#                                        # then a 10.3B (50 x 4096) at micro-batch 2 (SIZES="6.6"
#                                        # picks; LARGE_SETS="k=v ..." adds --set's to both)
#   tools/bench/gemini.sh BUNDLE checkpoint # gemini auto saving and resuming (SIZES="1.5 6.6"
#                                        # picks): 2 steps + a save, a resume for 2 more, and 4 steps
#                                        # without saves (SKIP_STRAIGHT=1 leaves them out); host peaks
#                                        # and losses side by side (CKPT_DIR: where the checkpoints
#                                        # go, default /tmp; NPROC=2: two GPUs; CKPT_RECIPE=recipes/
#                                        # gpt2_zero.lua CKPT_SETS="model.preset=gpt2-xl ...": another)
#   tools/bench/gemini.sh BUNDLE dynamics # the first steps' losses of an 8 x 4096 GPT-2, ours
#                                        # (gemini cuda) and PyTorch's (tools/bench/torch_gpt2_losses.py),
#                                        # at the recipe's peak lr and at LRS (default "3e-4 1.2e-4 6e-5")
#
# SKIP_TORCH=1 leaves the PyTorch run out. Every run prints its own lines; the last lines are a table: what, ms/step,
# tokens/s, GPU peak, host peak (max RSS of the process, and the largest anonymous
# memory sampled every 0.1 s: RSS also counts mapped file pages), and the losses of the
# training runs. bf16, sequence 1024.
set -uo pipefail
bundle="$1"
what="${2:-small}"
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export COLOSSAL_DATA="$bundle/data"
export NCCL_NVLS_ENABLE=0
bin="$bundle/bin/lua_colossal"
rows=()

# run LABEL TIMEOUT COMMAND...: the command's output, its host peak, one row.
run() {
  local label="$1" limit="$2"
  shift 2
  echo "===== $label: $*"
  local log
  log=$(mktemp)
  /usr/bin/env python3 - "$limit" "$@" <<'PY' 2>&1 | tee "$log"
# max RSS of the process (and of its workers), and, sampled every 0.1 s, the
# largest anonymous memory any of them held: max RSS also counts the pages of
# files they map (a checkpoint loaded as views), which the kernel can drop.
import os, resource, subprocess, sys, time
limit = int(sys.argv[1])
def tree(root):
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    kids.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
            except OSError:
                pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out
anon = 0
proc = subprocess.Popen(sys.argv[2:])
start = time.time()
code = None
while code is None:
    for p in tree(proc.pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        anon = max(anon, int(line.split()[1]))
        except OSError:
            pass
    code = proc.poll()
    if code is None and time.time() - start > limit:
        proc.kill()
        proc.wait()
        code = "timeout"
    time.sleep(0.1)
print(f"host_peak_gib {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20:.1f} "
      f"anon_peak_gib {anon / 2**20:.1f} exit {code}")
PY
  local summary host losses
  summary=$(grep -E '^\{.*(tokens_per_s|ms_per_step)|^step ' "$log" | tail -1)
  host=$(grep -oE 'host_peak_gib [0-9.]+ anon_peak_gib [0-9.]+ exit [^ ]+' "$log" | tail -1)
  losses=$(grep -oE '^step .*\| loss [0-9.]+' "$log" | grep -oE '[0-9.]+$' | tr '\n' ' ')
  rows+=("$label | ${summary:0:240} | $host | $losses")
}

bench() {  # bench LABEL RECIPE STEPS WARMUP SETS...
  local label="$1" recipe="$2" steps="$3" warmup="$4"
  shift 4
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  run "$label" 420 "$bin" bench "$recipe" --steps "$steps" --warmup "$warmup" "${sets[@]}"
}

xl=(data.micro_batch_size=8)
case "$what" in
  small)
    bench "zero2 1.5B B8" recipes/gpt2_zero.lua 10 3 model.preset=gpt2-xl "${xl[@]}"
    bench "gemini cuda 1.5B B8" recipes/gpt2_gemini.lua 10 3 plugin.placement_policy=cuda \
      model.checkpoint_ratio=0 "${xl[@]}"
    bench "gemini auto 1.5B B8" recipes/gpt2_gemini.lua 10 3 plugin.placement_policy=auto \
      model.checkpoint_ratio=0 "${xl[@]}"
    bench "gemini cpu 1.5B B8" recipes/gpt2_gemini.lua 5 2 plugin.placement_policy=cpu \
      model.checkpoint_ratio=0 "${xl[@]}"
    bench "zero2+cpu_offload 1.5B B8" recipes/gpt2_zero.lua 5 2 model.preset=gpt2-xl \
      plugin.cpu_offload=true "${xl[@]}"
    [[ -n ${SKIP_TORCH:-} ]] || run "torch FSDP2 offload 1.5B B8" 300 torchrun --standalone --nproc_per_node 1 \
      tools/bench/torch_fsdp2_offload.py --n_layer 48 --n_head 25 --n_embd 1600 --micro_batch 8
    ;;
  large)
    # Training runs (losses logged every step) rather than bench: the loss must fall.
    # No checkpoint here: the checkpoint mode measures saves.
    big=(--set log.every_steps=1 --set eval.every_steps=0 --set checkpoint.every_steps=0
         --set sample.max_new_tokens=0)
    for set in ${LARGE_SETS:-}; do big+=(--set "$set"); done  # e.g. LARGE_SETS="optimizer.lr=1.2e-4"
    [[ ${SIZES:-6.6 10.3} == *6.6* ]] && run "gemini auto 6.6B B4" 420 "$bin" recipes/gpt2_gemini.lua \
      --set steps=7 "${big[@]}" \
      --set model.n_layer=32 --set model.n_head=32 --set model.n_embd=4096 --set data.micro_batch_size=4
    [[ ${SIZES:-6.6 10.3} == *10.3* ]] && run "gemini auto 10.3B B2" 540 "$bin" recipes/gpt2_gemini.lua \
      --set steps=5 "${big[@]}" \
      --set model.n_layer=50 --set model.n_head=32 --set model.n_embd=4096 --set data.micro_batch_size=2
    ;;
  checkpoint)
    # The save streams one chunk at a time (parallel/checkpoint): its host
    # peak should stay near the training run's, not grow by the state's
    # 14 bytes a parameter. The resumed steps' losses equal the straight run's
    # (bit for bit with COLOSSAL_DETERMINISTIC=1). NPROC=2: every chunk
    # sharded over two GPUs (colossal run).
    root="${CKPT_DIR:-/tmp}/gemini_ckpt"
    common=(--set log.every_steps=1 --set eval.every_steps=0 --set sample.max_new_tokens=0)
    launch=()
    (( ${NPROC:-1} > 1 )) && launch=(run --nproc_per_node "$NPROC" --master_port 29655)
    recipe="${CKPT_RECIPE:-recipes/gpt2_gemini.lua}"
    for size in ${SIZES:-1.5 6.6}; do
      shape=(); [[ $size == 6.6 ]] && shape=(--set model.n_layer=32 --set model.n_head=32 --set model.n_embd=4096
                                              --set data.micro_batch_size=4)
      for set in ${CKPT_SETS:-}; do shape+=(--set "$set"); done  # e.g. CKPT_SETS="plugin.cpu_offload=true"
      tag="$(basename "$recipe" .lua) $size x${NPROC:-1}"
      rm -rf "$root"; mkdir -p "$root"
      run "$tag: 2 steps + save" 540 "$bin" "${launch[@]}" "$recipe" --set steps=2 \
        "${common[@]}" "${shape[@]}" --set checkpoint.dir="$root/run" --set checkpoint.every_steps=2
      du -sh "$root/run"/step_* 2>/dev/null
      run "$tag: resume, 2 more" 540 "$bin" "${launch[@]}" "$recipe" --set steps=4 \
        "${common[@]}" "${shape[@]}" --set checkpoint.dir="$root/run" --set checkpoint.every_steps=0
      rm -rf "$root"
      [[ -n ${SKIP_STRAIGHT:-} ]] || run "$tag: 4 steps, no save" 540 "$bin" "${launch[@]}" "$recipe" \
        --set steps=4 "${common[@]}" "${shape[@]}" --set checkpoint.every_steps=0
    done
    ;;
  dynamics)
    # Same shape, schedule, optimizer and corpus; different draws of the data.
    wide=(--set model.n_layer=8 --set model.n_head=32 --set model.n_embd=4096 --set data.micro_batch_size=4
          --set plugin.placement_policy=cuda --set model.checkpoint_ratio=0 --set steps=8
          --set log.every_steps=1 --set eval.every_steps=0 --set checkpoint.every_steps=0
          --set sample.max_new_tokens=0)
    for lr in ${LRS:-3e-4 1.2e-4 6e-5}; do
      run "ours 8x4096 lr $lr" 300 "$bin" recipes/gpt2_gemini.lua "${wide[@]}" --set optimizer.lr="$lr"
      [[ -n ${SKIP_TORCH:-} ]] || run "torch 8x4096 lr $lr" 300 python3 tools/bench/torch_gpt2_losses.py \
        --n_layer 8 --n_head 32 --n_embd 4096 --micro_batch 4 --steps 8 --lr "$lr"
    done
    ;;
esac
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
printf '%s\n' "${rows[@]}"
