-- expect: line 7: precision: must be one of "fp32", "bf16", "fp16", got "fp8"
-- A precision this build does not have.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  precision = "fp8",
  steps = 2,
}
