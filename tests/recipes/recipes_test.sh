#!/usr/bin/env bash
# Every recipe in recipes/ runs two optimizer steps of a tiny model on the CPU
# through --set overrides; a recipe's GPU-only setting (fp16, bf16) forced on
# the CPU exits with code 2 and says that it needs a GPU.
#
# The overrides of each recipe are listed below (OVERRIDES): --set only replaces
# keys the recipe's table (or, for a script, its colossal.settings{...}) has,
# so each list names only keys that recipe writes. A new recipe without an
# entry fails this test with a message saying to add one.
#
# Hermetic: runs in $TEST_TMPDIR, each recipe in a folder of its own (its data/,
# checkpoints/ and logs/ go there); COLOSSAL_DATA points at a folder with a
# small stand-in for the Shakespeare corpus and a synthetic tokenizer: bytes
# 0..255 plus 50000 two-byte tokens, so that every id of GPT-2's 50257 decodes
# (the samples of a random model) and no GPT-2 ranks are needed.
set -uo pipefail
# The CPU, also on a machine with a GPU (the expectations are the CPU's).
export CUDA_VISIBLE_DEVICES=""

# steps=2 and a tiny model/batch; evaluation, checkpoints and samples kept small.
tiny="steps=2 model.n_layer=1 model.n_head=2 model.n_embd=16 model.max_seq_len=16
  data.micro_batch_size=2 data.seq_len=8 lr_scheduler.warmup_steps=1 lr_scheduler.total_steps=2"
declare -A OVERRIDES=(
  [gpt2_zero]="$tiny eval.batches=1 checkpoint.every_steps=1 sample.max_new_tokens=4"
  [gpt2_single]="$tiny checkpoint.every_steps=1 sample.max_new_tokens=4"
  [gpt2_ddp]="$tiny eval.every_steps=1 eval.batches=1"
  [gpt2_fp16]="$tiny"
  [gpt2_gemini]="$tiny eval.batches=1 checkpoint.every_steps=1 sample.max_new_tokens=4"
  [gpt2_hybrid]="$tiny eval.batches=1 checkpoint.every_steps=1 sample.max_new_tokens=4"
  [custom_loop]="steps=2 n_layer=1 n_head=2 n_embd=16 micro_batch_size=2 seq_len=8"
  [llama_finetune]="steps=2 model.num_hidden_layers=1 model.num_attention_heads=2
    model.num_key_value_heads=1 model.hidden_size=16 model.intermediate_size=32
    model.max_position_embeddings=16 data.micro_batch_size=2 data.seq_len=8
    lr_scheduler.warmup_steps=1 lr_scheduler.total_steps=2 eval.batches=1 checkpoint.every_steps=1
    sample.max_new_tokens=4"
  [mixtral_zero]="steps=2 model.num_hidden_layers=1 model.num_attention_heads=2
    model.num_key_value_heads=1 model.hidden_size=16 model.intermediate_size=32 model.num_local_experts=3
    model.max_position_embeddings=16 data.micro_batch_size=2 data.seq_len=8
    lr_scheduler.warmup_steps=1 lr_scheduler.total_steps=2 eval.batches=1 checkpoint.every_steps=1
    sample.max_new_tokens=4"
  # llama_hybrid: a vocabulary beyond the GPT-2 tokenizer's (50257), so its samples
  # would draw ids the tokenizer cannot decode unless generation keeps to its ids.
  [llama_hybrid]="steps=2 model.num_hidden_layers=1 model.num_attention_heads=2
    model.num_key_value_heads=2 model.hidden_size=16 model.intermediate_size=32 model.vocab_size=200000
    model.max_position_embeddings=16 data.micro_batch_size=2 data.seq_len=8
    lr_scheduler.warmup_steps=1 lr_scheduler.total_steps=2 eval.batches=1 checkpoint.every_steps=1
    sample.max_new_tokens=4"
)
# recipe -> "key=value|message": with the tiny overrides plus this one, the
# recipe must exit with code 2 on the CPU and print the message.
declare -A NEEDS_GPU=(
  [gpt2_fp16]="plugin.precision=fp16|fp16 needs a CUDA device"
  [gpt2_ddp]="precision=bf16|bf16 needs a CUDA device"
  [gpt2_gemini]="plugin.precision=bf16|bf16 needs a CUDA device"
  [llama_finetune]="plugin.precision=bf16|bf16 needs a CUDA device"
  [llama_hybrid]="plugin.precision=bf16|bf16 needs a CUDA device"
  [mixtral_zero]="plugin.precision=bf16|bf16 needs a CUDA device"
  [gpt2_hybrid]="plugin.precision=bf16|bf16 needs a CUDA device"
)

