-- GPT-2 on one device, no plugin: bf16 weights with fp32 master weights on a
-- GPU (AdamW, fused CUDA kernel), fp32 on the CPU.
--
--   ./colossal recipes/gpt2_single.lua
--   ./colossal recipes/gpt2_single.lua --set steps=50 --set data.micro_batch_size=4
local colossal = require("colossal")
local gpu = colossal.env().device ~= "cpu"

return {
  model = gpu and { preset = "gpt2" } or { n_layer = 4, n_head = 4, n_embd = 128, max_seq_len = 128 },
  data = { corpus = "shakespeare", micro_batch_size = gpu and 16 or 8, seq_len = gpu and 1024 or 64 },
  precision = gpu and "bf16" or "fp32",
  optimizer = { name = "adamw", lr = gpu and 6e-4 or 2e-3, betas = { 0.9, 0.95 }, weight_decay = 0.1 },
  lr_scheduler = { name = "cosine_annealing_warmup", warmup_steps = 20, total_steps = gpu and 1000 or 100,
                   eta_min = gpu and 6e-5 or 2e-4 },
  steps = gpu and 1000 or 100,
  max_norm = 1.0,
  log = { every_steps = 10 },
  checkpoint = { dir = "checkpoints/gpt2_single", every_steps = gpu and 500 or 50, keep = 2 },
  sample = { prompt = "JULIET:", max_new_tokens = 48 },
}
