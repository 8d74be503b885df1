-- expect: line 10: max_norm: must be a finite number, got
-- NaN (0/0) passed every comparison and silently turned clipping off.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
  -- a computed threshold whose divisor was zero
  eval = { every_steps = 0 },
  max_norm = 0 / 0,
}
