-- GPT-2 with hybrid parallelism (Colossal-AI's HybridParallelPlugin): the
-- GPT-2 side of recipes/llama_hybrid.lua, for the layouts GPT-2's shapes allow.
--
--   colossal run --nproc_per_node 2 recipes/gpt2_hybrid.lua       two pipeline stages (1F1B)
--   colossal run --nproc_per_node 4 recipes/gpt2_hybrid.lua --set plugin.pp_size=4
--   ... --set plugin.pp_style=interleaved --set plugin.num_model_chunks=2
--   ./colossal recipes/gpt2_hybrid.lua                             one process
--
-- On a GPU the model is GPT-2 1.5B (gpt2-xl: 48 layers, 25 heads). Its 25
-- heads split over no tensor-parallel size but 5 (tp_size must divide
-- n_head), so this recipe splits it into pipeline stages (pp_size 2 wherever
-- the job has two or more processes) with ZeRO-1 over the copies; gpt2-large
-- (20 heads) and gpt2-medium (16) also take tp_size 2 and 4
-- (--set model.preset=gpt2-large --set plugin.tp_size=2 --set plugin.pp_size=1).
-- Each step's accumulation_steps micro-batches run through the stages (at
-- least pp_size of them keep every stage busy; the interleaved schedule takes
-- a multiple of pp_size). The sample at the end runs through the stages too.
local colossal = require("colossal")
local env = colossal.env()
local gpu = env.device ~= "cpu"

return {
  device = "auto",
  seed = 1337,

  model = gpu and { preset = "gpt2-xl", checkpoint_ratio = 1.0 }
      or { n_layer = 4, n_head = 4, n_embd = 128, max_seq_len = 128 },

  data = {
    corpus = "shakespeare",
    micro_batch_size = gpu and 4 or 4,
    seq_len = gpu and 1024 or 128,
  },

  plugin = {
    name = "hybrid_parallel",
    tp_size = 1,
    pp_size = env.world_size >= 2 and 2 or 1,
    pp_style = "1f1b",                -- or "interleaved", with num_model_chunks > 1
    num_model_chunks = 1,
    zero_stage = 1,                   -- ZeRO-1 over the data-parallel copies
    max_norm = 1.0,
    precision = gpu and "bf16" or "fp32",
  },

  optimizer = {
    name = "hybrid_adam",
    lr = gpu and 2e-4 or 2e-3,
    betas = { 0.9, 0.95 },
    eps = 1e-8,
    weight_decay = 0.1,
    adamw_mode = true,
  },

  lr_scheduler = {
    name = "cosine_annealing_warmup",
    warmup_steps = gpu and 100 or 20,
    total_steps = gpu and 2000 or 200,
    eta_min = gpu and 2e-5 or 2e-4,
  },

  steps = gpu and 2000 or 200,
  accumulation_steps = 4,             -- the pipeline's micro-batches per step

  eval = { every_steps = gpu and 250 or 50, batches = gpu and 10 or 4 },
  log = { every_steps = 10 },
  checkpoint = { dir = "checkpoints/gpt2_hybrid", every_steps = gpu and 500 or 100, keep = 2 },
  sample = { prompt = "ROMEO:", max_new_tokens = 48, temperature = 0.8, top_k = 40 },
}