root="$PWD"
bin="$root/lua/colossal"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
export COLOSSAL_DATA="$tmp/cdata"
corpus="$COLOSSAL_DATA/corpus/shakespeare"
mkdir -p "$corpus"

# The synthetic tokenizer: ranks 0..255 the single bytes, 256..50255 two-byte strings.
tok="$COLOSSAL_DATA/gpt2.tiktoken"
if ! perl -MMIME::Base64 -e 'for $i (0..255) { print encode_base64(chr($i), ""), " $i\n" }
    for $k (0..49999) { print encode_base64(chr($k >> 8) . chr($k & 255), ""), " ", 256 + $k, "\n" }' \
  >"$tok"; then
  echo "FAIL: perl (with MIME::Base64) is needed to write the tokenizer fixture"
  exit 1
fi
# A stand-in for tools/data/fetch_default_corpus.sh's Shakespeare.
for d in $(seq 1 12); do
  printf 'ROMEO:\nBut soft, what light through yonder window breaks? (%d)\nJULIET:\nO Romeo, Romeo.\n' \
    "$d" >"$corpus/part$d.txt"
done
(cd "$corpus" && sha256sum ./*.txt >SHA256SUMS)

# run_recipe NAME WANT_CODE LABEL SETS...: runs recipes/NAME.lua in its folder.
run_recipe() {
  local name="$1" want="$2" label="$3"
  shift 3
  local recipe="recipes/$name.lua"
  (cd "$tmp/work_$name" && timeout 300 "$bin" "$recipe" "$@" >"$tmp/$name.$label.out" 2>"$tmp/$name.$label.err")
  local got=$?
  if [[ "$got" != "$want" ]]; then
    echo "FAIL: colossal $recipe $* exited $got, want $want"
    echo "--- stdout (last lines)"; tail -n 20 "$tmp/$name.$label.out"
    echo "--- stderr"; cat "$tmp/$name.$label.err"
    failures=$((failures + 1))
    return 1
  fi
}

failures=0
shopt -s nullglob
recipes=("$root"/recipes/*.lua)
if ((${#recipes[@]} == 0)); then
  echo "FAIL: no recipes in recipes/"
  exit 1
fi
for path in "${recipes[@]}"; do
  name="$(basename "$path" .lua)"
  recipe="recipes/$name.lua"
  if [[ -z "${OVERRIDES[$name]+x}" ]]; then
    echo "FAIL: $recipe has no entry in OVERRIDES in tests/recipes/recipes_test.sh; add the --set" \
      "overrides that make it train 2 steps of a tiny model (keys it has: see the recipe)"
    failures=$((failures + 1))
    continue
  fi
  mkdir -p "$tmp/work_$name"
  ln -sfn "$root/recipes" "$tmp/work_$name/recipes"
  sets=()
  for kv in ${OVERRIDES[$name]}; do sets+=(--set "$kv"); done
  if run_recipe "$name" 0 cpu "${sets[@]}"; then
    if [[ "$name" != custom_loop ]] && ! grep -qE '^step +2/2 ' "$tmp/$name.cpu.out"; then
      echo "FAIL: $recipe: no 'step 2/2' line in its output:"
      cat "$tmp/$name.cpu.out"
      failures=$((failures + 1))
    else
      echo "ok: $recipe trains 2 steps on the CPU"
    fi
  fi
  if [[ -n "${NEEDS_GPU[$name]+x}" ]]; then
    IFS='|' read -r gpu_set message <<<"${NEEDS_GPU[$name]}"
    if run_recipe "$name" 2 gpu "${sets[@]}" --set "$gpu_set"; then
      err="$tmp/$name.gpu.err"
      if ! grep -qF -- "$message" "$err" || ! grep -qE -- "$recipe:[0-9]+: " "$err"; then
        echo "FAIL: $recipe --set $gpu_set: stderr lacks '$recipe:<line>:' or '$message':"
        cat "$err"
        failures=$((failures + 1))
      else
        echo "ok: $recipe --set $gpu_set: exit 2 on the CPU ($(head -n 1 "$err"))"
      fi
    fi
  fi
done

# Recipes on two processes: the main job (issue #9: `colossal run
# --nproc_per_node 2 recipes/gpt2_zero.lua` trains on the CPU, ZeRO-2 across
# both) and tensor parallelism (llama_hybrid: tp 2). Rank 0 logs.
# The rendezvous port: below Linux's ephemeral range (32768..60999), where the
# tests running beside this one bind their sockets; a port another test took
# meanwhile ("Address already in use") gets one more try with another port.
two_procs() {
  rm -rf "$tmp/work_$name/checkpoints"
  local port=$((20000 + RANDOM % 12000))
  (cd "$tmp/work_$name" && timeout 300 "$bin" run --nproc_per_node 2 --master_port "$port" \
    "recipes/$name.lua" "${sets[@]}" >"$tmp/two.out" 2>"$tmp/two.err")
}
# gpt2_hybrid over two pipeline stages (interleaved); llama_hybrid five times:
# tensor parallelism (tp 2), two pipeline stages
# (pp 2; and interleaved, two model chunks per stage), tp 2 with sequence
# parallelism (split_gather), and all_to_all sequence parallelism (sp 2).
for name_plugin in gpt2_zero:low_level_zero gpt2_hybrid:hybrid_parallel:gpt2pp \
    llama_hybrid:hybrid_parallel llama_hybrid:hybrid_parallel:pp \
    llama_hybrid:hybrid_parallel:interleaved llama_hybrid:hybrid_parallel:sp \
    llama_hybrid:hybrid_parallel:a2a; do
  IFS=: read -r name plugin variant <<<"$name_plugin"
  sets=()
  for kv in ${OVERRIDES[$name]}; do sets+=(--set "$kv"); done
  [[ "$variant" == pp ]] && sets+=(--set plugin.tp_size=1 --set plugin.pp_size=2 --set model.num_hidden_layers=2)
  # GPT-2 over two stages, each with two model chunks: four layers.
  [[ "$variant" == gpt2pp ]] && sets+=(--set model.n_layer=4 --set plugin.pp_style=interleaved
    --set plugin.num_model_chunks=2)
  [[ "$variant" == interleaved ]] && sets+=(--set plugin.tp_size=1 --set plugin.pp_size=2
    --set plugin.pp_style=interleaved --set plugin.num_model_chunks=2 --set model.num_hidden_layers=4)
  [[ "$variant" == sp ]] && sets+=(--set plugin.enable_sequence_parallelism=true)
  [[ "$variant" == a2a ]] && sets+=(--set plugin.tp_size=1 --set plugin.enable_sequence_parallelism=true
    --set plugin.sequence_parallelism_mode=all_to_all --set plugin.sp_size=2)
  two_procs || { grep -q "Address already in use" "$tmp/two.out" "$tmp/two.err" && two_procs; }
  if [[ $? -eq 0 ]]; then
    # Every layout generates the recipe's sample (through pipeline stages and
    # sequence-parallel slices too).
    sampled=1
    [[ "${OVERRIDES[$name]}" == *sample.max_new_tokens=4* ]] &&
      ! grep -qF -- "--- sample ---" "$tmp/two.out" && sampled=0
    if grep -qE '^\[rank 0\] step +2/2 ' "$tmp/two.out" && grep -qF "x2, fp32, plugin $plugin" "$tmp/two.out" &&
        ((sampled)); then
      echo "ok: recipes/$name.lua trains 2 steps on 2 processes${variant:+ ($variant)}"
    else
      echo "FAIL: recipes/$name.lua on 2 processes: no '[rank 0] step 2/2', 'x2 ... $plugin' or sample line:"
      cat "$tmp/two.out"
      failures=$((failures + 1))
    fi
  else
    echo "FAIL: colossal run --nproc_per_node 2 recipes/$name.lua failed:"
    tail -n 20 "$tmp/two.out"; cat "$tmp/two.err"
    failures=$((failures + 1))
  fi
done

# A step's loss is the mean over every target it counts, however the step's
# rows fall into micro-batches and processes: replies of 1 to 12 words, one
# conversation a row, so rows count very different numbers of targets. Four
# rows a step as one micro-batch (A), as four micro-batches (B) and as two on
# each of two processes (C) give the same gradient norms (every step) and A
# and B the same losses; D and E are A and B over packed rows (several
# conversations a row, each attending to itself). Averaging the micro-batches' means instead weights a
# short reply's tokens several times a long one's: B's norms then differ from
# A's by far more than the tolerance. Tolerances: float32 sums in another
# order (other GEMM shapes, the all-reduce) differ by ~1e-6 relative; 1e-4
# for step 1, and 1e-3 after AdamW steps taken from those gradients.
token_weighted_steps() {
  local work="$tmp/work_weighted" data="$tmp/weighted.jsonl" i words
  mkdir -p "$work" && ln -sfn "$root/recipes" "$work/recipes"
  : >"$data"
  # 240 of them: the val split (5% of the bytes) must fill a batch of 4 packed rows.
  for i in $(seq 1 240); do
    words="$(printf 'ok %.0s' $(seq 1 $((1 + (i * 7) % 12))))"
    printf '{"messages": [{"role": "user", "content": "Say %d."}, {"role": "assistant", "content": "%s"}]}\n' \
      "$i" "${words% }" >>"$data"
  done
  local common=("${sets[@]}" --set "model.from_pretrained=$tmp/qwen2_hf" --set "data.input=$data"
    --set data.format=chat --set data.seq_len=64
    --set model.max_position_embeddings=128 --set steps=3 --set lr_scheduler.total_steps=3
    --set checkpoint.every_steps=0)
  local run label ok=1
  # D and E: packed rows (several conversations a row, each attending to itself).
  for run in "A 1 4 1 false" "B 1 1 4 false" "C 2 1 2 false" "D 1 4 1 true" "E 1 1 4 true"; do
    read -r label procs micro accum packing <<<"$run"
    local args=("${common[@]}" --set "data.micro_batch_size=$micro" --set "accumulation_steps=$accum"
      --set "data.packing=$packing" --set "checkpoint.dir=checkpoints/$label")
    if ((procs == 1)); then
      (cd "$work" && timeout 300 "$bin" recipes/llama_finetune.lua "${args[@]}" >"$tmp/weighted.$label.out" 2>&1)
    else
      (cd "$work" && timeout 300 "$bin" run --nproc_per_node 2 --master_port $((20000 + RANDOM % 12000)) \
        recipes/llama_finetune.lua "${args[@]}" >"$tmp/weighted.$label.out" 2>&1)
    fi || { echo "FAIL: the token-weighted run $label failed:"; tail -n 20 "$tmp/weighted.$label.out"; ok=0; }
  done
  ((ok)) || { failures=$((failures + 1)); return; }
  # step, loss and grad_norm of each logged step
  local field
  for label in A B C D E; do
    perl -ne 'print "$1 $2 $3\n" if /"grad_norm":\s*([-0-9.eE+]+).*"loss":\s*([-0-9.eE+]+).*"step":\s*(\d+)/' \
      "$work/checkpoints/$label/log.jsonl" >"$tmp/weighted.$label.txt"
  done
  if ! perl -e '
      sub rows { open(my $f, "<", $_[0]) or die; my @r = map { [split] } <$f>; return @r }
      my @a = rows($ARGV[0]); my @b = rows($ARGV[1]); my @c = rows($ARGV[2]);
      my @d = rows($ARGV[3]); my @e = rows($ARGV[4]);
      die "want 3 logged steps each\n" unless @a == 3 && @b == 3 && @c == 3 && @d == 3 && @e == 3;
      my $bad = 0;
      for my $s (0 .. 2) {
        my $tol = $s == 0 ? 1e-4 : 1e-3;
        my ($na, $la) = @{$a[$s]}; my ($nb, $lb) = @{$b[$s]}; my ($nc) = @{$c[$s]};
        my ($nd, $ld) = @{$d[$s]}; my ($ne, $le) = @{$e[$s]};
        for my $p (["B norm", $nb, $na], ["C norm", $nc, $na], ["B loss", $lb, $la],
                   ["E norm", $ne, $nd], ["E loss", $le, $ld]) {
          my ($what, $got, $want) = @$p;
          if (abs($got - $want) > $tol * abs($want)) { print "step ", $s + 1, ": $what $got vs A $want\n"; $bad = 1 }
        }
      }
      exit $bad' "$tmp"/weighted.{A,B,C,D,E}.txt; then
    echo "FAIL: a step's loss is not the mean over its counted targets (grad_norm loss step, A B C D E):"
    cat "$tmp"/weighted.{A,B,C,D,E}.txt
    failures=$((failures + 1))
  else
    echo "ok: token-weighted steps: one micro-batch, four, and two on each of two processes agree" \
      "(one conversation a row, and packed rows attending within each conversation)"
  fi
}

# Fine-tuning from a Hugging Face directory: the tiny Llama's own step
# directory (config.json + model.safetensors) as from_pretrained. Its
# config.json fixes the architecture (the recipe's sizes are not used, and a
# note on stderr says so); the run loads its weights through the plugin and
# trains two steps. (That the weights arrive exactly is nn/models/llama's test.)
name=llama_finetune
ckpt="$tmp/work_$name/checkpoints/$name/step_000002"
sets=()
for kv in ${OVERRIDES[$name]}; do sets+=(--set "$kv"); done
if [[ ! -f "$ckpt/config.json" ]]; then
  echo "FAIL: recipes/$name.lua left no $ckpt/config.json"
  failures=$((failures + 1))
elif run_recipe "$name" 0 pretrained "${sets[@]}" --set "model.from_pretrained=$ckpt" \
    --set checkpoint.dir=checkpoints/from_pretrained; then
  if grep -qE '^step +2/2 ' "$tmp/$name.pretrained.out" &&
      grep -qF "from_pretrained's config.json fixes" "$tmp/$name.pretrained.err"; then
    echo "ok: recipes/$name.lua fine-tunes from a Hugging Face directory"
  else
    echo "FAIL: recipes/$name.lua from_pretrained: no 'step 2/2' line or no note on stderr:"
    cat "$tmp/$name.pretrained.out" "$tmp/$name.pretrained.err"
    failures=$((failures + 1))
  fi
fi

# The recipe's documented fine-tune command names token shards of one's own
# (--set data.train=GLOB --set data.val=GLOB, placeholders in the recipe): the
# shards its first run prepared from the corpus serve here. Without them it
# said it trains on the built-in corpus.
if ! grep -qF "data.train is empty" "$tmp/$name.cpu.out"; then
  echo "FAIL: recipes/$name.lua without data.train did not say it trains on the built-in corpus:"
  cat "$tmp/$name.cpu.out"
  failures=$((failures + 1))
elif run_recipe "$name" 0 shards "${sets[@]}" --set "data.train=data/shakespeare/*_train_*.bin" \
    --set "data.val=data/shakespeare/*_val_*.bin" --set checkpoint.dir=checkpoints/shards; then
  if grep -qE '^step +2/2 ' "$tmp/$name.shards.out" && ! grep -qF "data.train is empty" "$tmp/$name.shards.out"; then
    echo "ok: recipes/$name.lua trains on token shards given by --set data.train / data.val"
  else
    echo "FAIL: recipes/$name.lua with --set data.train / data.val:"
    cat "$tmp/$name.shards.out" "$tmp/$name.shards.err"
    failures=$((failures + 1))
  fi
fi

# The same directory as a Mistral with a sliding window (config.json edited):
# a window of seq_len (8) trains; a window of 4 is the model's context, so
# seq_len 8 is refused naming both keys.
for window in 8 4; do
  mistral="$tmp/mistral_$window"
  rm -rf "$mistral" && cp -r "$ckpt" "$mistral" &&
    sed -i "s/\"model_type\": \"llama\"/\"model_type\": \"mistral\", \"sliding_window\": $window/" \
      "$mistral/config.json"
  # The fine-tune's own tokenizer beside it (a SentencePiece model; ids < 700): its
  # step directories must carry it.
  [[ $window == 8 ]] && cp "$root/io/tokenizer/testdata/spm_tiny/tokenizer.model" "$mistral/"
  want=0; [[ $window == 4 ]] && want=2
  if run_recipe "$name" "$want" "mistral$window" "${sets[@]}" --set "model.from_pretrained=$mistral" \
      --set checkpoint.dir=checkpoints/mistral; then
    saved="$tmp/work_$name/checkpoints/mistral/step_000002"
    if [[ $window == 8 ]] && grep -qE '^step +2/2 ' "$tmp/$name.mistral$window.out" &&
        cmp -s "$mistral/tokenizer.model" "$saved/tokenizer.model"; then
      echo "ok: recipes/$name.lua fine-tunes a Mistral whose sliding window covers seq_len; its steps carry its tokenizer"
    elif [[ $window == 4 ]] && grep -qF "data.seq_len" "$tmp/$name.mistral$window.err" &&
        grep -qF "sliding_window" "$tmp/$name.mistral$window.err"; then
      echo "ok: recipes/$name.lua refuses a seq_len past a Mistral's sliding window"
    else
      echo "FAIL: recipes/$name.lua with a Mistral of window $window:"
      cat "$tmp/$name.mistral$window.out" "$tmp/$name.mistral$window.err"
      failures=$((failures + 1))
    fi
  fi
done

# A Qwen2 (a Llama with q/k/v biases): the recipe's tiny model with qkv_bias
# (a copy of the recipe with the key added) trains and saves a Qwen2ForCausalLM
# folder with the biases; that folder, with a Qwen2 tokenizer.json beside it,
# is fine-tuned through from_pretrained and its steps say qwen2 again.
qwen="$tmp/work_qwen2"
mkdir -p "$qwen/recipes"
sed 's/tie_word_embeddings = true },/tie_word_embeddings = true, qkv_bias = true },/' \
  "$root/recipes/llama_finetune.lua" >"$qwen/recipes/llama_finetune.lua"
qwen_saved="$qwen/checkpoints/llama_finetune/step_000002"
if ! grep -qF "qkv_bias = true" "$qwen/recipes/llama_finetune.lua"; then
  echo "FAIL: recipes/llama_finetune.lua's CPU model no longer ends in 'tie_word_embeddings = true },'" \
    "(this test adds qkv_bias there)"
  failures=$((failures + 1))
elif ! (cd "$qwen" && timeout 300 "$bin" recipes/llama_finetune.lua "${sets[@]}" >"$tmp/qwen2.out" 2>&1); then
  echo "FAIL: the tiny Qwen2 did not train:"; tail -n 20 "$tmp/qwen2.out"
  failures=$((failures + 1))
# The safetensors header (its tensor names), read into a file: `head | grep -q` under
# pipefail fails whenever grep exits before head has written everything (SIGPIPE).
elif ! head -c 65536 "$qwen_saved/model.safetensors" >"$tmp/qwen2_header" ||
    ! grep -qF '"model_type": "qwen2"' "$qwen_saved/config.json" ||
    ! grep -qaF "self_attn.q_proj.bias" "$tmp/qwen2_header" ||
    grep -qaF "self_attn.o_proj.bias" "$tmp/qwen2_header"; then
  echo "FAIL: the tiny Qwen2's step is not a Qwen2 folder (model_type qwen2, q_proj but no o_proj bias):"
  cat "$qwen_saved/config.json"
  failures=$((failures + 1))
else
  rm -rf "$tmp/qwen2_hf" && cp -r "$qwen_saved" "$tmp/qwen2_hf" &&
    cp "$root"/io/tokenizer/testdata/qwen2_tiny/tokenizer*.json "$tmp/qwen2_hf/"
  if run_recipe "$name" 0 qwen2 "${sets[@]}" --set "model.from_pretrained=$tmp/qwen2_hf" \
      --set checkpoint.dir=checkpoints/qwen2; then
    saved="$tmp/work_$name/checkpoints/qwen2/step_000002"
    if grep -qE '^step +2/2 ' "$tmp/$name.qwen2.out" && grep -qF '"model_type": "qwen2"' "$saved/config.json" &&
        cmp -s "$tmp/qwen2_hf/tokenizer.json" "$saved/tokenizer.json"; then
      echo "ok: recipes/$name.lua fine-tunes a Qwen2 folder; its steps are Qwen2's and carry its tokenizer.json"
    else
      echo "FAIL: recipes/$name.lua with a Qwen2 folder:"
      cat "$tmp/$name.qwen2.out" "$tmp/$name.qwen2.err" "$saved/config.json"
      failures=$((failures + 1))
    fi
  fi
  # Chat fine-tuning (SFT) of the same folder: JSON Lines conversations are
  # tokenized with its tokenizer (from_pretrained) and the ChatML template, each
  # shard with a loss mask beside it, and two steps train on them.
  # The folder's tokenizer_config.json names its template, as Qwen2's do.
  cat >"$tmp/qwen2_hf/tokenizer_config.json" <<'JSON'
{"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
 "chat_template": "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}{% endfor %}"}
JSON
  chats="$tmp/chats.jsonl"
  : >"$chats"
  for i in $(seq 1 40); do
    printf '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is %d + %d?"}, {"role": "assistant", "content": "%d."}]}\n' \
      "$i" "$i" $((2 * i)) >>"$chats"
  done
  if run_recipe "$name" 0 qwen2chat "${sets[@]}" --set "model.from_pretrained=$tmp/qwen2_hf" \
      --set "data.input=$chats" --set data.format=chat --set checkpoint.dir=checkpoints/qwen2chat; then
    prepared="$tmp/work_$name/data/data"
    if grep -qE '^step +2/2 ' "$tmp/$name.qwen2chat.out" && [[ -f "$prepared/data_train_000000.mask" ]] &&
        grep -qF '"format": "chat"' "$prepared/manifest.json" && grep -qF '"chat_template": "chatml"' "$prepared/manifest.json" &&
        grep -qF '"counted_tokens"' "$prepared/manifest.json"; then
      echo "ok: recipes/$name.lua fine-tunes a Qwen2 folder on chat data (loss masks beside the shards)"
      # Its step answers a chat turn: the folder's template (carried in its
      # tokenizer_config.json), the reply alone on stdout.
      if (cd "$tmp/work_$name" && timeout 120 "$bin" generate --checkpoint checkpoints/qwen2chat --chat \
            --system "Be brief." --prompt "What is 3 + 3?" --max_new_tokens 3 --temperature 0 \
            >"$tmp/chatgen.out" 2>"$tmp/chatgen.err") && grep -qF "(a chat turn)" "$tmp/chatgen.err" &&
          ! grep -qF "What is" "$tmp/chatgen.out"; then
        echo "ok: colossal generate --chat answers a user message with the step's chat template"
      else
        echo "FAIL: colossal generate --chat on the chat fine-tune's step:"
        cat "$tmp/chatgen.out" "$tmp/chatgen.err"
        failures=$((failures + 1))
      fi
    else
      echo "FAIL: recipes/$name.lua on chat data:"
      cat "$tmp/$name.qwen2chat.out" "$tmp/$name.qwen2chat.err"; ls "$prepared"
      failures=$((failures + 1))
    fi
  fi
  # chat_trains LABEL WHAT SETS...: the same chat data trains two steps with SETS too.
  chat_trains() {
    local label="$1" what="$2"
    shift 2
    if run_recipe "$name" 0 "$label" "${sets[@]}" --set "model.from_pretrained=$tmp/qwen2_hf" \
        --set "data.input=$chats" --set data.format=chat --set "checkpoint.dir=checkpoints/$label" "$@"; then
      if grep -qE '^step +2/2 ' "$tmp/$name.$label.out"; then
        echo "ok: recipes/$name.lua trains $what"
      else
        echo "FAIL: recipes/$name.lua trains $what: no 'step 2/2' line:"; cat "$tmp/$name.$label.out"
        failures=$((failures + 1))
      fi
    fi
  }
  # Packed rows attending across their conversations; one conversation a row (packing =
  # false: the prepared shards' masks say where each starts).
  chat_trains qwen2chatacross "packed chat rows attending across their conversations" \
    --set data.document_attention=false
  chat_trains qwen2chatrows "chat data one conversation a row" --set data.packing=false
  # Other conversations into the folder those were prepared in (the recipe's default
  # data/data) are refused, naming the key, rather than trained on as the old ones.
  cp "$chats" "$tmp/chats2.jsonl"
  if run_recipe "$name" 2 otherchats "${sets[@]}" --set "model.from_pretrained=$tmp/qwen2_hf" \
      --set "data.input=$tmp/chats2.jsonl" --set data.format=chat; then
    if ! grep -qF "data.input" "$tmp/$name.otherchats.err" ||
        ! grep -qF "says its shards were prepared with inputs" "$tmp/$name.otherchats.err"; then
      echo "FAIL: other inputs into a prepared folder: the error does not say so:"
      cat "$tmp/$name.otherchats.err"
      failures=$((failures + 1))
    fi
  fi
  # Chat data without the model's tokenizer (GPT-2's has no chat tokens) is refused naming the key.
  if run_recipe "$name" 2 chatnotok "${sets[@]}" --set "data.input=$chats" --set data.format=chat; then
    if ! grep -qF "data.format" "$tmp/$name.chatnotok.err"; then
      echo "FAIL: chat data without a tokenizer: the error does not name data.format:"
      cat "$tmp/$name.chatnotok.err"
      failures=$((failures + 1))
    fi
  fi
  token_weighted_steps
fi

if ((failures != 0)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "all passed"
