-- expect: line 9: clip_value: low_level_zero clips by norm only
-- clip_grad_by_value with ZeRO, which shards the gradients.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = { name = "low_level_zero", stage = 2 },
  steps = 2,
  clip_value = 1.0,
}
