#!/usr/bin/env bash
# tools/hf/check_from_pretrained.sh BUNDLE (GPU host, repository root; BUNDLE: tools/gpu/bundle.sh //lua:colossal
# with data/ holding corpus/ and gpt2.tiktoken).
# from_pretrained on the GPU (bf16): a tiny Llama trained 60 steps and saved, then fine-tuned
# from its step directory with low_level_zero (ZeRO-2) and with gemini; the first steps' losses
# must continue from the saved run's, not restart near ln(vocab) = 10.8.
B="$1"
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64 COLOSSAL_DATA=$B/data
repo=$PWD; work=$(mktemp -d); cd $work; mkdir -p r
write() {  # write NAME PLUGIN STEPS LR PRETRAINED
cat > r/$1.lua <<LUA
return {
  model = { family = "llama", from_pretrained = "$5", vocab_size = 50257, hidden_size = 256,
            intermediate_size = 512, num_hidden_layers = 2, num_attention_heads = 4,
            num_key_value_heads = 2, max_position_embeddings = 256, tie_word_embeddings = false },
  data = { corpus = "shakespeare", micro_batch_size = 16, seq_len = 256 },
  plugin = { name = "$2", precision = "bf16", max_norm = 1.0 },
  optimizer = { name = "hybrid_adam", lr = $4, weight_decay = 0.0 },
  steps = $3,
  log = { every_steps = 1 },
  checkpoint = { dir = "ck_$1", every_steps = $3, keep = 1 },
}
LUA
}
write base low_level_zero 60 3e-3 ""
$B/bin/lua_colossal r/base.lua 2>&1 | grep -E "^step +(1|58|59|60)/" 
for p in low_level_zero gemini; do
  write ft_$p $p 4 1e-5 "$work/ck_base/step_000060"
  echo "== from_pretrained, $p"
  $B/bin/lua_colossal r/ft_$p.lua 2>&1 | grep -E "^step|rror"
done
