-- expect: line 9: unknown option 'betta'
-- A typo in an optimizer option (checked by colossal.optim.adamw).
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = {
    name = "adamw",
    lr = 1e-3,
    betta = { 0.9, 0.95 },
  },
  steps = 2,
}
