-- expect: line 10: cpu_offload = true is not available in this build
-- Colossal-AI's ZeRO offload, which this build does not have.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "hybrid_adam", lr = 1e-3 },
  plugin = {
    name = "low_level_zero",
    stage = 2,
    cpu_offload = true,
  },
  steps = 2,
}
