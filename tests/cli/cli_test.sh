#!/usr/bin/env bash
# End-to-end tests of the `colossal` binary: subcommands, messages, exit codes.
set -uo pipefail

bin="lua/colossal"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
failures=0
out="$tmp/out"
err="$tmp/err"

# run_cli EXPECTED_CODE ARGS...: runs the binary, keeps stdout/stderr in $out/$err.
run_cli() {
  local want="$1"
  shift
  "$bin" "$@" >"$out" 2>"$err"
  local got=$?
  if [[ "$got" != "$want" ]]; then
    echo "FAIL: colossal $* exited $got, want $want"
    echo "--- stdout"; cat "$out"; echo "--- stderr"; cat "$err"
    failures=$((failures + 1))
    return 1
  fi
}

# expect FILE REGEX: FILE has a line matching REGEX (grep -E).
expect() {
  if ! grep -qE -- "$2" "$1"; then
    echo "FAIL: no line matching '$2' in $(basename "$1"):"
    cat "$1"
    failures=$((failures + 1))
  fi
}

# A port for a job's rendezvous: random, so parallel runs of this test (and
# other tests) do not meet on one.
# A rendezvous port below Linux's ephemeral range (32768..60999), where the
# tests running beside this one bind their own sockets.
port() { echo $((20000 + RANDOM % 12000)); }

# --- help and usage ----------------------------------------------------------
run_cli 0 --help && expect "$out" '^usage: colossal <command>' && expect "$out" '^exit codes: 0 ok'
run_cli 2 && expect "$err" '^usage: colossal'
for cmd in check run generate "data" "data prepare" "recipes/gpt2_zero.lua"; do
  # shellcheck disable=SC2086
  run_cli 0 $cmd --help && expect "$out" '^usage: colossal'
done
run_cli 2 chek && expect "$err" "^colossal: unknown command 'chek'; did you mean \"check\"\\?$"
run_cli 2 data prepar && expect "$err" "^colossal data: unknown subcommand 'prepar'; did you mean \"prepare\"\\?$"
run_cli 2 check --verbose && expect "$err" '^colossal check: unknown flag --verbose$'

# --- unknown flags: exit 2 with a suggestion ---------------------------------
run_cli 2 run --nproc_per_nod 2 check &&
  expect "$err" '^colossal run: unknown flag --nproc_per_nod; did you mean "--nproc_per_node"\?$' &&
  expect "$err" '^usage: colossal run'
run_cli 2 data prepare --inputs a --output b &&
  expect "$err" '^colossal data prepare: unknown flag --inputs; did you mean "--input"\?$'
run_cli 2 run --nproc_per_node two check && expect "$err" "wants an integer, got 'two'"
run_cli 2 run --stop_timeout 0 check && expect "$err" "stop_timeout"
run_cli 2 run --nproc_per_node 2 chekc && expect "$err" "did you mean \"check\"\\?"
run_cli 2 run && expect "$err" '^colossal run: no recipe or command to run$'

# --- check, CPU-only machine -------------------------------------------------
run_cli 0 check
for key in colossal 'CUDA build' 'CUDA runtime' 'CUDA driver' NCCL cuDNN GPUs; do
  expect "$out" "^$key: +[^ ]"
done
expect "$out" '^Lua: +Lua 5\.4\.[0-9]+$'
expect "$out" '^OpenBLAS: +OpenBLAS'
# No GPU in CI: either a CPU-only build or "none (...)".
expect "$out" '^GPUs: +(none|not usable by this build|[0-9]+$)'

# --- data prepare ------------------------------------------------------------
# A byte-level tokenizer fixture (the 256 single-byte tokens, ranks 0..255).
tok="$tmp/bytes.tiktoken"
: >"$tok"
for i in $(seq 0 255); do
  printf "%s %d\n" "$(printf "\\$(printf %03o "$i")" | base64)" "$i" >>"$tok"
done
run_cli 0 data prepare --input lua/testdata/corpus --output "$tmp/shards" --tokenizer "$tok" \
  --val_fraction 0.2 --threads 2 --name tiny &&
  expect "$out" '^train: [0-9]+ documents' && expect "$out" '^val: +[0-9]+ documents' &&
  expect "$err" '^prepare: 100%'
for f in manifest.json tiny_train_000000.bin tiny_val_000000.bin; do
  [[ -s "$tmp/shards/$f" ]] || { echo "FAIL: $f not written"; failures=$((failures + 1)); }
