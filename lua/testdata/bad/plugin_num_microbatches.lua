-- expect: line 13: accumulation_steps: 2 micro-batches a step, but plugin.num_microbatches = 4: the pipeline runs accumulation_steps micro-batches a step; set them equal
-- Colossal-AI's num_microbatches disagreeing with the recipe's accumulation_steps.
return {
  model = { n_layer = 4, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = {
    name = "hybrid_parallel",
    pp_size = 2,
    num_microbatches = 4,
  },
  steps = 2,
  accumulation_steps = 2,
}
