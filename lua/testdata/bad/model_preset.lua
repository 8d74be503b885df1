-- expect: line 4: preset
-- A model preset that does not exist.
return {
  model = { preset = "gpt3" },
  data = { input = "lua/testdata/corpus", micro_batch_size = 2, seq_len = 8 },
  optimizer = { name = "adamw", lr = 1e-3 },
  steps = 2,
}
