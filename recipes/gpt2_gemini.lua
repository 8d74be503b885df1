-- GPT-2 with Gemini (Colossal-AI's GeminiPlugin): chunk-based ZeRO-3, the
-- model's parameters, gradients and Adam states split over the ranks and
-- placed in device or host memory, so a model larger than the GPU trains.
--
--   ./colossal recipes/gpt2_gemini.lua                              one process
--   colossal run --nproc_per_node 2 recipes/gpt2_gemini.lua          two, every chunk sharded
--   ./colossal recipes/gpt2_gemini.lua --set plugin.placement_policy=cpu
--
-- With no GPU it trains a small GPT-2 on the CPU (small chunks, so the model
-- has several and the placement has something to place).
local colossal = require("colossal")
local env = colossal.env()
local gpu = env.device ~= "cpu"

return {
  device = "auto",
  seed = 1337,

  -- GPU: GPT-2 1.5B (gpt2-xl's shape, written out so --set can grow it,
  -- e.g. --set model.n_layer=32 --set model.n_head=32 --set model.n_embd=4096: 6.6B).
  -- At width 4096 this schedule is too hot (the loss rises over the first steps, as in
  -- PyTorch); use GPT-3's: --set optimizer.lr=1.2e-4 --set lr_scheduler.warmup_steps=3000
  -- --set lr_scheduler.total_steps=50000.
  model = gpu and { n_layer = 48, n_head = 25, n_embd = 1600, max_seq_len = 1024, checkpoint_ratio = 1.0 }
      or { n_layer = 4, n_head = 4, n_embd = 128, max_seq_len = 128 },

  data = {
    corpus = "shakespeare",
    micro_batch_size = 8,
    seq_len = gpu and 1024 or 128,
  },

  plugin = {
    name = "gemini",
    placement_policy = "auto",        -- "cuda" | "cpu" | "static" | "auto"
    search_range_m = gpu and 32 or 1, -- chunk size search, MiElements
    min_chunk_size_m = gpu and 32 or 0.0625,
    hidden_dim = gpu and 1024 or 128,
    max_prefetch = gpu and 4 or 0,    -- chunks gathered (or copied in) ahead of their use
    gpu_shares_host_adam = true,      -- the GPU also updates host chunks (CPU Adam does the rest)
    device_grad_accumulation = true,  -- accumulation: host chunks' gradients summed on the GPU
    max_norm = 1.0,                   -- clip by global norm, inside the plugin
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
  accumulation_steps = 1,

  eval = { every_steps = gpu and 250 or 50, batches = gpu and 20 or 4 },
  log = { every_steps = 10 },
  checkpoint = { dir = "checkpoints/gpt2_gemini", every_steps = gpu and 500 or 100, keep = 2 },
  sample = { prompt = "ROMEO:", max_new_tokens = 48, temperature = 0.8, top_k = 40 },
}
