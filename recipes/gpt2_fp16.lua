-- GPT-2 in fp16 with dynamic loss scaling (Colossal-AI's mixed_precision="fp16"
-- with its GradScaler parameters): the loss is multiplied by the scale before
-- backward, gradients are unscaled in the step, and a step whose gradients
-- overflow is skipped and backs the scale off after `hysteresis` overflows.
--
--   ./colossal recipes/gpt2_fp16.lua
--
-- fp16 needs a GPU; on the CPU this recipe trains in fp32 (no loss scaling).
local colossal = require("colossal")
local gpu = colossal.env().device ~= "cpu"

return {
  model = gpu and { preset = "gpt2" } or { n_layer = 2, n_head = 4, n_embd = 128, max_seq_len = 64 },
  data = { corpus = "shakespeare", micro_batch_size = gpu and 16 or 4, seq_len = gpu and 1024 or 64 },
  plugin = {
    name = "low_level_zero",
    stage = 1,
    precision = gpu and "fp16" or "fp32",
    initial_scale = 65536,   -- 2^16
    growth_factor = 2,
    backoff_factor = 0.5,
    growth_interval = 1000,
    hysteresis = 2,
    min_scale = 1,
    max_scale = 2 ^ 32,
    max_norm = 1.0,
  },
  optimizer = { name = "hybrid_adam", lr = gpu and 6e-4 or 2e-3, betas = { 0.9, 0.95 }, weight_decay = 0.1 },
  lr_scheduler = { name = "cosine_annealing_warmup", warmup_steps = 10, total_steps = gpu and 1000 or 40,
                   eta_min = gpu and 6e-5 or 2e-4 },
  steps = gpu and 1000 or 40,
  log = { every_steps = 10 },
}
