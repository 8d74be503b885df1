-- GPT-2 small (124M) in one process: one GPU if there is one, else the CPU
-- (fp32, OpenBLAS). No plugin: plain data parallelism of one.
--
--   colossal recipes/gpt2_single.lua --set data.micro_batch_size=4
--
-- Training from recipes is not available in this build yet: `colossal` loads
-- this file, applies --set overrides, and says what is missing (exit code 2).
local colossal = require("colossal")
local on_gpu = colossal.env().device ~= "cpu"

return {
  model = { preset = "gpt2" },

  data = {
    train = "data/corpus/corpus_train_*.bin",
    val = "data/corpus/corpus_val_*.bin",
    micro_batch_size = on_gpu and 16 or 4,
    seq_len = 1024,
  },

  plugin = { name = "ddp" },  -- torch_ddp in Colossal-AI; with one worker, no communication

  precision = on_gpu and "bf16" or "fp32",

  optimizer = {
    name = "adamw",
    lr = 6e-4,
    betas = { 0.9, 0.95 },
    eps = 1e-8,
    weight_decay = 0.1,
  },

  lr_scheduler = {
    name = "cosine_annealing_warmup",
    warmup_steps = 700,
    total_steps = 19073,
    eta_min = 6e-5,
  },

  accumulation_steps = on_gpu and 32 or 128,  -- ~0.5M tokens per optimizer step
  clip_grad_norm = 1.0,                       -- clip_grad_by_norm
  seed = 1337,

  eval = { every_steps = 250, batches = 20 },
  log = { every_steps = 10 },

  checkpoint = {
    dir = "checkpoints/gpt2_single",
    every_steps = 1000,
    keep = 3,
  },
}
