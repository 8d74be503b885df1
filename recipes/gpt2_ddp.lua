-- GPT-2 data parallel (Colossal-AI's TorchDDPPlugin): every process holds the
-- whole model, gradients are averaged in 25 MB buckets while backward runs;
-- gradient accumulation with no_sync on all but the last micro-batch.
--
--   colossal run --nproc_per_node 2 recipes/gpt2_ddp.lua
--   ./colossal recipes/gpt2_ddp.lua --set steps=20
local colossal = require("colossal")
local gpu = colossal.env().device ~= "cpu"

return {
  model = gpu and { preset = "gpt2" } or { n_layer = 2, n_head = 4, n_embd = 128, max_seq_len = 64 },
  data = { corpus = "shakespeare", micro_batch_size = gpu and 16 or 4, seq_len = gpu and 1024 or 64 },
  plugin = { name = "torch_ddp", bucket_cap_mb = 25 },
  precision = gpu and "bf16" or "fp32",
  optimizer = { name = "adamw", lr = gpu and 6e-4 or 2e-3, betas = { 0.9, 0.95 }, weight_decay = 0.1 },
  lr_scheduler = { name = "linear_warmup", warmup_steps = 10, total_steps = gpu and 1000 or 60,
                   eta_min = gpu and 6e-5 or 2e-4 },
  steps = gpu and 1000 or 60,
  accumulation_steps = 2,
  max_norm = 1.0,
  log = { every_steps = 10 },
  eval = { every_steps = gpu and 200 or 30, batches = 4 },
}
