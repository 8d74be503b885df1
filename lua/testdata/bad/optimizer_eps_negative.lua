-- expect: line 7: eps must be >= 0
-- A negative eps, blamed on the plugin (which builds the optimizer) until it
-- was checked where the recipe writes it.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3, eps = -1e-8 },
  plugin = { name = "low_level_zero", stage = 1 },
  steps = 2,
}
