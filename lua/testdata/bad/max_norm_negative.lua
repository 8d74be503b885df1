-- expect: line 12: max_norm: must be >= 0
-- fixed_bug: colossal._key_line finds the first `max_norm =` in the file, the plugin's (line 9), not the top-level key
-- A negative top-level max_norm in a recipe whose plugin also has one.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = 16 },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  plugin = {
    name = "low_level_zero", max_norm = 1.0,
  },
  steps = 2,
  max_norm = -1,
}