done
COLOSSAL_DATA="$tmp/nothing" run_cli 1 data prepare --input lua/testdata/corpus --output "$tmp/x" &&
  expect "$err" "^colossal data prepare: no GPT-2 tokenizer at $tmp/nothing/gpt2.tiktoken; fetch it with tools/data/fetch_gpt2_ranks.sh"
run_cli 2 data prepare --input lua/testdata/corpus && expect "$err" '^colossal data prepare: --output is required$'
run_cli 2 data prepare --input a --output b --val_fraction 1.5 && expect "$err" 'val_fraction must be in \[0, 1\)'
# An input that names nothing, or cannot give a val split, is the user's
# mistake: 2, as a recipe's data.input exits (lua/testdata/bad/missing_input.lua).
run_cli 2 data prepare --input "$tmp/absent" --output "$tmp/x" --tokenizer "$tok" &&
  expect "$err" "^colossal data prepare: .*$tmp/absent"
# One long text: as one document it cannot give a val split; as paragraphs it can.
printf 'First paragraph, a few words.\n\nSecond one.\n\nThird, the last.\n\nA fourth.\n' >"$tmp/book.txt"
run_cli 2 data prepare --input "$tmp/book.txt" --output "$tmp/book1" --tokenizer "$tok" &&
  expect "$err" 'split it into paragraphs \(recipe data.split = "paragraph", data prepare --split paragraph\)'
run_cli 0 data prepare --input "$tmp/book.txt" --output "$tmp/book2" --tokenizer "$tok" --split paragraph \
  --val_fraction 0.3 && expect "$out" '^train: +[0-9]+ documents' && expect "$out" '^val: +[1-9][0-9]* documents'
run_cli 2 data prepare --input "$tmp/book.txt" --output "$tmp/book3" --split chapter &&
  expect "$err" "^colossal data prepare: --split must be file, paragraph or line, got 'chapter'"
# Chat data: the flags are checked, and a tokenizer without the template's tokens is refused.
printf '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n' >"$tmp/chat.jsonl"
run_cli 2 data prepare --input "$tmp/chat.jsonl" --output "$tmp/chat1" --tokenizer "$tok" --format json &&
  expect "$err" "^colossal data prepare: --format must be text or chat, got 'json'"
run_cli 2 data prepare --input "$tmp/chat.jsonl" --output "$tmp/chat1" --tokenizer "$tok" --chat_template chatml &&
  expect "$err" "^colossal data prepare: --chat_template goes with --format chat"
run_cli 2 data prepare --input "$tmp/chat.jsonl" --output "$tmp/chat1" --tokenizer "$tok" --format chat \
  --chat_template vicuna && expect "$err" "^colossal data prepare: --chat_template must be one of llama3, llama3.1, chatml, qwen2, qwen2.5, got 'vicuna'"
run_cli 2 data prepare --input "$tmp/chat.jsonl" --output "$tmp/chat1" --tokenizer "$tok" --format chat \
  --chat_template chatml && expect "$err" "has no special token <\|im_start\|> that the chatml chat template needs"

# --- run: two workers --------------------------------------------------------
run_cli 0 run --nproc_per_node 2 --master_port $(port) check &&
  expect "$out" '^\[rank 0\] Lua: +Lua 5\.4' && expect "$out" '^\[rank 1\] Lua: +Lua 5\.4'
# A failing worker: its exit code comes back, and it is named.
run_cli 2 run --nproc_per_node 2 data prepare --input "$tmp/absent" --output "$tmp/x" --tokenizer "$tok" &&
  expect "$err" '^colossal run: worker rank [01] \(local rank [01], pid [0-9]+, .*\) exited with code 2' &&
  expect "$err" '^\[rank [01]\] colossal data prepare: '

# --- recipes -----------------------------------------------------------------
run_cli 2 lua/testdata/syntax_error.lua &&
  expect "$err" "^colossal recipe: lua/testdata/syntax_error.lua:4: '}' expected"
run_cli 2 lua/testdata/not_a_table.lua && expect "$err" 'must return a table.*returned number$'
# No such recipe: a command-line mistake (2, as python's "can't open file"); a
# recipe that is there but cannot be read (here a folder): 1.
run_cli 2 lua/testdata/absent.lua && expect "$err" '^colossal recipe: cannot open lua/testdata/absent.lua'
run_cli 2 bench lua/testdata/absent.lua && expect "$err" '^colossal bench: cannot open lua/testdata/absent.lua'
run_cli 2 run --nproc_per_node 2 lua/testdata/absent.lua &&
  expect "$err" '^colossal run: cannot open lua/testdata/absent.lua: no such file'
