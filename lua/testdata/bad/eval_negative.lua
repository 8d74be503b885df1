-- expect: line 8: eval.every_steps: must be >= 0
-- A negative evaluation interval.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
  eval = { every_steps = -1 },
}
