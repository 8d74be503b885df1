-- expect: line 10: betas must be in [0, 1), got (0.9, 1.5)
-- A beta of 1.5: the optimizer's own check names the key, so the error
-- points at the betas line, not the optimizer table's.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = {
    name = "adamw",
    lr = 1e-3,
    betas = { 0.9, 1.5 },
  },
  steps = 2,
}
