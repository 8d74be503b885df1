-- GPT-2 small (124M) with ZeRO stage 2 across every worker of the job:
--
--   colossal data prepare --input ~/.cache/colossal/data/corpus --output data/corpus --name corpus
--   colossal run --nproc_per_node 8 recipes/gpt2_zero.lua
--   colossal recipes/gpt2_zero.lua --set optimizer.lr=3e-4      (one process)
--
-- A recipe returns a table; the embedded training loop reads it. Names follow
-- Colossal-AI's (LowLevelZeroPlugin, HybridAdam, CosineAnnealingWarmupLR).
-- Training from recipes is not available in this build yet: `colossal` loads
-- this file, applies --set overrides, and says what is missing (exit code 2).
local colossal = require("colossal")
local env = colossal.env()

local micro_batch = 8       -- sequences per worker per micro-step
local seq_len = 1024
local total_batch = 524288  -- tokens per optimizer step (GPT-2 paper: ~0.5M)
local accumulation = total_batch // (micro_batch * seq_len * env.world_size)

return {
  model = {
    preset = "gpt2",        -- 12 layers, 12 heads, 768 wide, 50257 tokens, 1024 positions
    init = "gpt2",          -- std 0.02, residual projections scaled by 1/sqrt(2 * n_layer)
  },

  data = {
    train = "data/corpus/corpus_train_*.bin",  -- llm.c shards from `colossal data prepare`
    val = "data/corpus/corpus_val_*.bin",
    micro_batch_size = micro_batch,
    seq_len = seq_len,
  },

  plugin = {
    name = "low_level_zero",
    stage = 2,                     -- shard optimizer states and gradients
    overlap_communication = true,  -- reduce gradients while backward runs
    reduce_bucket_size_in_m = 12,
    cpu_offload = false,
    max_norm = 1.0,                -- clip_grad_by_norm, applied by the plugin
  },

  precision = "bf16",  -- bf16 weights, fp32 master weights and Adam states

  optimizer = {
    name = "hybrid_adam",  -- fused CUDA Adam for GPU parameters, CPU Adam for offloaded ones
    lr = 6e-4,
    betas = { 0.9, 0.95 },
    eps = 1e-8,
    weight_decay = 0.1,
    adamw_mode = true,
  },

  lr_scheduler = {
    name = "cosine_annealing_warmup",  -- CosineAnnealingWarmupLR
    warmup_steps = 700,
    total_steps = 19073,               -- ~10B tokens at 0.5M tokens per step
    eta_min = 6e-5,
  },

  accumulation_steps = math.max(1, accumulation),
  seed = 1337,

  eval = { every_steps = 250, batches = 20 },
  log = { every_steps = 10 },  -- JSON lines: step, loss, lr, tokens/s

  checkpoint = {
    dir = "checkpoints/gpt2_zero",  -- safetensors, Hugging Face GPT-2 names
    every_steps = 1000,
    keep = 3,
  },
}
