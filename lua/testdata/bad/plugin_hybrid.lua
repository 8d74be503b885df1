-- expect: line 8: plugin.name: must be one of "gemini", "low_level_zero", "torch_ddp"
-- A Colossal-AI plugin this build does not have yet.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = {
    name = "hybrid_parallel",
    tp_size = 2,
  },
  steps = 2,
}
