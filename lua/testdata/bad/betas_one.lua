-- expect: line 6: betas must be a list of 2 numbers
-- Adam's betas with one value.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3, betas = { 0.9 } },
  steps = 2,
}
