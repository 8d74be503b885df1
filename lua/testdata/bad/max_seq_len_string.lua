-- expect: line 5: max_seq_len must be an integer
-- fixed_bug: recipe.lua compares data.seq_len with model.max_seq_len before the model options are checked: a raw "colossal.recipe:NNN: attempt to compare" error that names no recipe file
-- A number written as a string.
return {
  model = { n_layer = 1, n_head = 2, n_embd = 16, max_seq_len = "16" },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
