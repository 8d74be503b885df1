#!/usr/bin/env bash
# The Llama measurements of issue #17, in one GPU call (docs/benchmarks.md):
#
#   tools/bench/llama.sh BUNDLE [parts...]      parts: tests parity tokenizer kernels model moe
#                                               (default all but moe)
#
# BUNDLE is tools/gpu/bundle.sh's folder with these targets built:
#   //kernels/{rope,activation,attention,embedding,layernorm}:*_test, rope_bench,
#   activation_bench, attention_bench, //nn/models/{llama,gpt2}:*_cuda_test,
#   //nn/layers:attention_cuda_test, //kernels/moe:{moe_test,moe_bench}, //lua:colossal, //tools/hf:llama_hf_case,
#   //io/tokenizer:encode_tool
# and BUNDLE/data holding gpt2.tiktoken and corpus/ (the recipe's data).
#   tests      the CUDA tests of the kernels and models above
#   parity     tools/hf/check_llama.py: transformers' tiny Llama in and out (fp32 logits)
#   tokenizer  Llama-3 tokenizer ids against transformers' (the tiny tokenizer.json fixture)
#   kernels    rope, SwiGLU and GQA attention benchmarks beside tools/bench/torch_llama_kernels.py
#   model      Llama-3.2-1B shape (or LLAMA_SHAPE's), bf16, T 2048: colossal bench recipes/llama_finetune.lua beside
#              tools/bench/torch_llama_train.py (transformers eager and torch.compile)
#   moe        kernels/moe's benchmark beside tools/bench/torch_moe.py; recipes/mixtral_zero.lua's GPU model
#              (8 experts, 2 a token), bf16, T 2048: colossal bench
#              beside torch_llama_train.py --shape mixtral_zero (MixtralForCausalLM)
# Env: LLAMA_BATCHES (default "4 8"), LLAMA_CKPT (checkpoint_ratio, default 0), LLAMA_SHAPE (a
# preset both sides know: llama3.2-1b (default), tinyllama-1.1b, qwen2.5-0.5b, qwen2.5-1.5b).
set -uo pipefail
B="$1"
shift
parts="${*:-tests parity tokenizer kernels model}"
export LD_LIBRARY_PATH="$B/lib:${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"
export COLOSSAL_DATA="$B/data"
bin="$B/bin"
summary=()
note() { summary+=("$*"); }
has() { [[ " $parts " == *" $1 "* ]]; }

if has tests; then
  for t in kernels_rope_rope_test kernels_activation_activation_test kernels_attention_attention_test \
      kernels_embedding_embedding_test kernels_layernorm_layernorm_test nn_models_llama_llama_cuda_test \
      nn_models_gpt2_gpt2_cuda_test nn_layers_attention_cuda_test kernels_moe_moe_test; do
    if out=$("$bin/$t" --gtest_brief=1 2>&1); then
      note "test $t: PASS ($(grep -oE '[0-9]+ tests?' <<<"$out" | head -1))"
    else
      echo "$out" | tail -40
      note "test $t: FAIL"
    fi
  done
fi
if has parity; then
  if python3 tools/hf/check_llama.py --case-bin "$bin/tools_hf_llama_hf_case" --work /tmp/llama_check \
      | tee /tmp/parity.out; then
    note "parity: $(tail -1 /tmp/parity.out)"
  else
    note "parity: FAIL ($(tail -1 /tmp/parity.out))"
  fi
fi
if has tokenizer; then
  dir=io/tokenizer/testdata/llama3_tiny
  "$bin/io_tokenizer_encode_tool" "$dir" >/tmp/ours.json &&
    python3 tools/hf/llama3_tokenizer_check.py "$dir" --ours /tmp/ours.json | tee /tmp/tok.out
  note "tokenizer ($dir): $(tail -1 /tmp/tok.out)"
fi
if has kernels; then
  "$bin/kernels_rope_rope_bench" --benchmark_filter=Cuda 2>&1 | grep -E "^BM_" 
  "$bin/kernels_activation_activation_bench" --benchmark_filter='Swiglu.*Cuda' 2>&1 | grep -E "^BM_"
  "$bin/kernels_attention_attention_bench" --benchmark_filter=AttentionCuda 2>&1 | grep -E "^BM_"
  (cd tools/bench && python3 torch_llama_kernels.py)
fi
if has model; then
  shape="${LLAMA_SHAPE:-llama3.2-1b}"
  : >/tmp/torch_llama.out
  for b in ${LLAMA_BATCHES:-4 8}; do
    line=$("$bin/lua_colossal" bench recipes/llama_finetune.lua --steps 10 --warmup 3 \
      --set "model.preset=$shape" \
      --set "data.micro_batch_size=$b" --set "model.checkpoint_ratio=${LLAMA_CKPT:-0}" 2>&1 | grep '^bench:' | head -1)
    note "colossal $shape B$b: ${line:-failed}"
    (cd tools/bench && python3 torch_llama_train.py --shape "$shape" --batch "$b" --seq 2048 \
      ${LLAMA_TORCH_CKPT:+--checkpointing}) 2>&1 | grep -E "^torch (eager|compile)" | while read -r l; do
      echo "$l"; done | tee -a /tmp/torch_llama.out
  done
  while read -r l; do note "$l"; done </tmp/torch_llama.out
fi
if has moe; then
  "$bin/kernels_moe_moe_bench" 2>&1 | grep -E "^BM_"
  (cd tools/bench && python3 torch_moe.py)
  : >/tmp/torch_moe.out
  for b in ${LLAMA_BATCHES:-4 8}; do
    line=$("$bin/lua_colossal" bench recipes/mixtral_zero.lua --steps 10 --warmup 3 \
      --set "data.micro_batch_size=$b" 2>&1 | grep '^bench:' | head -1)
    note "colossal mixtral_zero B$b: ${line:-failed}"
    (cd tools/bench && python3 torch_llama_train.py --shape mixtral_zero --batch "$b" --seq 2048) 2>&1 |
      grep -E "^torch (eager|compile)" | while read -r l; do echo "$l"; done | tee -a /tmp/torch_moe.out
  done
  while read -r l; do note "$l"; done </tmp/torch_moe.out
fi
echo "=== summary"
printf '%s\n' "${summary[@]}"