mkdir -p "$tmp/folder.lua"
run_cli 1 "$tmp/folder.lua" && expect "$err" "^colossal recipe: cannot .* $tmp/folder.lua"
run_cli 2 recipes/gpt2_zero.lua --set optimizer.lrr=1 &&
  expect "$err" "the recipe has no key 'optimizer.lrr'; did you mean \"lr\"\\?"

# --- training from a recipe --------------------------------------------------
# tiny_zero.lua: ZeRO-2, accumulation 2, checkpoints every 2 steps, in a
# folder of its own; the byte tokenizer above as $COLOSSAL_DATA/gpt2.tiktoken.
here="$PWD"
export COLOSSAL_DATA="$tmp/data_home"
mkdir -p "$COLOSSAL_DATA" && cp "$tok" "$COLOSSAL_DATA/gpt2.tiktoken"
tiny="$here/lua/testdata/tiny_zero.lua"
# train DIR ARGS...: runs the tiny recipe in DIR (created) with ARGS.
train() {
  local dir="$1" want="$2"
  shift 2
  mkdir -p "$dir" && cp -r "$here/lua/testdata/corpus" "$dir/corpus"
  # run_cli counts a failure in the subshell: count it here too.
  (cd "$dir" && run_cli "$want" "$@") || { failures=$((failures + 1)); return 1; }
}
bin="$here/lua/colossal"
train "$tmp/straight" 0 "$tiny" --set steps=6 &&
  expect "$out" '^step +6/6 \| loss [0-9.]+ \| lr ' && expect "$out" 'saved checkpoints/tiny/step_000006' &&
  expect "$out" '^loss [0-9.]+ -> [0-9.]+ over steps 1\.\.6$'
[[ -f "$tmp/straight/checkpoints/tiny/latest" && ! -d "$tmp/straight/checkpoints/tiny/step_000002" ]] ||
  { echo "FAIL: keep = 2 should leave step_000004 and step_000006 only"; ls "$tmp/straight/checkpoints/tiny"; failures=$((failures + 1)); }
# Stop after 4 steps, then resume to 6: the losses of steps 5 and 6 are the
# straight run's, bit for bit (model, ZeRO shards, schedule, data order, RNG).
train "$tmp/resumed" 0 "$tiny" --set steps=4 && expect "$out" 'saved checkpoints/tiny/step_000004'
train "$tmp/resumed" 0 "$tiny" --set steps=6 &&
  expect "$out" '^resumed from checkpoints/tiny/step_000004 \(step 4, [0-9.]+ s\)$' && expect "$out" '^step +6/6'
# Evaluations read the same val batches every time: step 6's val loss (the
# straight run's third evaluation, the resumed run's first) is equal too.
for step in 5 6; do
  for key in loss val_loss; do
    [[ $key == val_loss && $step == 5 ]] && continue
    a=$(grep "\"step\":$step," "$tmp/straight/checkpoints/tiny/log.jsonl" | grep -o "\"$key\":[^,}]*")
    b=$(grep "\"step\":$step," "$tmp/resumed/checkpoints/tiny/log.jsonl" | tail -1 | grep -o "\"$key\":[^,}]*")
    [[ -n "$a" && "$a" == "$b" ]] || { echo "FAIL: step $step: straight $a, resumed $b"; failures=$((failures + 1)); }
  done
done
# A damaged `latest` stops the run instead of training from step 1 over the
# step folders: exit 1 naming the file, nothing on disk changed.
cp -r "$tmp/resumed" "$tmp/damaged" && echo garbage >"$tmp/damaged/checkpoints/tiny/latest"
before=$(cd "$tmp/damaged/checkpoints/tiny" && ls && cat latest)
(cd "$tmp/damaged" && run_cli 1 "$tiny" --set steps=8) || failures=$((failures + 1))
expect "$err" "checkpoint\.dir: colossal\.checkpoint\.latest: '.*latest' should name a step folder"
[[ "$(cd "$tmp/damaged/checkpoints/tiny" && ls && cat latest)" == "$before" ]] ||
  { echo "FAIL: a run with a damaged latest changed the checkpoint folder"; failures=$((failures + 1)); }
