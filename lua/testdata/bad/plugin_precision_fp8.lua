-- expect: line 9: colossal.plugin.low_level_zero: precision must be "fp32", "bf16" or "fp16", got "fp8"
-- A bad value before other options: the error names it, not the options after it.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = {
    name = "low_level_zero",
    precision = "fp8",
    max_norm = 1.0,
    overlap_allgather = true,
  },
  steps = 2,
}
