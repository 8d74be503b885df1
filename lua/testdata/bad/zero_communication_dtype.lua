-- expect: line 11: communication_dtype = "fp32" is not available
-- Reducing bf16 gradients in fp32 (Colossal-AI's communication_dtype), which this build does not do.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = {
    name = "low_level_zero",
    stage = 2,
    precision = "bf16",
    communication_dtype = "fp32",
  },
  steps = 2,
}
