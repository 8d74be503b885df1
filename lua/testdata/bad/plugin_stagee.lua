-- expect: line 9: unknown option 'stagee'; did you mean "stage"?
-- A typo in a plugin option (checked by colossal.plugin.low_level_zero).
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = {
    name = "low_level_zero",
    stagee = 2,
  },
  steps = 2,
}