# A damaged trainer_state.json (a data loader batch_size of 0), or weights
# holding NaN (older versions saved diverged runs), stop the resume naming the
# file and the field or tensor: exit 2, nothing on disk changed.
snapshot() { (cd "$1/checkpoints/tiny" && ls -R && md5sum latest ./*/*); }
cp -r "$tmp/resumed" "$tmp/bad_state"
sed -i 's/"batch_size": [0-9]*/"batch_size": 0/' "$tmp/bad_state/checkpoints/tiny/step_000006/trainer_state.json"
before=$(snapshot "$tmp/bad_state")
(cd "$tmp/bad_state" && run_cli 2 "$tiny" --set steps=8) || failures=$((failures + 1))
expect "$err" "step_000006/trainer_state\.json': trainer_state\.json: 'data_loader': data loader state: 'batch_size' must be an integer >= 1, got 0"
[[ "$(snapshot "$tmp/bad_state")" == "$before" ]] ||
  { echo "FAIL: a resume from a damaged trainer_state.json changed the checkpoint folder"; failures=$((failures + 1)); }
cp -r "$tmp/resumed" "$tmp/bad_weights"
weights="$tmp/bad_weights/checkpoints/tiny/step_000006/model.safetensors"
# The first tensor's data starts after the 8-byte header length and the header:
# its element 0 becomes a float32 NaN (0x7fc00000, little-endian).
header=$(od -An -t u8 -N8 "$weights" | tr -d ' ')
printf '\x00\x00\xc0\x7f' | dd of="$weights" bs=1 seek=$((8 + header)) conv=notrunc status=none
before=$(snapshot "$tmp/bad_weights")
(cd "$tmp/bad_weights" && run_cli 2 "$tiny" --set steps=8) || failures=$((failures + 1))
expect "$err" "tensor '[^']+' in 'checkpoints/tiny/step_000006/model\.safetensors' holds NaN or inf \(element 0\)"
[[ "$(snapshot "$tmp/bad_weights")" == "$before" ]] ||
  { echo "FAIL: a resume from NaN weights changed the checkpoint folder"; failures=$((failures + 1)); }

# A bad environment variable is named with its value, as the environment's
# mistake: no recipe key (it was blamed on `device:`), no recipe line.
for case in "RANK=x WORLD_SIZE=2|RANK='x' is not an integer" \
  "RANK=0 WORLD_SIZE=0|WORLD_SIZE=0 must be >= 1" \
  "COLOSSAL_DETERMINISTIC=maybe|COLOSSAL_DETERMINISTIC=\"maybe\"" \
  "COLOSSAL_GEMM_AUTOTUNE=sometimes|COLOSSAL_GEMM_AUTOTUNE=\"sometimes\"" \
  "COLOSSAL_ATTENTION=bogus|COLOSSAL_ATTENTION=\"bogus\"" \
  "COLOSSAL_CHECK_COLLECTIVES=yes|COLOSSAL_CHECK_COLLECTIVES=\"yes\"" \
  "COLOSSAL_TIMEOUT=0|COLOSSAL_TIMEOUT=\"0\""; do
  IFS='|' read -r vars message <<<"$case"
  # shellcheck disable=SC2086
  (cd "$tmp/straight" && env $vars "$bin" "$tiny" --set steps=8 >"$out" 2>"$err")
  code=$?
  [[ $code == 2 ]] || { echo "FAIL: $vars: exit $code, want 2"; cat "$err"; failures=$((failures + 1)); }
  expect "$err" "^colossal recipe: environment[: ].*$(sed 's/[][\\.*^$]/\\&/g' <<<"$message")"
  if grep -qE 'device:|tiny_zero\.lua:' "$err"; then
    echo "FAIL: $vars is blamed on the recipe:"; cat "$err"; failures=$((failures + 1))
  fi
done
# The same from a recipe that asks colossal.env() itself (at its line 13).
RANK=x WORLD_SIZE=2 run_cli 2 recipes/gpt2_zero.lua &&
  expect "$err" "^colossal recipe: environment: RANK='x' is not an integer$"

# A recipe's data preparation exits as `data prepare` does for the same cause
# (above): 2 for an input that names nothing, 1 without the default tokenizer.
train "$tmp/prep_absent" 2 "$tiny" --set data.input=absent &&
  expect "$err" "data\.input: colossal\.data\.prepare: cannot read input 'absent'"
COLOSSAL_DATA="$tmp/nothing" train "$tmp/prep_no_tokenizer" 1 "$tiny" &&
  expect "$err" "data\.input: colossal\.data\.prepare: no GPT-2 tokenizer at $tmp/nothing/gpt2\.tiktoken; fetch it"
# A $COLOSSAL_DATA that points nowhere is named beside the corpus it lacks.
COLOSSAL_DATA="$tmp/nothing" run_cli 1 recipes/gpt2_zero.lua &&
  expect "$err" "no corpus at $tmp/nothing/corpus/shakespeare \(\\\$COLOSSAL_DATA is '$tmp/nothing'\)"

# Two workers, ZeRO-2 across them; only rank 0 prints the log lines.
train "$tmp/two" 0 run --nproc_per_node 2 --master_port $(port) "$tiny" &&
  expect "$out" '^\[rank 0\] step +4/4 \| loss ' && expect "$out" '^\[rank 0\] saved checkpoints/tiny/step_000004'
if grep -q '^\[rank 1\] step' "$out"; then echo "FAIL: rank 1 printed log lines"; failures=$((failures + 1)); fi
# The same with every collective checked across the ranks first: it trains alike.
COLOSSAL_CHECK_COLLECTIVES=1 train "$tmp/checked" 0 run --nproc_per_node 2 --master_port $(port) "$tiny" &&
  expect "$out" '^\[rank 0\] step +4/4 \| loss ' && expect "$out" '^\[rank 0\] saved checkpoints/tiny/step_000004'
# Their checkpoint resumes on one worker: ZeRO's shards regather and the data
# continues at the same window of the epoch.
train "$tmp/two" 0 "$tiny" --set steps=6 &&
  expect "$out" '^resumed from checkpoints/tiny/step_000004 \(step 4, [0-9.]+ s\)$' && expect "$out" '^step +6/6'
# A save that fails on rank 0 (a file has its step folder's name): every
# rank stops at once with the save's error, rank 1 naming rank 0, instead of
# waiting for rank 0 until a collective's timeout.
mkdir -p "$tmp/blocked/checkpoints/tiny" && echo x >"$tmp/blocked/checkpoints/tiny/step_000002"
train "$tmp/blocked" 1 run --nproc_per_node 2 --master_port $(port) "$tiny" &&
  cat "$out" "$err" >"$tmp/blocked.all" &&
  expect "$tmp/blocked.all" "^\\[rank 0\\] .*cannot rename checkpoint folder to '.*step_000002'" &&
  expect "$tmp/blocked.all" '^\[rank 1\] .*rank 0 could not write the checkpoint'
# A script that saves on rank 0 only: with COLOSSAL_TIMEOUT=10 rank 0's save
# names rank 1 after 10 s instead of the store's default 5 minutes (the
# command's own limit is below that).
mkdir -p "$tmp/rank0_save" && cp -r "$here/lua/testdata/corpus" "$tmp/rank0_save/corpus"
(cd "$tmp/rank0_save" && COLOSSAL_TIMEOUT=10 timeout 120 "$bin" run --nproc_per_node 2 \
  --master_port $(port) "$here/lua/testdata/save_on_rank0.lua" >"$out" 2>"$err")
code=$?
[[ $code == 1 ]] || { echo "FAIL: a save on rank 0 only: exit $code, want 1"; cat "$out" "$err"; failures=$((failures + 1)); }
cat "$out" "$err" >"$tmp/rank0_save.all"
expect "$tmp/rank0_save.all" '^\[rank 0\] .*rank\(s\) 1 of 2 did not start this save within 10s'
# A worker killed mid-run: the launcher stops the other and exits non-zero
# naming it, and the last checkpoint resumes (saves are atomic).
children() { for st in /proc/[0-9]*/stat; do read -r pid _ _ ppid _ <"$st" 2>/dev/null && [[ "$ppid" == "$1" ]] && echo "$pid"; done; }
mkdir -p "$tmp/killed" && cp -r "$here/lua/testdata/corpus" "$tmp/killed/corpus"
(cd "$tmp/killed" && exec "$bin" run --nproc_per_node 2 --master_port $(port) "$tiny" --set steps=1000000 \
  >"$tmp/killed.out" 2>"$tmp/killed.err") &
launcher=$!
for _ in $(seq 1 600); do [[ -f "$tmp/killed/checkpoints/tiny/latest" ]] && break; sleep 0.1; done
victim=$(children "$launcher" | tail -1)
if [[ -n "$victim" ]]; then kill -9 "$victim"; fi
wait "$launcher"
code=$?
if [[ -z "$victim" || "$code" == 0 ]]; then
  echo "FAIL: killing worker '$victim' left the launcher with exit code $code"; failures=$((failures + 1))
fi
expect "$tmp/killed.err" 'colossal run: worker rank [01] \(local rank [01], pid [0-9]+, .*\) was killed by SIGKILL'
last=$(sed 's/^step_0*//' "$tmp/killed/checkpoints/tiny/latest" 2>/dev/null)
train "$tmp/killed" 0 run --nproc_per_node 2 --master_port $(port) "$tiny" --set steps=$((last + 2)) &&
  expect "$out" "^\\[rank 0\\] resumed from checkpoints/tiny/step_0*$last \\(step $last, [0-9.]+ s\\)$" &&
  expect "$out" "^\\[rank 0\\] step +$((last + 2))/$((last + 2))"

# SIGTERM (a scheduler's preemption) or SIGINT: the run finishes its step,
# saves it, and exits 128 + the signal; the same command resumes from it.
# One process, then two under the launcher (which forwards the signal; the
# workers agree on the step to stop at).
stop_test() {  # NAME SIGNAL CODE LAUNCH...
  local name="$1" sig="$2" code="$3"
  shift 3
  mkdir -p "$tmp/$name" && cp -r "$here/lua/testdata/corpus" "$tmp/$name/corpus"
  (cd "$tmp/$name" && exec "$bin" "$@" "$tiny" --set steps=1000000 >"$tmp/$name.out" 2>"$tmp/$name.err") &
  local pid=$!
  for _ in $(seq 1 600); do [[ -f "$tmp/$name/checkpoints/tiny/latest" ]] && break; sleep 0.1; done
  kill -"$sig" "$pid"
  wait "$pid"
  local got=$?
  [[ "$got" == "$code" ]] || { echo "FAIL: $name: exit code $got, want $code"; cat "$tmp/$name.err"; failures=$((failures + 1)); }
  expect "$tmp/$name.out" "stopped by SIG$sig after step [0-9]+ of 1000000; the same command resumes from there"
  local at
  at=$(grep -oE "stopped by SIG$sig after step [0-9]+" "$tmp/$name.out" | grep -oE '[0-9]+$')
  last=$(sed 's/^step_0*//' "$tmp/$name/checkpoints/tiny/latest" 2>/dev/null)
  [[ -n "$at" && "$at" == "$last" ]] || { echo "FAIL: $name: stopped after step '$at', latest is step '$last'"; failures=$((failures + 1)); }
}
stop_test stop_one TERM 143
train "$tmp/stop_one" 0 "$tiny" --set steps=$((last + 1)) &&
  expect "$out" "^resumed from checkpoints/tiny/step_0*$last \\(step $last, [0-9.]+ s\\)$"
stop_test stop_two INT 130 run --nproc_per_node 2 --master_port $(port) --stop_timeout 120
expect "$tmp/stop_two.err" 'colossal run: interrupted by SIGINT; forwarded to 2 worker\(s\)'

# Two jobs given one port: the second is refused (its rank 0 cannot bind the
# port, its other ranks are refused by the first job's store, which names both
# job ids), and the first trains on undisturbed, then stops cleanly.
shared=$(port)
mkdir -p "$tmp/first" && cp -r "$here/lua/testdata/corpus" "$tmp/first/corpus"
(cd "$tmp/first" && exec "$bin" run --nproc_per_node 2 --master_port $shared "$tiny" --set steps=1000000 \
  >"$tmp/first.out" 2>"$tmp/first.err") &
first=$!
for _ in $(seq 1 600); do [[ -f "$tmp/first/checkpoints/tiny/latest" ]] && break; sleep 0.1; done
mkdir -p "$tmp/second" && cp -r "$here/lua/testdata/corpus" "$tmp/second/corpus"
(cd "$tmp/second" && "$bin" run --nproc_per_node 2 --master_port $shared "$tiny" --set steps=4 \
  >"$tmp/second.out" 2>"$tmp/second.err")
code=$?
[[ "$code" != 0 ]] || { echo "FAIL: a second job on port $shared ran"; failures=$((failures + 1)); }
grep -qE "belongs to another job \(job id '[0-9a-f]+'; this process's is '[0-9a-f]+'\)|already in use" "$tmp/second.err" ||
  { echo "FAIL: the second job's refusal:"; cat "$tmp/second.err"; failures=$((failures + 1)); }
before=$(cat "$tmp/first/checkpoints/tiny/latest")
for _ in $(seq 1 600); do [[ "$(cat "$tmp/first/checkpoints/tiny/latest")" != "$before" ]] && break; sleep 0.1; done
kill -TERM "$first"
wait "$first"
code=$?
[[ "$code" == 143 ]] || { echo "FAIL: the first job ended with $code after the second was refused"; cat "$tmp/first.err"; failures=$((failures + 1)); }
expect "$tmp/first.out" "stopped by SIGTERM after step [0-9]+ of 1000000"

# colossal bench: warm-up, timed steps, a summary and a JSON line; nothing saved.
train "$tmp/bench" 0 bench "$tiny" --steps 2 --warmup 1 &&
  expect "$out" '^bench: 2 steps after 1 warm-up: [0-9.]+ ms/step, [0-9.]+k? tokens/s, MFU -, peak memory ' &&
  expect "$out" '^\{"bench": true, "steps": 2, "ms_per_step": [0-9.]+, "tokens_per_s": [0-9.]+, "mfu": null, ' &&
  expect "$out" '"pinned_peak_bytes": 0, "world_size": 1\}$'
[[ ! -d "$tmp/bench/checkpoints" ]] || { echo "FAIL: bench wrote checkpoints"; failures=$((failures + 1)); }
run_cli 2 bench && expect "$err" '^colossal bench: wants exactly one recipe'
# bench --trace: the first timed step as Chrome trace JSON, one file per rank,
# its folder made: module forwards and backwards, and the optimizer step.
train "$tmp/trace" 0 run --nproc_per_node 2 --master_port $(port) bench "$tiny" --steps 1 --warmup 1 \
  --trace traces/step.json && expect "$out" "step 2's trace is in traces/step\.rank0\.json"
for r in 0 1; do
  for event in '"name":"forward ' '"name":"backward ' '"name":"step"' '"traceEvents"'; do
    grep -qF "$event" "$tmp/trace/traces/step.rank$r.json" 2>/dev/null ||
      { echo "FAIL: rank $r's trace lacks $event"; failures=$((failures + 1)); }
  done
done

# Optimizer and model state through booster:save_/load_optimizer and _model.
train "$tmp/optio" 0 "$here/lua/testdata/optimizer_io.lua" && expect "$out" '^optimizer_io: ok'
bin="lua/colossal"
unset COLOSSAL_DATA

# --- generate ----------------------------------------------------------------
# A tiny random GPT-2 over the 256 bytes (context 8) and the byte-level $tok.
ckpt="$tmp/ckpt"
lua/write_test_checkpoint "$ckpt" >/dev/null || { echo "FAIL: write_test_checkpoint"; failures=$((failures + 1)); }
gen=(generate --checkpoint "$ckpt" --tokenizer "$tok" --prompt "Hello, world" --max_new_tokens 24)
# Greedy: the same text twice, from the root (via `latest`) and the step directory.
run_cli 0 "${gen[@]}" --temperature 0 && cp "$out" "$tmp/greedy1" &&
  expect "$err" '^generate: .*/step_000007: GPT-2 2 layers, 2 heads, n_embd 16, vocab 256, context 8; CPU, float32; 12 prompt tokens$' &&
  expect "$err" '^generate: 24 new tokens$'
run_cli 0 generate --checkpoint "$ckpt/step_000007" --tokenizer "$tok" --prompt "Hello, world" \
  --max_new_tokens 24 --temperature 0 && cp "$out" "$tmp/greedy2"
cmp -s "$tmp/greedy1" "$tmp/greedy2" || { echo "FAIL: greedy generation differs between runs"; failures=$((failures + 1)); }
# A bf16 checkpoint (what GPU training saves) is widened to float32 and generates.
lua/write_test_checkpoint "$tmp/ckpt16" --bf16 >/dev/null || { echo "FAIL: write_test_checkpoint --bf16"; failures=$((failures + 1)); }
run_cli 0 generate --checkpoint "$tmp/ckpt16" --tokenizer "$tok" --prompt "Hello, world" \
  --max_new_tokens 24 --temperature 0 && expect "$err" '^generate: 24 new tokens$'
# A Llama checkpoint: the family comes from its config.json.
lua/write_test_checkpoint "$tmp/ckpt_llama" --llama >/dev/null || { echo "FAIL: write_test_checkpoint --llama"; failures=$((failures + 1)); }
run_cli 0 generate --checkpoint "$tmp/ckpt_llama" --tokenizer "$tok" --prompt "Hello, world" \
  --max_new_tokens 24 --temperature 0 &&
  expect "$err" '^generate: .*/step_000007: Llama 2 layers, 4 heads \(2 key-value\), hidden 32, vocab 256, context 64; CPU, float32; 12 prompt tokens$' &&
  expect "$err" '^generate: 24 new tokens$'
# The prompt, then 24 one-byte tokens, then a newline.
[[ "$(head -c 12 "$tmp/greedy1")" == "Hello, world" && $(wc -c <"$tmp/greedy1") -eq 37 ]] ||
  { echo "FAIL: greedy output is not the prompt + 24 bytes + newline:"; od -c "$tmp/greedy1"; failures=$((failures + 1)); }
# Sampling: the same seed gives the same text; other seeds other text.
run=0
for s in 1 1 2; do
  run=$((run + 1))
  run_cli 0 "${gen[@]}" --temperature 20 --top_k 0 --seed "$s" && cp "$out" "$tmp/sampled_$run"
done
cmp -s "$tmp/sampled_1" "$tmp/sampled_2" ||
  { echo "FAIL: sampling with --seed 1 is not reproducible"; failures=$((failures + 1)); }
cmp -s "$tmp/sampled_1" "$tmp/sampled_3" && { echo "FAIL: seeds 1 and 2 gave the same text"; failures=$((failures + 1)); }
run_cli 0 "${gen[@]}" --temperature 0.8 --top_k 5 --seed 9 && expect "$err" '^generate: 24 new tokens$'
run_cli 0 "${gen[@]}" --max_new_tokens 0 && [[ "$(cat "$out")" == "Hello, world" ]] ||
  { echo "FAIL: --max_new_tokens 0 is not the prompt alone"; failures=$((failures + 1)); }
# Errors.
run_cli 2 generate && expect "$err" '^colossal generate: --checkpoint is required$' && expect "$err" '^usage: colossal generate'
run_cli 2 generate --checkpoint "$ckpt" && expect "$err" '^colossal generate: --prompt is required'
run_cli 2 "${gen[@]}" --temprature 0 && expect "$err" 'unknown flag --temprature; did you mean "--temperature"\?$'
run_cli 2 "${gen[@]}" --temperature -1 && expect "$err" '^colossal generate: --temperature must be a finite number >= 0'
run_cli 2 "${gen[@]}" --top_k many && expect "$err" "^colossal generate: --top_k wants an integer, got 'many'$"
run_cli 2 "${gen[@]}" --seed -3 && expect "$err" '^colossal generate: --seed wants an integer'
# A path that names nothing: 2; a folder that holds no checkpoint: 1.
run_cli 2 generate --checkpoint "$tmp/no_ckpt" --tokenizer "$tok" --prompt hi &&
  expect "$err" "^colossal generate: --checkpoint $tmp/no_ckpt: no such file or folder"
mkdir -p "$tmp/empty_ckpt"
run_cli 1 generate --checkpoint "$tmp/empty_ckpt" --tokenizer "$tok" --prompt hi &&
  expect "$err" "^colossal generate: no checkpoint in '$tmp/empty_ckpt'"
COLOSSAL_DATA="$tmp/nothing" run_cli 1 generate --checkpoint "$ckpt" --prompt hi &&
  expect "$err" "^colossal generate: no GPT-2 tokenizer at $tmp/nothing/gpt2.tiktoken; fetch it with tools/data/fetch_gpt2_ranks.sh"
# No --tokenizer and none in the checkpoint folder: GPT-2's ($COLOSSAL_DATA's,
# here the byte ranks with GPT-2's <|endoftext|> at 50256) must fit the
# model's vocabulary (256), or the ids would mean other words: refused, saying
# what to pass.
mkdir -p "$tmp/gen_data" && cp "$tok" "$tmp/gen_data/gpt2.tiktoken"
COLOSSAL_DATA="$tmp/gen_data" run_cli 1 generate --checkpoint "$ckpt" --prompt hi &&
  expect "$err" "^colossal generate: .*/step_000007 holds no tokenizer, and GPT-2's \(.*gpt2\.tiktoken, 50257 tokens\) does not fit the model's vocabulary of 256: pass --tokenizer"
run_cli 2 generate --checkpoint "$ckpt" --tokenizer "$tmp/absent.tiktoken" --prompt hi &&
  expect "$err" "^colossal generate: --tokenizer $tmp/absent.tiktoken: no such file or folder"
# A config.json that does not match the weights.
cp -r "$ckpt/step_000007" "$tmp/mismatch"
sed -i 's/"n_embd": 16/"n_embd": 32/' "$tmp/mismatch/config.json"
run_cli 1 generate --checkpoint "$tmp/mismatch" --tokenizer "$tok" --prompt hi &&
  expect "$err" '^colossal generate: loading the weights .*'

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all passed"
