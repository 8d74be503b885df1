-- GPT-2 with ZeRO stage 2 (Colossal-AI's LowLevelZeroPlugin) on the built-in
-- Shakespeare corpus: the main job.
--
--   ./colossal recipes/gpt2_zero.lua                          one process
--   colossal run --nproc_per_node 4 recipes/gpt2_zero.lua      four, gradients and Adam states sharded
--   ./colossal recipes/gpt2_zero.lua --set steps=20 --set optimizer.lr=3e-4
--
-- With no GPU it trains a small GPT-2 (4 layers, 128 wide) on the CPU for a
-- few minutes; on a GPU, GPT-2 small (124M) at sequence length 1024. The
-- recipe returns a table; the embedded loop (colossal.recipe) trains it. The
-- Python equivalent is in README.md ("How a recipe maps to Colossal-AI").
local colossal = require("colossal")
local env = colossal.env()
local gpu = env.device ~= "cpu"

return {
  device = "auto",
  seed = 1337,

  model = gpu and { preset = "gpt2" }                       -- 12 layers, 12 heads, 768 wide
      or { n_layer = 4, n_head = 4, n_embd = 128, max_seq_len = 128 },

  data = {
    corpus = "shakespeare",           -- tokenized into data/shakespeare/ on first use
    micro_batch_size = gpu and 8 or 8,
    seq_len = gpu and 1024 or 128,
  },

  plugin = {
    name = "low_level_zero",
    stage = 2,                        -- shard optimizer states and gradients
    overlap_communication = true,     -- reduce gradients while backward runs (false: after it)
    overlap_allgather = true,         -- gather the updated weights while the next forward runs
    reduce_bucket_size_in_m = 12,
    max_norm = 1.0,                   -- clip by global norm, inside the plugin
    cpu_offload = false,              -- true: fp32 masters + Adam states in pinned host memory, CPU Adam
    precision = gpu and "bf16" or "fp32",  -- bf16 weights, fp32 master shards (GPU)
  },

  optimizer = {
    name = "hybrid_adam",
    lr = gpu and 6e-4 or 2e-3,
    betas = { 0.9, 0.95 },
    eps = 1e-8,
    weight_decay = 0.1,
    adamw_mode = true,
  },

  lr_scheduler = {
    name = "cosine_annealing_warmup", -- CosineAnnealingWarmupLR
    warmup_steps = gpu and 100 or 20,
    total_steps = gpu and 2000 or 200,
    eta_min = gpu and 6e-5 or 2e-4,
  },

  steps = gpu and 2000 or 200,
  accumulation_steps = 1,

  eval = { every_steps = gpu and 250 or 50, batches = gpu and 20 or 4 },
  log = { every_steps = 10 },          -- stdout; every step goes to checkpoint.dir/log.jsonl
  checkpoint = { dir = "checkpoints/gpt2_zero", every_steps = gpu and 500 or 100, keep = 2 },
  sample = { prompt = "ROMEO:", max_new_tokens = 48, temperature = 0.8, top_k = 40 },
}
