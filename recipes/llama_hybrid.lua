-- A Llama-family model with tensor parallelism (Colossal-AI's
-- HybridParallelPlugin): attention heads and MLP columns split over tp_size
-- ranks, ZeRO-1 over the copies.
--
--   colossal run --nproc_per_node 2 recipes/llama_hybrid.lua   tp 2
--   colossal run --nproc_per_node 4 recipes/llama_hybrid.lua   tp 2 x dp 2, ZeRO-1 across the copies
--   ./colossal recipes/llama_hybrid.lua                          one process: tp 1 (plain ZeRO-1)
--
--   colossal run --nproc_per_node 4 recipes/llama_hybrid.lua --set plugin.pp_size=2
--                                                                tp 2 x pp 2: two pipeline stages
--   ... --set plugin.pp_size=2 --set plugin.pp_style=interleaved --set plugin.num_model_chunks=2
--                                                                the same, two model chunks a stage
--
-- tp_size is 2 wherever the job has two or more processes (it must divide
-- them, and the heads, key/value heads and intermediate size). Every rank of
-- one tensor-parallel group reads the same batches; the data splits over the
-- data-parallel copies. With pp_size > 1 each step's accumulation_steps
-- micro-batches run through the stages on the 1F1B schedule (at least
-- pp_size of them keep every stage busy), and the sample's tokens run
-- through the stages too. The
-- interleaved schedule gives each stage num_model_chunks slices of the
-- layers (a micro-batch goes round the stages once per chunk: a bubble
-- num_model_chunks times smaller) and takes a multiple of pp_size
-- micro-batches.
-- --set plugin.enable_sequence_parallelism=true splits the sequence over the
-- tensor-parallel ranks between the attention and MLP regions (Megatron's
-- sequence parallelism, Colossal-AI's split_gather).
-- --set plugin.tp_size=1 --set plugin.enable_sequence_parallelism=true
-- --set plugin.sequence_parallelism_mode=all_to_all --set plugin.sp_size=2
-- splits every sequence over two ranks through the whole model instead
-- (DeepSpeed-Ulysses: attention trades positions for heads), for long
-- sequences.
local colossal = require("colossal")
local env = colossal.env()
local gpu = env.device ~= "cpu"

return {
  device = "auto",
  seed = 1337,

  model = gpu and { family = "llama", preset = "llama3.2-1b", max_position_embeddings = 2048,
                    checkpoint_ratio = 1.0 }
      or { family = "llama",  -- tiny: 4 layers, 128 wide, grouped-query attention
           vocab_size = 50257, hidden_size = 128, intermediate_size = 344,
           num_hidden_layers = 4, num_attention_heads = 4, num_key_value_heads = 2,
           max_position_embeddings = 256, rms_norm_eps = 1e-5, rope_theta = 10000.0,
           tie_word_embeddings = true },

  data = {
    corpus = "shakespeare",
    micro_batch_size = gpu and 2 or 4,
    seq_len = gpu and 2048 or 128,
  },

  plugin = {
    name = "hybrid_parallel",
    tp_size = env.world_size >= 2 and 2 or 1,
    pp_size = 1,
    pp_style = "1f1b",                -- or "interleaved", with num_model_chunks > 1
    num_model_chunks = 1,
    enable_sequence_parallelism = false,  -- true: norms and residuals on T / tp_size positions (split_gather)
    sequence_parallelism_mode = "split_gather",  -- or "all_to_all" (Ulysses) over sp_size ranks
    sp_size = 1,
    zero_stage = 1,                   -- ZeRO-1 over the data-parallel copies
    max_norm = 1.0,                   -- the whole model's norm, over every rank
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
    warmup_steps = gpu and 50 or 20,
    total_steps = gpu and 1000 or 200,
    eta_min = gpu and 3e-5 or 2e-4,
  },

  steps = gpu and 1000 or 200,
  accumulation_steps = 2,             -- the pipeline's micro-batches per step

  eval = { every_steps = gpu and 250 or 50, batches = gpu and 10 or 4 },
  log = { every_steps = 10 },
  checkpoint = { dir = "checkpoints/llama_hybrid", every_steps = gpu and 500 or 100, keep = 2 },
  sample = { prompt = "ROMEO:", max_new_tokens = 48, temperature = 0.8, top_k = 40 },
}
