-- Train a Mixtral-style sparse mixture of experts: every layer's MLP is 8
-- SwiGLU experts of which a router picks 2 per token (Hugging Face's
-- MixtralForCausalLM, model_type "mixtral"), with ZeRO stage 2.
--
--   ./colossal recipes/mixtral_zero.lua      a tiny random Mixtral (CPU), or a
--                                            1.2B one (0.36B active per token) on a GPU
--   ./colossal recipes/mixtral_zero.lua --set model.from_pretrained=/models/my-mixtral \
--       --set data.input=my.txt              fine-tunes a Hugging Face Mixtral folder
--
-- Every expert runs forward and backward each step, also one the router sent
-- no tokens (its gradient is then zero), so ZeRO's and Gemini's bookkeeping
-- never waits on an idle expert. The router's load-balancing loss
-- (transformers' output_router_logits) and expert parallelism are not in this
-- build; the experts train on one GPU's copy (data parallelism, ZeRO, Gemini).
-- Checkpoints are Hugging Face folders that transformers loads as
-- MixtralForCausalLM (checkpoints/mixtral_zero/step_N).
local colossal = require("colossal")
local env = colossal.env()
local gpu = env.device ~= "cpu"

return {
  device = "auto",
  seed = 1337,

  -- GPT-2's vocabulary (the built-in Shakespeare corpus); Mixtral-8x7B's
  -- proportions (experts 3.5x the width, 4 query heads a key/value head).
  model = gpu and { family = "llama", from_pretrained = "",
                    vocab_size = 50257, hidden_size = 1024, intermediate_size = 3584,
                    num_hidden_layers = 12, num_attention_heads = 16, num_key_value_heads = 4,
                    num_local_experts = 8, num_experts_per_tok = 2,
                    max_position_embeddings = 2048, rms_norm_eps = 1e-5, rope_theta = 1000000.0,
                    checkpoint_ratio = 0.0 }
      or { family = "llama", from_pretrained = "",  -- tiny: 2 layers, 4 experts of 128
           vocab_size = 50257, hidden_size = 64, intermediate_size = 128,
           num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2,
           num_local_experts = 4, num_experts_per_tok = 2,
           max_position_embeddings = 256, rms_norm_eps = 1e-5, rope_theta = 1000000.0 },

  data = {
    -- Placeholders for --set: prepared token shards (globs), or a text file to
    -- tokenize with the model folder's tokenizer on first use. Empty: the
    -- built-in Shakespeare corpus.
    train = "", val = "", input = "",
    tokenizer = "",
    micro_batch_size = 8,
    seq_len = gpu and 2048 or 64,
  },

  plugin = {
    name = "low_level_zero",
    stage = 2,
    max_norm = 1.0,
    precision = gpu and "bf16" or "fp32",
  },

  optimizer = {
    name = "hybrid_adam",
    lr = gpu and 3e-4 or 2e-3,
    betas = { 0.9, 0.95 },
    eps = 1e-8,
    weight_decay = 0.1,
    adamw_mode = true,
  },

  lr_scheduler = {
    name = "cosine_annealing_warmup",
    warmup_steps = gpu and 100 or 20,
    total_steps = gpu and 2000 or 200,
    eta_min = gpu and 3e-5 or 2e-4,
  },

  steps = gpu and 2000 or 200,
  eval = { every_steps = gpu and 250 or 50, batches = gpu and 10 or 4 },
  log = { every_steps = 10 },
  checkpoint = { dir = "checkpoints/mixtral_zero", every_steps = gpu and 500 or 100, keep = 2 },
  sample = { prompt = "ROMEO:", max_new_tokens = 48, temperature = 0.8, top_k = 40 },
}
