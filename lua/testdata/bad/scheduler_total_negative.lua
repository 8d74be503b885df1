-- expect: line 10: total_steps (-5) must be >= warmup_steps (2)
-- A negative total_steps is a bad value, not a missing key.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  lr_scheduler = {
    name = "linear_warmup",
    warmup_steps = 2,
    total_steps = -5,
  },
  steps = 2,
}
